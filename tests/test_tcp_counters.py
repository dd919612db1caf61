"""The hosts' TCP counters that the emulation reports beside its stage times."""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import pytest
from netns_helpers import ip_command

from bmv2_topos.agent import StageRecord
from bmv2_topos.emulate import EmulationReport, RunKey, RunResult
from bmv2_topos.report import summary, table, write_outputs
from bmv2_topos.tcp_counters import (
    CountersUnreadable,
    TcpCounters,
    counted_between,
    parse_counters,
    read_counters,
)
from softswitch.netns import run_in_netns

# Cut from a real /proc/net/netstat and /proc/net/snmp, read one after the other.
PROC_TEXT = """\
TcpExt: SyncookiesSent SyncookiesRecv TCPTimeouts TCPLossProbes
TcpExt: 0 0 17 5
IpExt: InNoRoutes InTruncatedPkts
IpExt: 0 0
Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 3051
Tcp: RtoAlgorithm RtoMin ActiveOpens RetransSegs InErrs
Tcp: 1 200 40 123 0
Udp: InDatagrams NoPorts
Udp: 8 0
"""


def test_the_counters_are_read_by_group_and_name() -> None:
    assert parse_counters(PROC_TEXT) == TcpCounters(timeouts=17, retransmitted_segments=123)


def test_a_kernel_without_the_counters_is_said_so() -> None:
    without = PROC_TEXT.replace("TCPTimeouts", "TCPOther")
    with pytest.raises(CountersUnreadable, match="TcpExt TCPTimeouts"):
        parse_counters(without)


def test_a_run_counts_what_rose_during_it_and_none_if_either_read_failed() -> None:
    before, after = TcpCounters(3, 10), TcpCounters(5, 19)
    assert counted_between(before, after) == TcpCounters(2, 9)
    assert counted_between(None, after) is None
    assert counted_between(before, None) is None


def _run(policy: str, timeouts: int | None, seed: int = 1) -> RunResult:
    return RunResult(
        key=RunKey(policy, seed),
        stages=[StageRecord(0, 0, 0.0, 3.0)],
        alone_s={(0, 0): 1.0},
        wall_s=5.0,
        tcp=None if timeouts is None else TcpCounters(timeouts, 10 * timeouts),
    )


def test_the_report_shows_each_runs_timeouts_and_their_sum(tmp_path: Path) -> None:
    report = EmulationReport([_run("beamer", 7), _run("fair", 2), _run("fair", 3, seed=2)])
    lines = table(report).splitlines()
    assert lines[0].split()[-1] == "RTOs"
    rows = [line.split() for line in lines if not line.startswith("-")][1:]
    assert [(row[0], row[1], row[-1]) for row in rows[:3]] == [
        ("beamer", "1", "7"),
        ("fair", "1", "2"),
        ("fair", "2", "3"),
    ]
    means = summary(report)
    assert (means["fair"]["rtos"], means["fair"]["retransmitted_segments"]) == (5, 50)
    write_outputs(report, tmp_path)
    csv_rows = (tmp_path / "summary.csv").read_text().splitlines()
    header = csv_rows[0].split(",")
    first = dict(zip(header, csv_rows[1].split(","), strict=True))
    assert (first["rtos"], first["retransmitted_segments"]) == ("7", "70")


def test_a_run_without_counts_shows_none_and_its_policy_sums_none() -> None:
    report = EmulationReport([_run("fair", None), _run("beamer", 4)])
    assert table(report).splitlines()[2].split()[-1] == "n/a"
    assert summary(report)["fair"]["rtos"] is None
    assert summary(report)["beamer"]["rtos"] == 4


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")
def test_counters_are_the_namespaces_own_and_count_a_timeout() -> None:
    """A fresh namespace starts from zero whatever the machine's own counters say, and
    a connection whose SYN gets no answer counts a retransmission timeout there."""
    name = f"bmtcp-{uuid.uuid4().hex[:10]}"
    ip_command("netns", "add", name)
    try:
        ip_command("-n", name, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
        ip_command("-n", name, "addr", "add", "10.9.0.1/24", "dev", "v0")
        ip_command("-n", name, "link", "set", "v0", "up")
        assert read_counters([name]) == TcpCounters(0, 0)

        def connect_to_no_one() -> socket.socket:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.connect_ex(("10.9.0.2", 9))
            return sock

        sock = run_in_netns(name, connect_to_no_one)
        try:
            deadline = time.monotonic() + 10
            counted = read_counters([name])
            while counted is not None and counted.timeouts == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
                counted = read_counters([name])
        finally:
            sock.close()
        assert counted is not None and counted.timeouts >= 1
        assert read_counters([name, name]) == TcpCounters(
            2 * counted.timeouts, 2 * counted.retransmitted_segments
        )
    finally:
        ip_command("netns", "del", name)
