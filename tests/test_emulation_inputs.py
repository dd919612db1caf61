"""``beamer emulate`` refuses bad inputs in one line before any network is built, and
fails at once, in one line, when a host's sockets fail during a run."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import socket
import types
from asyncio.selector_events import BaseSelectorEventLoop
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bmv2_topos import agent, emulate
from bmv2_topos.agent import AgentError, HostAddress, HostAgents, NoController
from bmv2_topos.emulate import EmulationReport, RunKey, RunResult
from control.errors import UserError
from control.model import Experiment, Flow, Stage, TrialStage

REPO = Path(__file__).resolve().parents[1]
SINGLE_SWITCH = REPO / "bmv2_topos" / "single_switch.json"


@pytest.fixture
def main(monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str]], int]:
    """``beamer`` with the emulation commands registered and no root: a refusal must
    come from the input check, not from the root check after it."""
    from control import cli

    monkeypatch.setattr(cli, "COMMAND_MODULES", ("bmv2_topos.cli",))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    return cli.main


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "needs root" not in lines[0]
    return lines[0]


def workload_file(tmp_path: Path, experiments: list[dict[str, Any]]) -> str:
    path = tmp_path / "w.json"
    body = {
        "format": "beamer-workload/1",
        "num_hosts": 8,
        "link_bps": 2e7,
        "experiments": experiments,
    }
    path.write_text(json.dumps(body))
    return str(path)


def experiment(
    flows: list[list[int]], compute_s: float = 0.0, iterations: int = 1, arrival_s: float = 0.0
) -> dict[str, Any]:
    trial = {
        "trial_id": 0,
        "iterations": iterations,
        "compute_s": compute_s,
        "sync_flows": flows,
    }
    return {
        "experiment_id": 0,
        "arrival_s": arrival_s,
        "stages": [{"stage_id": 0, "trials": [trial]}],
    }


def run(main: Callable[[list[str]], int], *options: str) -> int:
    return main(["emulate", "--topo", str(SINGLE_SWITCH), *options])


def test_a_workload_without_experiments_is_refused(
    main: Callable[[list[str]], int], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert run(main, "--workload", workload_file(tmp_path, [])) == 2
    assert "has no experiments" in one_error_line(capsys)


def test_a_trial_without_flows_is_refused_by_name(
    main: Callable[[list[str]], int], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert run(main, "--workload", workload_file(tmp_path, [experiment([])])) == 2
    assert "experiment 0, stage 0, trial 0 has no flows" in one_error_line(capsys)


@pytest.mark.parametrize(
    "body",
    [
        experiment([[0, 1, 10**12]]),
        experiment([[0, 1, 1000]], compute_s=1e8),
        experiment([[0, 1, 1000]], arrival_s=1e8),
        experiment([[0, 1, 1]], iterations=1_000_000),
    ],
    ids=["bytes", "compute", "arrival", "iterations"],
)
def test_a_workload_longer_than_a_run_may_last_is_refused(
    main: Callable[[list[str]], int],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    body: dict[str, Any],
) -> None:
    assert run(main, "--workload", workload_file(tmp_path, [body])) == 2
    line = one_error_line(capsys)
    assert "a run takes at least" in line and "180 s limit" in line, line


def test_a_time_scale_too_long_for_a_run_names_the_option(
    main: Callable[[list[str]], int], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(main, "--time-scale", "20") == 2
    line = one_error_line(capsys)
    assert "180 s limit" in line and "--time-scale" in line, line


def test_more_sockets_than_the_open_file_limit_is_refused(
    main: Callable[[list[str]], int],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(emulate.resource, "getrlimit", lambda _which: (200, 200))
    flows = [[0, 1, 1000]] * 100  # 200 sockets for the stage
    assert run(main, "--workload", workload_file(tmp_path, [experiment(flows)])) == 2
    line = one_error_line(capsys)
    assert "open-file limit of 200" in line and "ulimit -n" in line, line


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--time-scale", "inf"], "--time-scale: must be a positive finite number"),
        (["--time-scale", "1e-9"], "--time-scale: 1e-09 shrinks"),
        (["--workload", ""], "--workload: the option is empty"),
    ],
)
def test_messages_name_the_option(
    main: Callable[[list[str]], int],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    options: list[str],
    expected: str,
) -> None:
    out = tmp_path / "newout"
    assert run(main, *options, "--out", str(out)) == 2
    assert one_error_line(capsys).startswith(f"beamer: error: {expected}")
    assert not out.exists()  # refused before --out was made


def test_a_topology_too_small_for_the_default_workload_names_topo(
    main: Callable[[list[str]], int], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    topology = json.loads(SINGLE_SWITCH.read_text())
    topology["hosts"] = topology["hosts"][:3]
    kept = {host["name"] for host in topology["hosts"]}
    topology["links"] = [link for link in topology["links"] if link["node1"] in kept]
    path = tmp_path / "small.json"
    path.write_text(json.dumps(topology))
    assert main(["emulate", "--topo", str(path)]) == 2
    line = one_error_line(capsys)
    assert f"--topo {path}: the hp-tuning workload needs at least 5 hosts" in line, line


def test_out_is_not_made_when_root_is_missing(
    main: Callable[[list[str]], int], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "newout"
    assert run(main, "--out", str(out)) == 2
    assert "needs root" in capsys.readouterr().err
    assert not out.exists()


def _report() -> EmulationReport:
    from bmv2_topos.agent import StageRecord

    return EmulationReport(
        [
            RunResult(
                key=RunKey("fair", 1),
                stages=[StageRecord(0, 0, 0.0, 2.0)],
                alone_s={(0, 0): 1.0},
                wall_s=3.0,
            )
        ]
    )


@pytest.fixture
def rooted_main(
    main: Callable[[list[str]], int], monkeypatch: pytest.MonkeyPatch
) -> Callable[[list[str]], int]:
    """``main`` past the root and kernel checks, for a faked run."""
    from bmv2_topos import netns

    monkeypatch.setattr(netns, "require_root", lambda: None)
    monkeypatch.setattr(netns, "require_congestion_control", lambda *_args: None)
    return main


def test_termination_signals_unwind_the_whole_command(
    rooted_main: Callable[[list[str]], int],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    from control.interrupts import Interrupted

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)
    seen: list[object] = []

    def interrupted_runs(*_args: object, **_kwargs: object) -> EmulationReport:
        seen.extend([signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)])
        raise Interrupted("SIGTERM")

    monkeypatch.setattr(emulate, "run_emulations", interrupted_runs)
    assert run(rooted_main, "--out", str(tmp_path / "out")) == 143  # 128 + SIGTERM
    assert "interrupted" in capsys.readouterr().err
    assert all(handler not in (signal.SIG_DFL, signal.SIG_IGN, None) for handler in seen), seen
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)) == before


def test_writing_the_outputs_is_not_cut_short_by_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bmv2_topos import report
    from control.interrupts import Interrupted, restore_handlers, unwind_on_termination

    real_write = report.atomic_write_all_bytes

    def write_after_sigterm(contents: dict[Path, bytes]) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        real_write(contents)

    monkeypatch.setattr(report, "atomic_write_all_bytes", write_after_sigterm)
    previous = unwind_on_termination()
    try:
        with pytest.raises(Interrupted):
            report.write_outputs(_report(), tmp_path)
    finally:
        restore_handlers(previous)
    # Every file whole, no temporary left: the signal took effect after the writing.
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(report.OUTPUT_NAMES)


def test_an_out_replaced_by_a_file_still_prints_the_table(
    rooted_main: Callable[[list[str]], int],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"

    def runs_that_lose_out(*_args: object, **_kwargs: object) -> EmulationReport:
        out.rmdir()
        out.write_text("in the way")
        return _report()

    monkeypatch.setattr(emulate, "run_emulations", runs_that_lose_out)
    assert run(rooted_main, "--out", str(out)) == 2
    captured = capsys.readouterr()
    assert "avg SCT s" in captured.out  # the results were shown
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and str(out) in lines[0], lines


# --- socket failures during a run --------------------------------------------------------


def test_a_failed_accept_fails_every_connection_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_file_left(_loop: object, _listener: object) -> None:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    monkeypatch.setattr(BaseSelectorEventLoop, "sock_accept", no_file_left)

    async def connected_to_nothing(_loop: object, _sock: object, _address: object) -> None:
        return None  # the handshake "succeeds"; only the accept can fail

    monkeypatch.setattr(BaseSelectorEventLoop, "sock_connect", connected_to_nothing)

    async def scenario() -> None:
        agents = HostAgents({0: HostAddress(None, "127.0.0.1"), 1: HostAddress(None, "127.0.0.1")})
        waiting = agents._waiter((1, "127.0.0.1", 1))
        with socket.socket() as listener:
            await agents._accept_loop(1, listener)
        with pytest.raises(AgentError, match="cannot accept a connection: Too many open files"):
            await waiting
        # A connection asked for afterwards fails too, instead of waiting for the timeout.
        with pytest.raises(AgentError, match="Too many open files"):
            await asyncio.wait_for(agents.connect(0, 1, agent.beamer_option(0, 0, 0)), 5)
        await agents.close()

    asyncio.run(scenario())


def _one_flow() -> tuple[Experiment, ...]:
    trial = TrialStage(0, 1, 0.0, (Flow(0, 1, 1000),))
    return (Experiment(0, 0.0, (Stage(0, (trial,)),)),)


def test_no_file_for_a_socket_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_file_left(*_args: object) -> socket.socket:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    shim = types.SimpleNamespace(**vars(socket))
    shim.socket = no_file_left
    monkeypatch.setattr(agent, "socket", shim)
    hosts = {0: HostAddress(None, "127.0.0.1"), 1: HostAddress(None, "127.0.0.1")}
    with pytest.raises(UserError) as raised:
        emulate.execute(hosts, _one_flow(), NoController(), lambda: None)
    message = str(raised.value)
    assert "\n" not in message
    assert "host 127.0.0.1: cannot open a socket: Too many open files" in message
    assert "ulimit -n" in message


def test_an_address_the_kernel_refuses_is_one_line() -> None:
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: bind fails, nothing is sent.
    hosts = {0: HostAddress(None, "192.0.2.1"), 1: HostAddress(None, "192.0.2.2")}
    with pytest.raises(UserError, match=r"host 192\.0\.2\.1: cannot listen on port \d+: "):
        emulate.execute(hosts, _one_flow(), NoController(), lambda: None)
