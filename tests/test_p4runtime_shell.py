"""p4runtime-shell, unmodified, drives the embedded target over P4Runtime: pushes the
pipeline, inserts, reads, modifies and deletes table entries, and reads counters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import text_format
from p4runtime_sh import shell as sh
from test_p4runtime_server_support import (
    StandInPipeline,
    StandInProgram,
    StandInSwitch,
    standin_p4info,
)

from softswitch.p4rt import pipeline_config
from softswitch.p4runtime_server import P4RuntimeServer

DEVICE_ID = 0


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[StandInSwitch]:
    monkeypatch.setattr(pipeline_config, "CompiledProgram", StandInProgram)
    monkeypatch.setattr(pipeline_config, "Pipeline", StandInPipeline)
    program = StandInProgram(standin_p4info())
    p4info_path = tmp_path / "program.p4info.txtpb"
    p4info_path.write_text(text_format.MessageToString(program.p4info))
    device_config_path = tmp_path / "program.json"
    device_config_path.write_bytes(program.device_config())
    switch = StandInSwitch()
    server = P4RuntimeServer(switch, DEVICE_ID, "127.0.0.1:0")
    server.start()
    try:
        sh.setup(
            device_id=DEVICE_ID,
            grpc_addr=server.addr,
            election_id=(0, 1),
            config=sh.FwdPipeConfig(str(p4info_path), str(device_config_path)),
            verbose=False,
        )
        try:
            yield switch
        finally:
            sh.teardown()
    finally:
        server.stop(0)


def test_shell_pushes_the_pipeline(shell: StandInSwitch) -> None:
    assert shell.pipeline is not None
    assert "ingress.classify" in shell.pipeline.runtime.tables_by_name


def test_shell_inserts_reads_modifies_and_deletes_entries(shell: StandInSwitch) -> None:
    entry = sh.TableEntry("ingress.classify")(action="set_class")
    entry.match["tag.experiment"] = "7"
    entry.match["tag.stage"] = "2"
    entry.action["class_id"] = "5"
    entry.insert()

    read_back = list(sh.TableEntry("ingress.classify").read())
    assert len(read_back) == 1
    assert read_back[0].match["tag.experiment"].exact.value == b"\x07"
    assert read_back[0].action["class_id"].value == b"\x05"

    entry.action["class_id"] = "6"
    entry.modify()
    (modified,) = sh.TableEntry("ingress.classify").read()
    assert modified.action["class_id"].value == b"\x06"
    assert next(
        iter(shell.pipeline.runtime.table(modified._info.preamble.id).entries.values())
    ).action.params == (6,)

    entry.delete()
    assert list(sh.TableEntry("ingress.classify").read()) == []


def test_shell_lpm_entries(shell: StandInSwitch) -> None:
    entry = sh.TableEntry("ingress.ipv4_lpm")(action="set_egress")
    entry.match["hdr.ipv4.dst"] = "10.0.1.0/24"
    entry.action["port"] = "3"
    entry.insert()
    (read_back,) = sh.TableEntry("ingress.ipv4_lpm").read()
    assert read_back.match["hdr.ipv4.dst"].lpm.prefix_len == 24
    assert read_back.match["hdr.ipv4.dst"].lpm.value == bytes([10, 0, 1, 0])


def test_shell_reports_errors_from_the_server(shell: StandInSwitch) -> None:
    entry = sh.TableEntry("ingress.classify")(action="set_class")
    entry.match["tag.experiment"] = "1"
    entry.match["tag.stage"] = "1"
    entry.action["class_id"] = "1"
    entry.insert()
    with pytest.raises(Exception, match="ALREADY_EXISTS"):
        entry.insert()


def test_shell_reads_and_writes_counters(shell: StandInSwitch) -> None:
    stage_bytes = sh.CounterEntry("ingress.stage_bytes")
    cells = list(stage_bytes.read())
    assert len(cells) == 8
    cell = sh.CounterEntry("ingress.stage_bytes")
    cell.index = 2
    cell.byte_count = 3000
    cell.packet_count = 2
    cell.modify()
    (read_cell,) = sh.CounterEntry("ingress.stage_bytes")(index=2).read()
    assert (read_cell.data.byte_count, read_cell.data.packet_count) == (3000, 2)

    entry = sh.TableEntry("ingress.classify")(action="set_class")
    entry.match["tag.experiment"] = "1"
    entry.match["tag.stage"] = "4"
    entry.action["class_id"] = "2"
    entry.insert()
    direct = sh.DirectCounterEntry("ingress.class_hits")
    direct.table_entry.match["tag.experiment"] = "1"
    direct.table_entry.match["tag.stage"] = "4"
    (hits,) = direct.read()
    assert hits.data.packet_count == 0
