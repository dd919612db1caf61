"""More hostile input to `beamer` and the benchmarks: one line, exit status 2, and
nothing started or written when the input is wrong."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_hostile_files_cli import run

from control.cli import main

REPO = Path(__file__).resolve().parents[1]
TINY_WORKLOAD = REPO / "tests" / "data" / "tiny_workload.json"
GRID = """\
policies: [fair]
seeds: {seeds}
figures:
  - name: f
    vary: {{workload: [{workload}]}}
"""


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def no_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail the test (rather than run for minutes, or for ever) if a command gets past its
    checks: `emulate` or `tune` to building a network, `simulate` to loading a workload,
    `switch` to starting."""
    import sim.cli
    import softswitch.switch_cli
    from bmv2_topos import netns

    def started(*args: object, **kwargs: object) -> None:
        pytest.fail("the command would start: the input was not refused before")

    monkeypatch.setattr(netns, "require_root", started)
    monkeypatch.setattr(sim.cli, "_prepared", started)
    monkeypatch.setattr(softswitch.switch_cli, "Switch", started)
    yield


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # int() and float() also read other scripts' digits and '_'.
        (["simulate", "--jobs", "\u0661"], "argument --jobs: invalid int value: '\u0661'"),
        (["simulate", "--load", "0_8"], "argument --load: invalid float value: '0_8'"),
        (["simulate", "--queues", "\u0668"], "--queues: '\u0668' is neither 'ideal'"),
        (["workload", "offline", "fb2010", "--max-flows", "1_0", "--out", "OUT"], "--max-flows"),
        (["switch", "--no-p4", "--priority-queues", "\u0668"], "invalid int value: '\u0668'"),
        (["switch", "--no-p4", "-i", "\u0661@veth0"], "port '\u0661' is not a number"),
        (["controller", "--topo", "t", "--policy", "fair", "--queues", "\u0668"], "--queues"),
        # random.Random(-1) draws what random.Random(1) draws: the same workload twice.
        (["simulate", "--seed", "-1"], "argument --seed: invalid int value: '-1' (a seed is"),
        (["simulate", "--seeds", "1,-1"], "--seeds: '1,-1' is not a comma-separated list"),
        (
            ["workload", "generate", "--seed", "-1", "--out", "OUT"],
            "--seed: invalid int value: '-1' (a seed is",
        ),
        (["emulate", "--seeds", "\u0661"], "--seeds: '\u0661' is not"),
    ],
)
def test_numbers_are_ascii_digits_and_seeds_not_negative(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_runs: None,
    argv: list[str],
    message: str,
) -> None:
    out = tmp_path / "out.txt"
    status, err = run([str(out) if arg == "OUT" else arg for arg in argv], capsys)
    assert status == 2
    assert message in one_line(err)
    assert not out.exists()


def test_a_huge_option_value_is_shortened_in_the_argument_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, err = run(["simulate", "--seed", "9" * 100_000], capsys)
    assert status == 2
    line = one_line(err)
    assert len(line) < 2100 and "characters left out" in line


class _ClosedPipe:
    """Standard output whose reader went away (``beamer ... | head``)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self) -> int:
        raise OSError("no file descriptor")


def test_a_closed_output_pipe_ends_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main(["workload", "show", str(TINY_WORKLOAD), "--json"]) == 141
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("seeds", "workload", "message"),
    [
        ("[1, -1]", "hp-tuning", ":2: seeds[1]: -1 is negative"),
        ("[1]", '"a\\0b"', "workload[0]: 'a\\x00b': not a file name (it holds a NUL character)"),
        # A lone high surrogate stands for no byte of a file name (os.stat raised).
        ("[1]", '"a\\ud800.json"', "a\\ud800.json': not a file name (U+D800 is no text)"),
    ],
)
def test_a_grid_with_a_negative_seed_or_a_nul_in_a_file_name_is_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    seeds: str,
    workload: str,
    message: str,
) -> None:
    grid = tmp_path / "g.yaml"
    grid.write_text(GRID.format(seeds=seeds, workload=workload), encoding="utf-8")
    status, err = run(["sweep", str(grid), "--out", str(tmp_path / "out")], capsys)
    assert status == 2
    assert message in one_line(err)
    assert not (tmp_path / "out").exists()


def test_a_json_key_with_a_newline_is_quoted_in_the_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "w.json"
    text = TINY_WORKLOAD.read_text(encoding="utf-8")
    path.write_text(text.replace('"meta": {', '"meta": {"a\\nb": 1, '), encoding="utf-8")
    status, err = run(["workload", "show", str(path)], capsys)
    assert status == 2
    assert '$.meta["a\\nb"]: expected a string' in one_line(err)


@pytest.mark.parametrize(
    ("flag", "value"), [("--models", "resnet50,vgg16,resnet50"), ("--sync", "ring,ring")]
)
def test_a_model_or_pattern_given_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    out = tmp_path / "w.json"
    status, err = run(["workload", "generate", flag, value, "--out", str(out)], capsys)
    assert status == 2
    assert f"{flag}: '{value.split(',')[0]}' given more than once" in one_line(err)
    assert not out.exists()


@pytest.mark.parametrize("address", ["127.0.0.1:99999", "", "127.0.0.1:\u0669\u0665\u0665\u0669"])
def test_switch_refuses_a_server_port_grpc_would_read_modulo_65536(
    capsys: pytest.CaptureFixture[str], no_runs: None, address: str
) -> None:
    status, err = run(["switch", "--no-p4", "--grpc-server-addr", address], capsys)
    assert status == 2
    assert "--grpc-server-addr: " in one_line(err)


def test_switch_says_a_config_that_is_a_directory_is_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err = run(["switch", str(tmp_path)], capsys)
    assert status == 2
    assert f"{tmp_path}: is a directory, not a device config" in one_line(err)


@pytest.mark.parametrize("command", ["emulate", "tune"])
def test_emulate_and_tune_check_out_before_the_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_runs: None, command: str
) -> None:
    if command == "tune":
        pytest.importorskip("ray")
    in_the_way = tmp_path / "file"
    in_the_way.write_text("keep")
    status, err = run([command, "--out", str(in_the_way)], capsys)
    assert status == 2
    assert f"--out {in_the_way}: exists and is not a directory" in one_line(err)
    assert in_the_way.read_text() == "keep"


def test_emulate_checks_its_policies_before_the_runs(
    capsys: pytest.CaptureFixture[str], no_runs: None
) -> None:
    status, err = run(["emulate", "--policies", "fair,nosuch"], capsys)
    assert status == 2
    assert "--policies: unknown policy 'nosuch'" in one_line(err)


@pytest.mark.parametrize(
    ("command", "option"),
    [("simulate", "--policies"), ("emulate", "--policies"), ("tune", "--policy")],
)
def test_a_policy_given_twice_is_refused_by_every_command(
    capsys: pytest.CaptureFixture[str], no_runs: None, command: str, option: str
) -> None:
    if command == "tune":
        pytest.importorskip("ray")
    status, err = run([command, option, "fair,sincronia,fair"], capsys)
    assert status == 2
    assert f"{option}: 'fair' given more than once" in one_line(err)


def test_tune_checks_the_hyperband_plan_before_the_runs(
    capsys: pytest.CaptureFixture[str], no_runs: None
) -> None:
    """The plan failed only inside the search, once Ray and the network had started."""
    pytest.importorskip("ray")
    status, err = run(["tune", "--trials", "3", "--max-t", "2", "--eta", "1.6"], capsys)
    assert status == 2
    line = one_line(err)
    assert line.startswith("beamer: error: --trials 3, --max-t 2, --eta 1.6: ")
    assert "rung 1 of bracket s=1 would run no iteration" in line


def _p4c_outputs(tmp_path: Path) -> tuple[Path, Path]:
    """A BMv2 JSON and a P4Info text as p4c writes them (the P4Info of beamer.p4)."""
    from google.protobuf import text_format

    from softswitch.frontend import compile_file

    bmv2_json = tmp_path / "beamer.json"
    bmv2_json.write_text('{"program": "beamer.p4"}')
    p4info = tmp_path / "beamer.p4info.txt"
    program = compile_file(REPO / "p4src" / "beamer.p4")
    p4info.write_text(text_format.MessageToString(program.p4info))
    return bmv2_json, p4info


@pytest.mark.parametrize("command", ["emulate", "tune"])
@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ("missing-json", "--bmv2-json {json}: no such BMv2 JSON file"),
        ("bad-json", "--bmv2-json {json}:1:2: invalid JSON"),
        ("missing-p4info", "--p4info {p4info}: no such file"),
        ("bad-p4info", "--p4info {p4info}:1:"),
    ],
)
def test_bmv2_files_are_checked_before_the_network_starts(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_runs: None,
    command: str,
    broken: str,
    message: str,
) -> None:
    """The controller, which reads them, starts only once the network is up."""
    if command == "tune":
        pytest.importorskip("ray")
    bmv2_json, p4info = _p4c_outputs(tmp_path)
    if broken.startswith("missing"):
        (bmv2_json if broken == "missing-json" else p4info).unlink()
    elif broken == "bad-json":
        bmv2_json.write_text("{,}")
    else:
        p4info.write_text("tables { nosuch_field: 1 }")
    argv = [command, "--target", "bmv2", "--bmv2-json", str(bmv2_json), "--p4info", str(p4info)]
    status, err = run(argv, capsys)
    assert status == 2
    expected = message.format(json=bmv2_json, p4info=p4info)
    assert one_line(err).startswith(f"beamer: error: {expected}")


def test_a_topology_with_a_bmv2_switch_needs_p4cs_outputs(tmp_path: Path) -> None:
    """A switch's own ``target`` makes it a BMv2 switch whatever ``--target`` says."""
    import argparse
    import json

    from bmv2_topos.cli import DEFAULT_TOPOLOGY, check_bmv2_files
    from control.errors import UserError
    from control.topology import load_topology

    raw = json.loads(DEFAULT_TOPOLOGY.read_text())
    raw["switches"][0]["target"] = "bmv2"
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps(raw))
    topology = load_topology(topo)
    args = argparse.Namespace(target="embedded", bmv2_json=None, p4info=None)
    with pytest.raises(UserError, match="a BMv2 switch needs --bmv2-json and --p4info"):
        check_bmv2_files(args, topology)
    args.bmv2_json, args.p4info = _p4c_outputs(tmp_path)
    check_bmv2_files(args, topology)  # p4c's outputs as they are pass
    args.p4info = tmp_path
    with pytest.raises(UserError, match=f"--p4info {tmp_path}: is a directory"):
        check_bmv2_files(args, topology)


@pytest.mark.parametrize("option", ["--bmv2-json", "--p4info"])
@pytest.mark.parametrize("command", ["controller", "emulate", "tune"])
def test_bmv2_files_for_a_network_without_bmv2_switches_are_refused(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_runs: None,
    command: str,
    option: str,
) -> None:
    """They were ignored without a word: a wrong path, or a forgotten ``--target bmv2``,
    went unseen (and the run went on with the embedded switch)."""
    import control.controller_cli
    from bmv2_topos.cli import DEFAULT_TOPOLOGY

    def started(*args: object, **kwargs: object) -> None:
        pytest.fail("the controller would start: the input was not refused before")

    monkeypatch.setattr(control.controller_cli, "embedded_artifacts", started)
    if command == "tune":
        pytest.importorskip("ray")
    argv = [command, option, "/dev/zero"]
    if command == "controller":
        argv += ["--policy", "fair", "--topo", str(DEFAULT_TOPOLOGY)]
    status, err = run(argv, capsys)
    assert status == 2
    assert one_line(err).endswith(
        f"{option}: no switch runs on BMv2 (give --target bmv2, or a switch its "
        '"target": "bmv2" in the topology)'
    )


@pytest.mark.parametrize("scheduler", ["hyperband", "asha"])
def test_tune_without_ray_says_so(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_runs: None,
    scheduler: str,
) -> None:
    for name in ("ray", "ray.tune", "ray.tune.schedulers"):
        monkeypatch.setitem(sys.modules, name, None)
    status, err = run(["tune", "--scheduler", scheduler], capsys)
    assert status == 2
    assert "beamer tune needs Ray" in one_line(err)


def _emulation_report() -> Any:
    from bmv2_topos.agent import StageRecord
    from bmv2_topos.emulate import EmulationReport, RunKey, RunResult

    run_result = RunResult(
        key=RunKey("beamer", 1),
        stages=[StageRecord(0, 0, 0.0, 3.0)],
        alone_s={(0, 0): 1.0},
        wall_s=5.0,
        predicted_sct_s={(0, 0): 2.0},
    )
    return EmulationReport([run_result])


def test_emulation_outputs_are_written_all_or_none(tmp_path: Path) -> None:
    from bmv2_topos.report import write_outputs
    from control.errors import UserError

    (tmp_path / "avg_sct.png").mkdir()  # the last output cannot be written
    with pytest.raises(UserError, match=r"avg_sct\.png: cannot write: is a directory"):
        write_outputs(_emulation_report(), tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["avg_sct.png"]


def test_tune_outputs_are_written_all_or_none(tmp_path: Path) -> None:
    """The emulation's four files and the tuner's two are one group: a tuner file that
    cannot be written leaves none of the six."""
    from bmv2_topos.report import OUTPUT_NAMES
    from control.errors import UserError
    from tuner.run import TUNER_OUTPUT_NAMES, TuneReport

    report = TuneReport(emulation=_emulation_report())
    (tmp_path / "iterations.csv").mkdir()
    with pytest.raises(UserError, match=r"iterations\.csv: cannot write: is a directory"):
        report.write_outputs(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["iterations.csv"]
    (tmp_path / "iterations.csv").rmdir()
    written = report.write_outputs(tmp_path)
    assert sorted(path.name for path in written) == sorted([*OUTPUT_NAMES, *TUNER_OUTPUT_NAMES])
    assert (tmp_path / "tuner.csv").read_text().startswith("policy,seed,trials")


@pytest.mark.parametrize(
    ("module", "argv", "message"),
    [
        ("bench.bench_sim", ["--repeats", "0"], "--repeats: 0 is below 1"),
        ("bench.bench_tune_trainable", ["--hidden-width", "0"], "--hidden-width: 0 is not"),
        ("bench.sim_agreement", ["--jobs", "0"], "--jobs: 0 is not between 1 and"),
        ("bench.sim_agreement", ["--queues", "x"], "--queues: 'x' is neither"),
        ("bench.heldout", ["--workers", "0"], "--workers: '0' is not a whole number of at least"),
        ("bench.bench_headroom", ["--workers", "-1"], "--workers: '-1' is not a whole number"),
        ("bench.bench_sweep", ["--repeats", "0"], "--repeats: '0' is not a whole number"),
        ("bench.bench_rollout", ["--workers", "\u0662"], "--workers: invalid int value"),
        ("bench.bench_bssi", ["--bogus"], "unrecognized arguments: --bogus"),
        # Every count a benchmark takes is spelled in ASCII digits, as the commands' are.
        ("bench.bench_sim", ["--head", "\u0661\u0665"], "--head: invalid int value"),
        ("bench.bench_sim", ["--repeats", "1_0"], "--repeats: invalid int value"),
        ("bench.bench_arrivals", ["--arrivals", "\u0664"], "--arrivals: invalid int value"),
        ("bench.bench_rollout", ["--window", "\u0663"], "--window: invalid int value"),
        ("bench.bench_tune_trainable", ["--hidden-width", "\u0665"], "--hidden-width: invalid"),
        ("bench.sim_agreement", ["--jobs", "\u0662"], "--jobs: invalid int value"),
        ("bench.bench_headroom", ["--evals", "\u0665"], "--evals: invalid int value"),
        ("bench.bench_headroom", ["--evals", "-1"], "--evals: -1 is not a number of simulations"),
        # 10**12 orders searched whole would not end: n! of 8 experiments is the most.
        ("bench.bench_headroom", ["--exhaustive", "10" * 6], "--exhaustive: 101010101010 is not"),
    ],
)
def test_benchmark_arguments_out_of_range_are_one_line(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    module: str,
    argv: list[str],
    message: str,
) -> None:
    import importlib

    from bench.common import run_command

    bench = importlib.import_module(module)
    monkeypatch.setattr(sys, "argv", [module, *argv])
    with pytest.raises(SystemExit) as exited:
        run_command(bench.main)
    assert exited.value.code == 2
    assert message in one_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["workload", "generate", "--out", ""], "argument --out: an empty path"),
        (["compile", ""], "argument program: an empty path"),
        (["workload", "to-trace", "tiny", "--out", ""], "argument --out: an empty path"),
        (["sweep", ""], "argument grid: an empty path"),
        (["controller", "--topo", ""], "argument --topo: an empty path"),
        (["emulate", "--out", ""], "--out: an empty directory name"),
        (["workload", "show", ""], "an empty workload name"),
    ],
)
def test_an_empty_path_is_named_as_empty_not_as_the_current_directory(
    capsys: pytest.CaptureFixture[str], no_runs: None, argv: list[str], message: str
) -> None:
    status, err = run(argv, capsys)
    assert status == 2
    line = one_line(err)
    assert message in line and "is a directory" not in line


def test_fb2010_refuses_a_seed_it_would_ignore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fb.json"
    status, err = run(
        ["workload", "generate", "--kind", "fb2010", "--seed", "5", "--out", str(out)], capsys
    )
    assert status == 2
    assert "--seed applies to --kind hp-tuning only" in one_line(err)
    assert not out.exists()


def test_hp_tuning_without_a_seed_is_seed_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    default, explicit = tmp_path / "default.json", tmp_path / "one.json"
    assert run(["workload", "generate", "--jobs", "1", "--out", str(default)], capsys)[0] == 0
    argv = ["workload", "generate", "--jobs", "1", "--seed", "1", "--out", str(explicit)]
    assert run(argv, capsys)[0] == 0
    assert default.read_bytes() == explicit.read_bytes()


def test_a_sweep_over_a_file_name_that_is_no_utf8_writes_its_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The name's undecodable byte reaches the figure's labels as a lone surrogate: the
    CSV, the table and the plot used to fail on it after every run was done."""
    import os

    os.link(TINY_WORKLOAD, os.fsencode(tmp_path) + b"/\xff.json")
    grid = tmp_path / "g.yaml"
    grid.write_text(GRID.format(seeds="[1]", workload='"\\udcff.json"'), encoding="utf-8")
    out = tmp_path / "out"
    status, err = run(["sweep", str(grid), "--out", str(out), "--jobs", "1"], capsys)
    assert status == 0, err
    assert "\\udcff.json," in (out / "f.csv").read_text(encoding="utf-8")
    assert "\\udcff.json" in (out / "table.md").read_text(encoding="utf-8")
    assert (out / "f.png").stat().st_size > 0


@pytest.mark.parametrize(
    "command",
    [
        ["simulate", "--policies", "fair", "--workload", "{file}/"],
        ["workload", "show", "{file}/"],
        ["workload", "offline", "{file}/", "--out", "{out}"],
        ["workload", "generate", "--out", "{out}/"],
        ["controller", "--policy", "beamer", "--topo", "{file}/"],
        ["sweep", "{grid}", "--out", "{out}"],
    ],
    ids=["simulate", "workload-show", "offline-trace", "generate-out", "topology", "grid"],
)
def test_a_file_name_ending_in_a_slash_is_refused_not_read_without_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """``Path`` drops a final ``/``, so ``w.json/`` read (or wrote) ``w.json``, which the
    system refuses as a file ("Not a directory")."""
    file = tmp_path / "w.json"
    file.write_bytes(TINY_WORKLOAD.read_bytes())
    out = tmp_path / "out.json"
    grid = tmp_path / "g.yaml"
    grid.write_text(GRID.format(seeds="[1]", workload=f'"{file}/"'), encoding="utf-8")
    argv = [part.format(file=file, out=out, grid=grid) for part in command]
    status, err = run(argv, capsys)
    assert status == 2
    named = str(out) if command[1] == "generate" else str(file)
    assert f"{named}/: not a file name (it ends in '/', which names a directory)" in one_line(err)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["g.yaml", "w.json"]


ABSENT_TOPOLOGY = "absent.json"
"""Never read: the options are refused first (else a run would wait for its switches)."""


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["workload", "generate", "--jobs", "2", "--out", "w\n.json"], "control character"),
        (["workload", "offline", "fb2010", "--out", "\x1b[31mf.txt"], "control character"),
        (["workload", "to-trace", "fb2010", "--out", "   "], "a name of only spaces"),
        (["simulate", "--workload", str(TINY_WORKLOAD), "--out", "o\tut"], "control character"),
        (["compile", str(REPO / "p4src" / "beamer.p4"), "--out", "b\nuild"], "control character"),
        (["emulate", "--out", "e\rmu"], "control character"),
        (
            ["controller", "--policy", "fair", "--topo", ABSENT_TOPOLOGY, "--journal", "j\n"],
            "control character",
        ),
        (["simulate", "--workload", str(TINY_WORKLOAD), "--out", "-"], "standard output cannot"),
        (["emulate", "--out", "-"], "standard output cannot hold these files"),
        (
            ["controller", "--policy", "fair", "--topo", ABSENT_TOPOLOGY, "--journal", "-"],
            "'-' (standard output) cannot be this file",
        ),
    ],
    ids=[
        "generate-newline",
        "offline-escape",
        "to-trace-spaces",
        "simulate-tab",
        "compile-newline",
        "emulate-cr",
        "journal-newline",
        "simulate-dash",
        "emulate-dash",
        "journal-dash",
    ],
)
def test_an_output_name_a_slip_would_give_is_refused_and_nothing_made(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_runs: None,
    command: list[str],
    message: str,
) -> None:
    """A name of only spaces, with a control character, or '-' where standard output
    cannot take the output was a file or directory of that name, hard to name again."""
    monkeypatch.chdir(tmp_path)
    status, err = run(command, capsys)
    assert status == 2
    assert message in one_line(err)
    assert list(tmp_path.iterdir()) == []


WORKLOAD_WRITERS = {
    "generate": ["workload", "generate", "--jobs", "2", "--out"],
    "offline": ["workload", "offline", "fb2010", "--max-flows", "400", "--out"],
    "to-trace": ["workload", "to-trace", "fb2010", "--out"],
}
"""The ``beamer workload`` commands that write a workload, up to their ``--out`` value."""


@pytest.mark.parametrize(
    ("command", "reader", "summary"),
    [
        ([*WORKLOAD_WRITERS["generate"], "-"], "json", "2 experiments"),
        ([*WORKLOAD_WRITERS["offline"], "-"], "trace", "439"),
        ([*WORKLOAD_WRITERS["to-trace"], "-"], "trace", "526 coflows"),
    ],
    ids=list(WORKLOAD_WRITERS),
)
def test_workload_out_dash_writes_standard_output_as_the_file_would_be(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    reader: str,
    summary: str,
) -> None:
    """``--out -`` pipes the workload on: standard output holds exactly the file
    ``--out FILE`` writes, and the line saying what was written goes to standard error."""
    from workloads import coflow_benchmark, json_format

    monkeypatch.chdir(tmp_path)
    assert main(command) == 0
    piped = capsys.readouterr()
    assert summary in piped.err and piped.err.startswith("wrote standard output: ")
    assert list(tmp_path.iterdir()) == []  # no file called '-'
    assert main([*command[:-1], "file.out"]) == 0
    capsys.readouterr()
    assert piped.out == (tmp_path / "file.out").read_text(encoding="utf-8")
    read = json_format.loads if reader == "json" else coflow_benchmark.parse
    assert read(piped.out, "<stdout>").experiments


@pytest.mark.parametrize(
    "command",
    [[*writer, "./-"] for writer in WORKLOAD_WRITERS.values()],
    ids=list(WORKLOAD_WRITERS),
)
def test_workload_out_dot_slash_dash_is_a_file_called_dash(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    """``./-`` is how the README says to name a file called '-': ``Path`` spells it
    ``-`` too, and it once went to standard output."""
    monkeypatch.chdir(tmp_path)
    assert main(command) == 0
    written = capsys.readouterr()
    assert written.out.startswith("wrote -: ")
    assert [path.name for path in tmp_path.iterdir()] == ["-"]
    assert main([*command[:-1], "-"]) == 0
    assert capsys.readouterr().out == (tmp_path / "-").read_text(encoding="utf-8")
