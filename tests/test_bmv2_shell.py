"""One p4runtime-shell script, unchanged, against BMv2 and the embedded target.

The script pushes beamer.p4 (p4c's P4Info; BMv2's JSON or our device config),
installs a route and a stage class, sends a tagged frame, reads the entries and
the direct counter, modifies and deletes. Its transcript must be the same on
both targets. The controller on BMv2 is covered by test_bmv2_emulation.py.
Needs root, p4c and simple_switch_grpc; skipped otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from bmv2_tools import REPO_ROOT
from diff_harness import SwitchUnderTest, switch_under_test
from p4runtime_sh import shell as sh
from scapy.layers.inet import IP, UDP, IPOption
from scapy.layers.l2 import Ether

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")

BEAMER = REPO_ROOT / "p4src" / "beamer.p4"


def tagged_frame() -> bytes:
    tag = IPOption(bytes([0x9E, 12, 0x10, 0, 0, 1, 0, 2, 0, 0, 0, 9]))
    return bytes(
        Ether(src="02:00:00:00:00:aa", dst="02:00:00:00:00:fe")
        / IP(src="10.0.0.1", dst="10.0.1.2", options=[tag])
        / UDP(sport=4000, dport=5000)
        / (b"s" * 64)
    )


def shell_script(switch: SwitchUnderTest, p4info: Path, device_config: Path) -> list[Any]:
    """What a user would type into p4runtime-shell, with what it shows recorded."""
    transcript: list[Any] = []
    address = switch.client.address
    switch.client.close()  # the shell becomes the primary controller
    sh.setup(
        device_id=0,
        grpc_addr=address,
        election_id=(0, 1),
        config=sh.FwdPipeConfig(str(p4info), str(device_config)),
        verbose=False,
    )
    try:
        route = sh.TableEntry("MyIngress.ipv4_lpm")(action="MyIngress.ipv4_forward")
        route.match["hdr.ipv4.dstAddr"] = "10.0.1.0/24"
        route.action["dstAddr"] = "02:00:00:00:00:bb"
        route.action["port"] = "1"
        route.insert()
        stage = sh.TableEntry("MyIngress.stage_class")(action="MyIngress.set_class")
        stage.match["hdr.beamer_tag.experiment_id"] = "1"
        stage.match["hdr.beamer_tag.stage_id"] = "2"
        stage.action["class_id"] = "5"
        stage.insert()
        out = switch.exchange([(0, tagged_frame())])
        transcript.append({port: [f.hex() for f in frames] for port, frames in out.items()})
        transcript.append(sorted(str(e.msg()) for e in sh.TableEntry("MyIngress.ipv4_lpm").read()))
        read = sh.TableEntry("MyIngress.stage_class")
        read.counter_data.packet_count = 0  # ask for the direct counter too
        transcript.append([e.counter_data.packet_count for e in read.read()])
        stage.action["class_id"] = "2"
        stage.modify()
        transcript.append(
            [e.action["class_id"] for e in sh.TableEntry("MyIngress.stage_class").read()]
        )
        stage.delete()
        try:
            stage.delete()
        except Exception as error:  # the shell's write error, listing each failed update
            transcript.append(str(error).count("NOT_FOUND"))
        transcript.append(len(list(sh.TableEntry("MyIngress.stage_class").read())))
    finally:
        sh.teardown()
    return transcript


def test_one_shell_script_gives_the_same_transcript_on_both_targets(tmp_path: Path) -> None:
    transcripts = {}
    for target in ("bmv2", "embedded"):
        with switch_under_test(target, BEAMER, set_pipeline=False) as switch:
            p4info = tmp_path / f"{target}.p4info.txtpb"
            p4info.write_text(str(switch.p4info))
            device_config = tmp_path / f"{target}.config"
            device_config.write_bytes(switch.device_config)
            transcripts[target] = shell_script(switch, p4info, device_config)
    assert transcripts["embedded"] == transcripts["bmv2"]
    frames = transcripts["bmv2"][0]
    assert len(frames[1]) == 1 and not frames[0] and not frames[2]
    assert transcripts["bmv2"][2] == [1]  # the direct counter saw the frame
