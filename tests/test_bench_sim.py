"""bench/bench_sim.py's split of a run into the policy's ranking and the flow model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from processes import unblocked_within

from bench.bench_sim import default_policies, offline_subset, timed, with_rank_timer
from control.errors import UserError
from control.policies import POLICIES, get_policy
from control.policies.lookahead import LookaheadPolicy
from sim.engine import SimConfig, simulate


def test_rank_timer_counts_the_ranking_and_changes_no_result() -> None:
    workload = offline_subset(400, 12)
    policy, spent_s = with_rank_timer(get_policy("sincronia"))
    assert spent_s() == 0.0
    timed_result = simulate(workload, policy, SimConfig())
    plain_result = simulate(workload, get_policy("sincronia"), SimConfig())
    assert timed_result.cct_s == plain_result.cct_s
    assert spent_s() > 0.0


def test_timing_splits_a_run_into_ranking_and_model() -> None:
    workload = offline_subset(400, 8)
    timing, result = timed(workload, "beamer", 1, "fast")
    assert result.cct_s
    assert 0.0 < timing.rank_cpu_s <= timing.cpu_s
    assert timing.model_cpu_s == timing.cpu_s - timing.rank_cpu_s


def test_the_default_policies_leave_out_only_the_searches() -> None:
    searches = {name for name in POLICIES if isinstance(get_policy(name), LookaheadPolicy)}
    assert "beamer-lookahead" in searches
    assert set(default_policies()) == set(POLICIES) - searches
    assert {"fair", "sincronia", "varys", "beamer"} <= set(default_policies())


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_the_trace_is_read_as_a_workload_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """``$BEAMER_FB2010=/dev/zero`` was read until the process was killed (a FIFO without a
    writer blocks for ever, a directory was a traceback): one line, as ``beamer`` says it."""
    trace = tmp_path / "trace"
    if kind == "fifo":
        os.mkfifo(trace)
    else:
        trace.mkdir()
    monkeypatch.setenv("BEAMER_FB2010", str(trace))
    with unblocked_within(30, "reading the trace"), pytest.raises(UserError) as refused:
        offline_subset(400, 5)
    shown = "a FIFO (named pipe)" if kind == "fifo" else "a directory"
    assert str(refused.value) == f"{trace}: is {shown}, not a workload file"


def test_python_m_bench_fails_when_a_benchmark_fails(tmp_path: Path) -> None:
    """It printed the failure in its JSON and exited 0: a script or CI job saw success."""
    env = {**os.environ, "BEAMER_FB2010": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "bench_sim"],
        cwd=Path(__file__).resolve().parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)["bench_sim"]
    assert result["error"] == "exit status 2"
    assert result["stderr"] == f"error: {tmp_path}: is a directory, not a workload file\n"
    assert done.stderr.strip().splitlines()[-1] == "python -m bench: failed: bench_sim"


def test_python_m_bench_exits_non_zero_exactly_when_a_benchmark_failed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import bench.__main__ as runner

    monkeypatch.setattr(sys, "argv", ["python -m bench", "bench_sim", "bench_bssi"])
    monkeypatch.setattr(runner, "run_one", lambda name, quick: {"seconds": 1.0})
    assert runner.main() == 0
    failing = {"bench_sim": {"error": "exit status -9", "stderr": ""}}
    monkeypatch.setattr(runner, "run_one", lambda name, quick: failing.get(name, {"s": 1.0}))
    assert runner.main() == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out.split("\n}\n", 1)[1])["bench_sim"] == failing["bench_sim"]
    assert captured.err.strip().splitlines()[-1] == "python -m bench: failed: bench_sim"
