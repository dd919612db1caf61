"""p4runtime-shell, unmodified, drives the embedded target running beamer.p4 over
P4Runtime: it pushes the pipeline, inserts, reads, modifies and deletes entries of
beamer.p4's tables, and reads the counters that real tagged packets incremented."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import text_format
from p4runtime_sh import shell as sh
from scapy.layers.inet import IP, UDP, IPOption
from scapy.layers.l2 import Ether

from softswitch.frontend import compile_file
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.ports import MemoryPort
from softswitch.switch import Switch

BEAMER_P4 = Path(__file__).resolve().parent.parent / "p4src" / "beamer.p4"
DEVICE_ID = 0
HOST_PORT = 2


@pytest.fixture
def switch(tmp_path: Path) -> Iterator[Switch]:
    """A switch with no program, its P4Runtime server, and p4runtime-shell pushing beamer.p4."""
    program = compile_file(BEAMER_P4)
    p4info_path = tmp_path / "beamer.p4info.txtpb"
    p4info_path.write_text(text_format.MessageToString(program.p4info))
    device_config_path = tmp_path / "beamer.json"
    device_config_path.write_bytes(program.device_config())
    switch = Switch()
    switch.add_memory_port(1)
    switch.add_memory_port(HOST_PORT)
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
        switch.close()


def tagged_frame(experiment: int, stage: int, coflow: int) -> bytes:
    tag = (
        bytes([0x9E, 12, 0x10, 0])
        + experiment.to_bytes(2, "big")
        + stage.to_bytes(2, "big")
        + coflow.to_bytes(4, "big")
    )
    packet = (
        Ether(dst="02:00:00:00:00:fe", src="02:00:00:00:00:01")
        / IP(src="10.0.0.1", dst="10.0.0.2", options=[IPOption(tag)])
        / UDP(sport=4000, dport=5000)
        / (b"p" * 64)
    )
    return bytes(packet)


def install_route() -> None:
    route = sh.TableEntry("MyIngress.ipv4_lpm")(action="MyIngress.ipv4_forward")
    route.match["hdr.ipv4.dstAddr"] = "10.0.0.2/32"
    route.action["dstAddr"] = "02:00:00:00:00:02"
    route.action["port"] = str(HOST_PORT)
    route.insert()


def coflow_entry(class_id: int) -> sh.TableEntry:
    entry = sh.TableEntry("MyIngress.coflow_class")(action="MyIngress.set_class")
    entry.match["hdr.beamer_tag.experiment_id"] = "1"
    entry.match["hdr.beamer_tag.stage_id"] = "2"
    entry.match["hdr.beamer_tag.coflow_id"] = str(0x0001_0005)
    entry.action["class_id"] = str(class_id)
    return entry


def test_shell_pushes_beamer_p4(switch: Switch) -> None:
    assert switch.pipeline is not None
    assert "MyIngress.coflow_class" in switch.pipeline.runtime.tables_by_name
    assert sh.client is not None
    assert sh.client.api_version() == "1.4.1"


def test_shell_inserts_reads_modifies_and_deletes_entries(switch: Switch) -> None:
    install_route()
    coflow_entry(class_id=6).insert()
    (read_back,) = sh.TableEntry("MyIngress.coflow_class").read()
    assert read_back.match["hdr.beamer_tag.coflow_id"].exact.value == bytes([1, 0, 5])
    assert read_back.action["class_id"].value == b"\x06"

    coflow_entry(class_id=7).modify()
    (modified,) = sh.TableEntry("MyIngress.coflow_class").read()
    assert modified.action["class_id"].value == b"\x07"
    assert switch.pipeline is not None
    (installed,) = switch.pipeline.runtime.tables_by_name["MyIngress.coflow_class"].entries.values()
    assert installed.action.params == (7,)

    (route,) = sh.TableEntry("MyIngress.ipv4_lpm").read()
    assert route.match["hdr.ipv4.dstAddr"].lpm.prefix_len == 32
    assert route.action["dstAddr"].value == bytes.fromhex("020000000002")

    coflow_entry(class_id=7).delete()
    assert list(sh.TableEntry("MyIngress.coflow_class").read()) == []


def test_shell_sets_the_default_class(switch: Switch) -> None:
    default = sh.TableEntry("MyIngress.default_class")(is_default=True)
    default.action = sh.Action("MyIngress.set_class")
    default.action["class_id"] = "2"
    default.modify()
    (read_back,) = sh.TableEntry("MyIngress.default_class")(is_default=True).read()
    assert read_back.action["class_id"].value == b"\x02"


def test_shell_reports_server_errors(switch: Switch) -> None:
    coflow_entry(class_id=1).insert()
    with pytest.raises(Exception, match="ALREADY_EXISTS"):
        coflow_entry(class_id=1).insert()
    with pytest.raises(Exception, match="NOT_FOUND"):
        missing = coflow_entry(class_id=1)
        missing.match["hdr.beamer_tag.stage_id"] = "9"
        missing.delete()


def test_shell_reads_counters_of_real_packets(switch: Switch) -> None:
    install_route()
    stage = sh.TableEntry("MyIngress.stage_class")(action="MyIngress.set_class")
    stage.match["hdr.beamer_tag.experiment_id"] = "1"
    stage.match["hdr.beamer_tag.stage_id"] = "2"
    stage.action["class_id"] = "3"
    stage.insert()
    coflow_entry(class_id=6).insert()

    frame = tagged_frame(experiment=1, stage=2, coflow=0x0001_0005)
    for _ in range(3):
        switch.send(1, frame)
    port = switch.ports[HOST_PORT]
    assert isinstance(port, MemoryPort)
    departures = port.take()
    assert len(departures) == 3
    assert Ether(departures[0].frame)[IP].tos == 6 << 5  # CS6: the coflow entry won

    (queue_six,) = sh.CounterEntry("MyEgress.queue_counter")(index=6).read()
    assert queue_six.data.packet_count == 3
    others = [c for c in sh.CounterEntry("MyEgress.queue_counter").read() if c.index != 6]
    assert len(others) == 7 and all(c.data.packet_count == 0 for c in others)

    direct = sh.DirectCounterEntry("MyIngress.stage_counter")
    direct.table_entry.match["hdr.beamer_tag.experiment_id"] = "1"
    direct.table_entry.match["hdr.beamer_tag.stage_id"] = "2"
    (stage_hits,) = direct.read()
    assert stage_hits.data.packet_count == 3
    assert stage_hits.data.byte_count == 3 * len(frame)

    reset = sh.CounterEntry("MyEgress.queue_counter")
    reset.index = 6
    reset.packet_count = 0
    reset.byte_count = 0
    reset.modify()
    (cleared,) = sh.CounterEntry("MyEgress.queue_counter")(index=6).read()
    assert cleared.data.packet_count == 0
