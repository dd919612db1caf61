"""Loader (named workloads, format by content, load rescaling) and ``beamer workload``."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from processes import unblocked_within

from control.cli import main
from control.errors import UserError
from workloads import files, hp_tuning, json_format
from workloads.hp_tuning import HpTuningConfig, generate
from workloads.loader import load_workload
from workloads.summary import offered_load, summarize

DATA = Path(__file__).parent / "data"


def test_hp_tuning_spec_uses_seed_and_load() -> None:
    workload = load_workload("hp-tuning", seed=4, load=0.5)
    assert workload == generate(HpTuningConfig(seed=4, load=0.5))
    assert offered_load(workload) == pytest.approx(0.5)


def test_format_is_detected_by_content_not_name(tmp_path: Path) -> None:
    json_named_txt = tmp_path / "workload.txt"
    shutil.copy(DATA / "tiny_workload.json", json_named_txt)
    trace_named_json = tmp_path / "trace.json"
    shutil.copy(DATA / "tiny_trace.txt", trace_named_json)
    assert load_workload(str(json_named_txt)).experiments[0].experiment_id == 7
    assert len(load_workload(str(trace_named_json)).experiments) == 3


def test_json_array_is_refused_as_json_not_as_a_trace(tmp_path: Path) -> None:
    listed = tmp_path / "workload.json"
    listed.write_text("  [1, 2, 3]\n")
    with pytest.raises(UserError, match=r"workload.json:1: \$: expected an object, got an array"):
        load_workload(str(listed))


def test_load_rescales_trace_arrivals() -> None:
    trace = str(DATA / "tiny_trace.txt")
    original = load_workload(trace)
    scaled = load_workload(trace, load=0.25)
    assert offered_load(scaled) == pytest.approx(0.25)
    factor = scaled.experiments[2].arrival_s / original.experiments[2].arrival_s
    assert offered_load(original) == pytest.approx(0.25 * factor)


def test_summary_counts() -> None:
    summary = summarize(load_workload(str(DATA / "tiny_workload.json")))
    assert (summary.experiments, summary.stages, summary.trial_stages) == (1, 2, 3)
    assert (summary.coflows, summary.flows, summary.total_bytes) == (5, 18, 10_000)
    assert summary.offered_load is None


def test_unknown_spec_is_a_user_error() -> None:
    with pytest.raises(UserError, match=r"no such file \(named workloads: hp-tuning, fb2010\)"):
        load_workload("hp-tunnig")


def test_cli_generate_then_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "w.json"
    assert main(["workload", "generate", "--seed", "2", "--load", "0.6", "--out", str(out)]) == 0
    assert json_format.read(out) == generate(HpTuningConfig(seed=2, load=0.6))
    capsys.readouterr()
    assert main(["workload", "show", str(out), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["offered_load"] == pytest.approx(0.6)
    assert shown["experiments"] == len(json_format.read(out).experiments)
    assert main(["workload", "show", str(out)]) == 0
    assert "offered load          0.600" in capsys.readouterr().out


def test_cli_generate_shrunk_workload(tmp_path: Path) -> None:
    out = tmp_path / "small.json"
    argv = ["workload", "generate", "--link-bps", "20e6", "--time-scale", "0.1", "--out", str(out)]
    assert main(argv) == 0
    small = json_format.read(out)
    assert small.link_bps == 20e6
    assert offered_load(small) == pytest.approx(0.8)


def test_cli_bad_file_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("4 1\n1 0 1 0 1 7:1\n")
    assert main(["workload", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"beamer: error: {bad}:2: unknown reducer port 7 (trace has ports 0..3)\n"


def test_cli_trace_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "trace.txt"
    assert main(["workload", "to-trace", str(DATA / "tiny_trace.txt"), "--out", str(out)]) == 0
    assert (
        load_workload(str(out)).experiments
        == load_workload(str(DATA / "tiny_trace.txt")).experiments
    )


def test_offline_command_writes_a_trace_simulate_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "offline.txt"
    status = main(["workload", "offline", "fb2010", "--max-flows", "400", "--out", str(out)])
    assert status == 0
    assert "439 coflows" in capsys.readouterr().out
    workload = load_workload(str(out))
    assert len(workload.experiments) == 439
    assert {e.arrival_s for e in workload.experiments} == {0.0}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["workload", "offline", "fb2010", "--max-flows", "0"], "--max-flows: must be at least 1"),
        (["workload", "offline", "absent.txt"], "absent.txt: no such file"),
        # It read "." and said "is a directory", naming neither the argument nor the problem.
        (["workload", "offline", ""], "argument trace: an empty path"),
        (["workload", "generate", "--jobs", "1000000000"], "--jobs 1000000000: must be 1..10000"),
        (["workload", "generate", "--hosts", "1000000000"], "--hosts 1000000000: must be 2..10000"),
    ],
)
def test_bad_workload_arguments_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    out = tmp_path / "out.txt"
    try:
        status = main([*argv, "--out", str(out)])
    except SystemExit as exit_:  # argparse refuses a bad argument by exiting
        status = int(exit_.code or 0)
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert message in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--max-trials", "100000", "--jobs", "1"],
            "--max-trials 100000: an SHA run (R=100000, eta=2) alone holds 3,387,712 coflows",
        ),
        (["--jobs", "10000"], "--jobs 10000: the first 6,981 of 10,000 jobs drawn with seed 1"),
        (["--load", "1e-300"], "--load 1e-300: 1e-300 spreads the 12 jobs' arrivals over"),
        (["--kind", "fb2010", "--load", "1e-300"], "--load 1e-300: 1e-300 stretches the arrivals"),
        (["--time-scale", "1e10"], "--time-scale 1e+10: 1e+10 makes one resnet152 iteration"),
        (["--time-scale", "1e7"], "--time-scale 1e+07: 1e+07 makes a synchronisation flow of"),
        (["--time-scale", "1e300"], "--time-scale 1e+300: 1e+300 scales the workload's bytes"),
        (["--link-bps", "1e-300"], "--link-bps 1e-300: 1e-300 bit/s is outside 1000..1e+15"),
        (["--link-bps", "5e-324"], "--link-bps 4.94066e-324: 4.94066e-324 bit/s is outside"),
        (["--link-bps", "1e3", "--time-scale", "1e6"], "--load: 0.8 spreads the 12 jobs'"),
        # Every flow would have been rounded up to one byte: a workload of no shape.
        (["--time-scale", "1e-320"], "--time-scale 9.99989e-321: 9.99989e-321 shrinks a whole"),
        (["--time-scale", "1e-9"], "--time-scale 1e-09: 1e-09 shrinks a whole inception_v3"),
        (["--link-bps", "1e3", "--time-scale", "1e-3"], "--time-scale 0.001, --link-bps 1000"),
    ],
)
def test_generate_refuses_what_show_would_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Each of these used to exit 0 and write a file: one that ``workload show`` then
    refused, or (the last three) one whose flows were all a byte."""
    out = tmp_path / "w.json"
    assert main(["workload", "generate", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"beamer: error: {message}"), err
    assert len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_generate_refuses_impossible_sizes_before_building_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # This one used to build hosts and flows for 536,870,912 trials (past 2.5 GB).
    def no_drawing(*args: object) -> None:
        raise AssertionError("drew a job")

    monkeypatch.setattr(hp_tuning, "_draw_job", no_drawing)
    out = tmp_path / "w.json"
    argv = ["workload", "generate", "--max-trials", "1000000000", "--jobs", "1"]
    assert main([*argv, "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        "beamer: error: --max-trials 1000000000: an SHA run (R=1000000000, eta=2) starts a "
        "bracket of 536,870,912 trials, more than the 65,536 that 16-bit trial ids number\n"
    )
    assert not out.exists()


def test_generate_at_the_limits_writes_what_show_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "slow.json"
    argv = ["workload", "generate", "--link-bps", "1e3", "--max-trials", "64", "--out", str(out)]
    assert main(argv) == 0
    assert main(["workload", "show", str(out)]) == 0
    assert json_format.read(out).link_bps == 1e3


def test_a_device_is_refused_before_it_is_read(tmp_path: Path) -> None:
    # /dev/zero used to be read until memory ran out: run in a child with a memory cap.
    script = "import sys; from control.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = ["simulate", "--policies", "fair", "--workload", "/dev/zero"]

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    done = subprocess.run(
        [sys.executable, "-c", script, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=cap_memory,
        cwd=Path(__file__).parent.parent,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == ("beamer: error: /dev/zero: is a character device, not a workload file\n")


@pytest.mark.parametrize(
    "argv",
    [["workload", "show"], ["simulate", "--policies", "fair", "--workload"]],
    ids=["show", "simulate"],
)
def test_a_fifo_is_refused_without_waiting_for_a_writer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    fifo = tmp_path / "w.json"
    os.mkfifo(fifo)

    with unblocked_within(20, "on the FIFO"):
        status = main([*argv, str(fifo)])
    assert status == 2
    err = capsys.readouterr().err
    assert err == f"beamer: error: {fifo}: is a FIFO (named pipe), not a workload file\n"


def test_a_file_above_the_size_limit_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 100)
    big = tmp_path / "big.json"
    big.write_text("{" + " " * 200 + "}")
    with pytest.raises(UserError, match=r"big.json: 202 bytes, above the limit of 100 bytes"):
        load_workload(str(big))


def test_a_byte_order_mark_is_ignored(tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf"
    with_bom = tmp_path / "bom.json"
    with_bom.write_bytes(bom + (DATA / "tiny_workload.json").read_bytes())
    assert load_workload(str(with_bom)) == load_workload(str(DATA / "tiny_workload.json"))
    assert json_format.read(with_bom) == json_format.read(DATA / "tiny_workload.json")
    trace = tmp_path / "bom.txt"
    trace.write_bytes(bom + (DATA / "tiny_trace.txt").read_bytes())
    assert load_workload(str(trace)).experiments == (
        load_workload(str(DATA / "tiny_trace.txt")).experiments
    )
    # An error still names the line and the offset in the file, byte order mark included.
    bad = tmp_path / "bad.json"
    bad.write_bytes(bom + b'{"format":\n "\xfe"}')
    with pytest.raises(UserError, match=r"bad.json:2: not UTF-8 text \(byte 0xfe at offset 16"):
        load_workload(str(bad))


@pytest.mark.parametrize("rate", ["5e-324", "1e-300"])
def test_a_link_too_slow_to_simulate_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rate: str
) -> None:
    # 5e-324 bit/s used to stop the simulator with a RuntimeError traceback,
    # 1e-300 bit/s gave stage completion times of 1e300 s.
    path = tmp_path / "slow.json"
    path.write_text((DATA / "tiny_workload.json").read_text().replace("1000000000.0", rate))
    assert main(["simulate", "--policies", "fifo,varys", "--workload", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"beamer: error: {path}:4: $.link_bps: {rate} is below the limit of 1000 bit/s\n"
    )


def test_offline_output_is_within_the_readers_limits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 953,674,316.4 MB over 3 mappers rounded up to 953,674,317 MB, above the limit.
    trace = tmp_path / "t.txt"
    trace.write_text("4 1\n1 0 3 0 1 2 1 3:953674316.4\n")
    out = tmp_path / "offline.txt"
    assert main(["workload", "offline", str(trace), "--out", str(out)]) == 0
    assert out.read_text() == "4 1\n1 0 3 0 1 2 1 3:953674314\n"
    assert main(["workload", "show", str(out)]) == 0


def test_to_trace_never_writes_a_trace_the_reader_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two flows of 6e14 bytes into one host: each within its limit, the reducer not.
    source = tmp_path / "w.json"
    source.write_text(
        '{"format": "beamer-workload/1", "num_hosts": 3, "link_bps": 1e9, "experiments": ['
        '{"experiment_id": 0, "arrival_s": 0, "kind": "coflow", "stages": [{"stage_id": 0, '
        '"trials": [{"trial_id": 0, "iterations": 1, "compute_s": 0, "sync_flows": '
        "[[0, 2, 600000000000000], [1, 2, 600000000000000]]}]}]}]}"
    )
    out = tmp_path / "t.txt"
    assert main(["workload", "to-trace", str(source), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"beamer: error: {out}: not written: its line 2 would be refused: reducer 2 size (MB) "
        "1144409179.6875 is above the limit of 9.53674e+08 MB\n"
    )
    assert not out.exists()


def _two_arrivals(path: Path, first_s: float, second_s: float, size_bytes: int) -> Path:
    """A workload of two one-flow experiments on 1 kbit/s links."""
    experiments = [
        {
            "experiment_id": index,
            "arrival_s": arrival_s,
            "stages": [
                {
                    "stage_id": 0,
                    "trials": [
                        {
                            "trial_id": 0,
                            "iterations": 1,
                            "compute_s": 0,
                            "sync_flows": [[0, 1, size_bytes]],
                        }
                    ],
                }
            ],
        }
        for index, arrival_s in enumerate((first_s, second_s))
    ]
    document = {"format": "beamer-workload/1", "num_hosts": 3, "link_bps": 1e3}
    path.write_text(json.dumps({**document, "experiments": experiments}))
    return path


def _strict_json(text: str) -> object:
    def refuse(constant: str) -> object:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_show_json_is_json_when_the_offered_load_overflows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Arrivals 5e-324 s apart offer an infinite load: printed as ``Infinity``, which no
    JSON parser takes; it is null, as a metric without a value in ``simulate --json``."""
    path = _two_arrivals(tmp_path / "w.json", 0.0, 5e-324, 12_500_000_000)
    assert main(["workload", "show", str(path), "--json"]) == 0
    shown = _strict_json(capsys.readouterr().out)
    assert isinstance(shown, dict)
    assert shown["offered_load"] is None and shown["total_bytes"] == 25_000_000_000
    assert main(["workload", "show", str(path)]) == 0
    assert "offered load          inf (arrivals too close together" in capsys.readouterr().out


def test_show_prints_a_huge_offered_load_in_a_few_digits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Arrivals 1e-300 s apart offer a load of 1e300: it took 300 digits of the line."""
    path = _two_arrivals(tmp_path / "w.json", 5e-324, 1e-300, 1000)
    assert main(["workload", "show", str(path)]) == 0
    (line,) = [row for row in capsys.readouterr().out.splitlines() if "offered load" in row]
    assert line == "offered load          2.667e+300"


LOSSY = (
    '{"format": "beamer-workload/1", "num_hosts": 4, "link_bps": 1e12, "experiments": [\n'
    '{"experiment_id": 1, "arrival_s": 0, "weight": 5, "stages": [{"stage_id": 0, "trials": '
    '[{"trial_id": 0, "iterations": 1, "compute_s": 100, "sync_flows": [[0, 1, 1000]]}]}]},\n'
    '{"experiment_id": 2, "arrival_s": 1, "stages": [{"stage_id": 3, "trials": [{"trial_id": '
    '9, "iterations": 1, "compute_s": 0, "sync_flows": [[0, 1, 1000], [1, 2, 1000]]}]}]}]}\n'
)
"""Everything a trace cannot carry: a 1 Tbit/s link, a weight, a compute time, stage and
trial ids, and flows that are no even shuffle (a chain 0 → 1 → 2)."""
LOST = (
    "the link rate 1e+12 bit/s (a trace's links are 1 Gbit/s); the weight of 1 experiment "
    "(experiment 1: 5; a trace's coflows weigh 1); the compute time of 1 experiment "
    "(experiment 1: 100 s; a trace's coflows compute for 0 s); the stage and trial ids of "
    "1 experiment (experiment 2: stage 3, trial 9; the reader numbers them 0); the flows of "
    "1 experiment (experiment 2; not an even shuffle from all the coflow's mappers)"
)


def test_to_trace_refuses_what_the_trace_cannot_carry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each of these changed the answer of a run on the trace, and it was written with
    exit status 0: the link became 1 Gbit/s, the weight 1, the compute time 0."""
    source = tmp_path / "w.json"
    source.write_text(LOSSY)
    out = tmp_path / "t.txt"
    assert main(["workload", "to-trace", str(source), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"beamer: error: {out}: not written: a Coflow-Benchmark trace cannot carry {LOST}; "
        "--lossy writes it without them\n"
    )
    assert not out.exists()


def test_to_trace_lossy_writes_with_one_warning_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "w.json"
    source.write_text(LOSSY)
    out = tmp_path / "t.txt"
    assert main(["workload", "to-trace", str(source), "--out", str(out), "--lossy"]) == 0
    assert capsys.readouterr().err == f"beamer: warning: {out}: dropped {LOST}\n"
    again = load_workload(str(out))
    assert (again.link_bps, [e.weight for e in again.experiments]) == (1e9, [1.0, 1.0])


def test_to_trace_of_a_trace_loses_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.txt"
    assert main(["workload", "to-trace", "fb2010", "--out", str(out)]) == 0
    assert capsys.readouterr().err == ""
    assert load_workload(str(out)).experiments == load_workload("fb2010").experiments


def test_load_of_a_workload_that_moves_no_bytes_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every flow is local, so the load is 0 whatever the arrivals: the factor 0 / 0.5
    put every arrival at 0 and the command said nothing."""
    trace = tmp_path / "local.txt"
    trace.write_text("4 2\n1 0 1 0 1 0:5\n2 1000 1 1 1 1:5\n")
    message = "cannot set the load of a workload that moves no bytes across the network"
    with pytest.raises(UserError, match=message):
        load_workload(str(trace), load=0.5)
    monkeypatch.setenv("BEAMER_FB2010", str(trace))
    out = tmp_path / "w.json"
    argv = ["workload", "generate", "--kind", "fb2010", "--load", "0.5", "--out", str(out)]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith(f"beamer: error: --load 0.5: {message} (")
    argv = ["simulate", "--workload", str(trace), "--load", "0.5", "--policies", "fifo"]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith(f"beamer: error: --load: {trace}: {message} (")
    assert not out.exists()


_TERMINATED_WHILE_WRITING = """\
import os, signal, sys
real_fsync = os.fsync
def fsync(fd):  # the temporary file is written: now the termination comes
    os.kill(os.getpid(), signal.SIGTERM)
    real_fsync(fd)
os.fsync = fsync
from control.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", ["generate", "to-trace", "offline"])
def test_a_termination_while_a_workload_file_is_written_leaves_nothing(
    tmp_path: Path, command: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    trace = Path(__file__).parent / "data" / "tiny_trace.txt"
    argv = {
        "generate": ["workload", "generate", "--jobs", "2", "--out", str(out / "w.json")],
        "to-trace": ["workload", "to-trace", str(trace), "--out", str(out / "t.txt")],
        "offline": ["workload", "offline", str(trace), "--out", str(out / "o.txt")],
    }[command]
    done = subprocess.run(
        [sys.executable, "-c", _TERMINATED_WHILE_WRITING, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[1],
        check=False,
    )
    assert done.returncode == 128 + 15, done.stderr
    assert done.stderr == "beamer: interrupted\n"
    assert list(out.iterdir()) == []


def test_to_trace_of_a_workload_the_format_cannot_hold_names_the_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.txt"
    source = DATA / "tiny_workload.json"  # experiments of several stages
    assert main(["workload", "to-trace", str(source), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"beamer: error: {source}: experiment ")
    assert "single coflows only" in err and not out.exists()


def test_offline_of_a_json_workload_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It used to be read as a trace and refused for a header of one field."""
    out = tmp_path / "o.txt"
    source = DATA / "tiny_workload.json"
    assert main(["workload", "offline", str(source), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"beamer: error: {source}: a JSON workload; the offline variant is made of a "
        "Coflow-Benchmark trace\n"
    )
    assert not out.exists()


@pytest.mark.parametrize("command", ["to-trace", "offline"])
@pytest.mark.parametrize("kind", ["missing-directory", "directory", "device", "file-as-directory"])
def test_an_output_that_cannot_be_written_is_refused_before_the_work(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    kind: str,
) -> None:
    """Converting the whole trace takes seconds: a bad ``--out`` found after it cost them."""
    import workloads.cli

    def no_work(*_args: object, **_kwargs: object) -> None:
        pytest.fail("the work started before the output was checked")

    monkeypatch.setattr(workloads.cli, "load_workload", no_work)
    monkeypatch.setattr(workloads.cli, "read_text", no_work)
    (tmp_path / "file").write_text("x")
    out = {
        "missing-directory": tmp_path / "nowhere" / "t.txt",
        "directory": tmp_path,
        "device": Path("/dev/null"),
        "file-as-directory": tmp_path / "file" / "t.txt",
    }[kind]
    assert main(["workload", command, "fb2010", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"beamer: error: {out}: cannot write")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file"]


@pytest.mark.parametrize("workload", ["fb2010", str(DATA / "tiny_workload.json")])
def test_show_refuses_a_seed_for_a_workload_no_seed_draws(
    capsys: pytest.CaptureFixture[str], workload: str
) -> None:
    """The seed was ignored: the summary of "seed 3" was the one workload's, as simulate
    refuses to report it."""
    assert main(["workload", "show", workload, "--seed", "3"]) == 2
    assert capsys.readouterr().err == (
        f"beamer: error: --seed: the workload {workload} is the same for every seed (only "
        "hp-tuning is drawn from one): leave --seed out\n"
    )
    assert main(["workload", "show", "hp-tuning", "--seed", "3"]) == 0
