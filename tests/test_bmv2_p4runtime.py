"""Differential P4Runtime tests: one call sequence against BMv2 and the embedded target.

Every step's outcome (the gRPC status code, and for a batch the code of each
update; for reads the entries or counter values) must be the same on both
targets. Where BMv2 departs from the P4Runtime specification the embedded
target follows the spec, and the step is listed in ``SPEC_OVER_BMV2`` with
the reason (docs/p4runtime.md, "BMv2 and the specification").
Needs root, p4c and simple_switch_grpc; skipped otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from bmv2_tools import REPO_ROOT
from diff_harness import SwitchUnderTest, switch_under_test
from p4.v1 import p4runtime_pb2
from scapy.layers.inet import IP, UDP, IPOption
from scapy.layers.l2 import Ether

from control.entries import ActionCall, EntryKey, Exact, Lpm, Ternary
from control.p4runtime_client import P4RuntimeError, WriteError

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")

BEAMER = REPO_ROOT / "p4src" / "beamer.p4"
L2_STATS = REPO_ROOT / "tests" / "p4progs" / "l2_stats.p4"
INSERT, MODIFY, DELETE = (
    p4runtime_pb2.Update.INSERT,
    p4runtime_pb2.Update.MODIFY,
    p4runtime_pb2.Update.DELETE,
)

SPEC_OVER_BMV2: dict[str, tuple[Any, str]] = {
    "parameter wider than its bitwidth": (
        ("UNKNOWN", [(0, "OUT_OF_RANGE")]),
        "the spec's bytestring rules ask for OUT_OF_RANGE; BMv2 answers INVALID_ARGUMENT",
    ),
}
"""Steps where the embedded target follows the spec and BMv2 does not: our outcome, why."""


def outcome(step: Callable[[], Any]) -> Any:
    """What a step returns, or its status: the code, and per update for a failed batch."""
    try:
        result = step()
    except WriteError as error:
        return (error.code.name, [(e.index, e.code.name) for e in error.errors])
    except P4RuntimeError as error:
        return error.code.name
    return "OK" if result is None else result


def route(prefix: int, length: int, port: int) -> tuple[EntryKey, ActionCall]:
    return (
        EntryKey("ipv4_lpm", (("hdr.ipv4.dstAddr", Lpm(prefix, length)),)),
        ActionCall("ipv4_forward", (("dstAddr", 0x0200000000BB), ("port", port))),
    )


def stage(experiment: int, stage_id: int, klass: int) -> tuple[EntryKey, ActionCall]:
    return (
        EntryKey("stage_class", (("hdr.beamer_tag.experiment_id", Exact(experiment)),
                                 ("hdr.beamer_tag.stage_id", Exact(stage_id)))),
        ActionCall("set_class", (("class_id", klass),)),
    )  # fmt: skip


def canonical_entries(entries: list[p4runtime_pb2.TableEntry]) -> list[str]:
    """Entries as sorted text, with what a read may or may not echo cleared."""
    texts = []
    for entry in entries:
        copy = p4runtime_pb2.TableEntry()
        copy.CopyFrom(entry)
        texts.append(str(copy))
    return sorted(texts)


def beamer_sequence(switch: SwitchUnderTest) -> list[tuple[str, Any]]:
    client = switch.client
    steps: list[tuple[str, Any]] = []

    def step(name: str, action: Callable[[], Any]) -> None:
        steps.append((name, outcome(action)))

    def write(*updates: tuple[int, tuple[EntryKey, ActionCall]]) -> Callable[[], None]:
        return lambda: client.write([switch.update(k, a, kind) for kind, (k, a) in updates])

    step("write before a pipeline", write((INSERT, route(0x0A000100, 24, 1))))
    step("read before a pipeline", lambda: client.read_table())
    step("set pipeline", lambda: client.set_pipeline(switch.p4info, switch.device_config))
    step("insert", write((INSERT, route(0x0A000100, 24, 1)), (INSERT, stage(1, 2, 5))))
    step("insert a duplicate", write((INSERT, route(0x0A000100, 24, 2))))
    step("modify", write((MODIFY, route(0x0A000100, 24, 2))))
    step("modify a missing entry", write((MODIFY, route(0x0A000200, 24, 2))))
    step("delete a missing entry", write((DELETE, stage(9, 9, 1))))
    step(
        "batch with errors",
        write(
            (INSERT, route(0x0A000300, 24, 1)),  # fine
            (INSERT, stage(1, 2, 6)),  # duplicate
            (MODIFY, stage(3, 3, 1)),  # missing
            (INSERT, route(0x0A000400, 24, 2)),  # fine
        ),
    )
    bad_width = switch.update(*route(0x0A000500, 24, 1))
    bad_width.entity.table_entry.action.action.params[1].value = b"\x7f\xff"  # 9-bit port
    step("parameter wider than its bitwidth", lambda: client.write([bad_width]))
    bad_table = switch.update(*route(0x0A000600, 24, 1))
    bad_table.entity.table_entry.table_id = 0x02FFFFFF
    step("unknown table", lambda: client.write([bad_table]))
    host_bits = switch.update(*route(0x0A000701, 24, 1))  # bits beyond the prefix set
    step("LPM value with bits past the prefix", lambda: client.write([host_bits]))
    step("wildcard read of every table", lambda: canonical_entries(client.read_table()))
    lpm_id = switch.names.table("ipv4_lpm").id
    step("read one table", lambda: canonical_entries(client.read_table(lpm_id)))

    # Traffic for the counters: two tagged packets of stage (1, 2), class 5.
    tag = IPOption(bytes([0x9E, 12, 0x10, 0, 0, 1, 0, 2, 0, 0, 0, 9]))
    frame = bytes(
        Ether(src="02:00:00:00:00:aa", dst="02:00:00:00:00:fe")
        / IP(src="10.0.0.1", dst="10.0.1.2", options=[tag])
        / UDP()
        / (b"\0" * 100)
    )
    switch.exchange([(0, frame), (0, frame)])
    queue_counter = next(c.preamble.id for c in switch.p4info.counters)
    step("indirect counter read", lambda: client.read_counter(queue_counter)[5][1])
    step(
        "direct counter read",
        lambda: sorted(
            e.counter_data.packet_count
            for e in client.read_table(switch.names.table("stage_class").id, with_counters=True)
        ),
    )
    step("delete", write((DELETE, route(0x0A000100, 24, 2)), (DELETE, stage(1, 2, 5))))
    step("read after delete", lambda: len(client.read_table(lpm_id)))
    return steps


def l2_sequence(switch: SwitchUnderTest) -> list[tuple[str, Any]]:
    client = switch.client
    steps: list[tuple[str, Any]] = []

    def acl(priority: int, value: int = 0x86DD) -> tuple[EntryKey, ActionCall]:
        return (
            EntryKey("acl", (("hdr.eth.type", Ternary(value, 0xFFFF)),), priority),
            ActionCall("deny", ()),
        )

    def write(*updates: tuple[int, tuple[EntryKey, ActionCall]]) -> Callable[[], None]:
        return lambda: client.write([switch.update(k, a, kind) for kind, (k, a) in updates])

    steps.append(("ternary entry without priority", outcome(write((INSERT, acl(0))))))
    steps.append(("ternary entry", outcome(write((INSERT, acl(10))))))
    steps.append(("same match, other priority", outcome(write((INSERT, acl(11))))))
    steps.append(("same match and priority", outcome(write((INSERT, acl(10))))))
    zero_mask = switch.update(*acl(12, 0x0800))
    zero_mask.entity.table_entry.match[0].ternary.mask = b"\0\0"
    zero_mask.entity.table_entry.match[0].ternary.value = b"\0\0"
    steps.append(("don't-care written as mask 0", outcome(lambda: client.write([zero_mask]))))
    steps.append(("entries", outcome(lambda: canonical_entries(client.read_table()))))
    return steps


@pytest.mark.parametrize(
    ("source", "sequence"),
    [(BEAMER, beamer_sequence), (L2_STATS, l2_sequence)],
    ids=["beamer", "l2_stats"],
)
def test_same_status_codes_and_reads_on_bmv2_and_the_embedded_target(
    source: Any, sequence: Callable[[SwitchUnderTest], list[tuple[str, Any]]]
) -> None:
    results = {}
    for target in ("bmv2", "embedded"):
        with switch_under_test(target, source, set_pipeline=sequence is l2_sequence) as switch:
            results[target] = sequence(switch)
    bmv2, embedded = results["bmv2"], results["embedded"]
    assert [name for name, _ in embedded] == [name for name, _ in bmv2]
    for (name, theirs), (_, ours) in zip(bmv2, embedded, strict=True):
        if name in SPEC_OVER_BMV2:
            expected, _why = SPEC_OVER_BMV2[name]
            assert ours == expected, f"{name}: embedded {ours!r}"
            continue
        assert ours == theirs, f"{name}: embedded {ours!r}, BMv2 {theirs!r}"
    # The sequence exercised failures, not only successes.
    assert any(code != "OK" for _, code in bmv2)
