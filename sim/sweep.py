"""``beamer sweep GRIDFILE``: every policy on every setting and seed of a grid.

Runs (one policy on one seed's workload at one grid point) go to the local
executor or to Ray (``--executor ray``), one task each; each task generates or
loads its workload itself and returns the same metrics as ``beamer simulate``.
Finished runs are appended to ``OUT/runs.jsonl`` as they arrive, so running
the same command again resumes: runs already there are not run again. A run
that fails is reported with its grid point (and listed in
``OUT/failures.jsonl``); the others go on. At the end the sweep writes, per
figure of the grid, ``OUT/FIGURE.csv`` and ``OUT/FIGURE.png`` (average SCT
relative to the reference policy per setting, with the per-seed spread), and
``OUT/table.md`` with every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, cast

from control.errors import UserError
from control.files import (
    atomic_write_text,
    output_directory,
    outputs_ready,
    read_text,
    removed_if_left_empty,
)
from control.interrupts import terminations_unwind
from control.model import StageKey, Workload
from control.options import path_option
from control.policies.spec import policy_from_spec
from sim.engine import SimConfig, simulate
from sim.executors import Executor, RunsFailed, TaskFailure, run_tasks
from sim.grid import Grid, Point, describe, load_grid, run_key
from sim.metrics import isolated_sct, summarize
from sim.sweep_report import RunRecord, report_names, write_reports

RUNS_FILE = "runs.jsonl"
FAILURES_FILE = "failures.jsonl"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="run a grid of settings x seeds x policies in the simulator (local or on Ray)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "grid", type=path_option, help="grid file, YAML or JSON (see docs/sweep.md)"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="directory for runs.jsonl, CSV files, plots and table.md (default out/sweep/GRID)",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="discard the runs already in OUT/runs.jsonl instead of resuming",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    from sim.cli import add_executor_flags

    add_executor_flags(parser)
    parser.set_defaults(func=run)


@dataclass(frozen=True, slots=True)
class SweepRun:
    """One task: a policy on one seed's workload at one grid point."""

    point: Point
    seed: int
    policy: str

    def key(self) -> str:
        return run_key(self.point, self.seed, self.policy)


def run(args: argparse.Namespace) -> int:
    """``beamer sweep``. SIGTERM and SIGHUP stop it as Ctrl-C does (the runs in progress
    end, their workers with them; finished runs stay in runs.jsonl), and the directories
    it made for its outputs are removed again when nothing was written to them."""
    with terminations_unwind(), removed_if_left_empty():
        return _checked_sweep(args)


def _checked_sweep(args: argparse.Namespace) -> int:
    grid = load_grid(args.grid)
    executor = Executor(args.executor, args.jobs, args.ray_address)
    out = output_directory(args.out) if args.out is not None else _default_out(args.grid)
    _check_workloads(grid)
    executor.check_ready()
    # Nothing is written or deleted before here: a refused command changes nothing.
    return _sweep(args, grid, executor, out)


def _default_out(grid_path: Path) -> Path:
    """``out/sweep/GRID``, after the grid file's name, which must name a directory there:
    a file called ``...yaml`` would write into ``out`` itself."""
    stem = grid_path.stem
    if stem in ("", ".", ".."):
        raise UserError(
            f"{grid_path}: the file's name gives no directory under out/sweep ({stem!r}); "
            "name one with --out"
        )
    return Path("out") / "sweep" / stem


def _sweep(args: argparse.Namespace, grid: Grid, executor: Executor, out: Path) -> int:
    # Every file the sweep writes must be writable before a run starts: a failure after
    # the runs would cost them (runs.jsonl keeps what finished, the reports would not).
    outputs_ready(out, [RUNS_FILE, FAILURES_FILE, *report_names(grid)])
    runs_path = out / RUNS_FILE
    # --restart replaces runs.jsonl at the first new result, not before: a sweep that
    # cannot start (Ray fails, Ctrl-C) keeps the old runs and the reports made from them.
    done = {} if args.restart else read_records(runs_path)
    runs = [
        SweepRun(point, seed, policy)
        for point in grid.points()
        for seed in grid.seeds
        for policy in grid.policies
    ]
    todo = [spec for spec in runs if spec.key() not in done]
    if len(todo) < len(runs):
        print(
            f"sweep: resuming, {len(runs) - len(todo)} of {len(runs)} runs already in {runs_path}",
            file=sys.stderr,
        )
    failures = _run_and_append(todo, executor, runs_path, done, replace=args.restart)
    _write_failures(out / FAILURES_FILE, failures)
    table = write_reports(out, grid, done)
    if args.json:
        json.dump(table, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print((out / "table.md").read_text(encoding="utf-8"), end="")
        print(f"\nwrote {out}: runs.jsonl, table.md and a CSV and a plot per figure")
    if failures:
        raise RunsFailed(
            f"{len(failures)} of {len(runs)} runs failed (listed in {out / FAILURES_FILE}); "
            "run the same command again to retry them, finished runs are kept"
        )
    return 0


def _check_workloads(grid: Grid) -> None:
    """Files named by the grid must load here before any run starts, and every point's
    workload must build (for the grid's first seed): a setting no workload can satisfy (a
    load that puts the arrivals past the limit, more jobs than a workload may hold, a load
    on a file) is the grid's error, not one failed run per seed and policy."""
    from workloads.loader import load_workload

    for name in sorted({point.workload for point in grid.points()} - {"hp-tuning"}):
        try:
            workload = load_workload(name)
        except UserError as error:
            raise UserError(f"{grid.path}: workload: {error}") from None
        if not workload.experiments:
            raise UserError(f"{grid.path}: workload: {name}: no experiments, so no SCT to compare")
    built: set[str] = set()
    for point in grid.points():
        key = json.dumps([point.workload, point.load, *_shape_key(point)])
        if key in built:
            continue
        built.add(key)
        try:
            _build_workload(point, grid.seeds[0])
        except UserError as error:
            shown = describe(point, [name for name, value in point.as_dict().items() if value])
            raise UserError(f"{grid.path}: the setting {shown}: {error}") from None


def _run_and_append(
    todo: list[SweepRun],
    executor: Executor,
    runs_path: Path,
    done: dict[str, RunRecord],
    *,
    replace: bool = False,
) -> list[tuple[SweepRun, TaskFailure]]:
    """Run ``todo``, appending each finished run to ``runs_path`` (with ``replace``, the
    first one replaces what the file held; no run finished, the file is removed)."""
    failures: list[tuple[SweepRun, TaskFailure]] = []
    if not todo:
        return failures
    handle: TextIO | None = None  # opened at the first result: a sweep that cannot start
    try:  # (e.g. no Ray cluster at --ray-address) leaves no file behind
        for index, outcome in run_tasks(sweep_run, todo, executor, desc="sweep", describe=_label):
            spec = todo[index]
            if isinstance(outcome, TaskFailure):
                failures.append((spec, outcome))
                continue
            if handle is None:
                try:
                    handle = runs_path.open("w" if replace else "a", encoding="utf-8")
                except OSError as error:
                    raise UserError(
                        f"{runs_path}: cannot write: {error.strerror or error}"
                    ) from None
            record: RunRecord = {
                "key": spec.key(),
                "point": spec.point.as_dict(),
                "seed": spec.seed,
                "policy": spec.policy,
                "metrics": outcome,
            }
            # One line per finished run, on disk before the next: a killed sweep keeps it.
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
            done[record["key"]] = record
    finally:
        if handle is not None:
            handle.close()
    if replace and handle is None:
        runs_path.unlink(missing_ok=True)
    return failures


def _label(spec: SweepRun) -> str:
    return f"{describe(spec.point)} seed={spec.seed} policy={spec.policy}"


def _write_failures(path: Path, failures: list[tuple[SweepRun, TaskFailure]]) -> None:
    if not failures:
        path.unlink(missing_ok=True)
        return
    lines = [
        json.dumps(
            {
                "point": spec.point.as_dict(),
                "seed": spec.seed,
                "policy": spec.policy,
                "error": failure.error,
                "traceback": failure.details,
            },
            sort_keys=True,
        )
        for spec, failure in failures
    ]
    atomic_write_text(path, "\n".join(lines) + "\n")


def read_records(path: Path) -> dict[str, RunRecord]:
    """The runs already finished, by key. A line cut short by a kill is dropped from the file.

    Only a last line that is not whole JSON and has no newline counts as cut short; any
    other line that is not a run record as the sweep writes it (:func:`_check_record`) is
    refused with its line number, before anything runs.
    """
    if not path.exists():
        return {}
    text = read_text(path, what="run log")
    records: dict[str, RunRecord] = {}
    kept: list[str] = []
    # Lines end at "\n" only: str.splitlines also splits at U+2028 and the like, which
    # JSON strings may hold raw (a run of a workload file so named).
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = _check_record(_decode(line))
        except _CutShort as error:
            if number == len(lines) and not text.endswith("\n"):
                break  # the last run's line was being written when the sweep stopped
            problem = str(error)
        except _NotARecord as error:
            problem = str(error)
        else:
            records[record["key"]] = record
            kept.append(line)
            continue
        raise UserError(
            f"{path}:{number}: not a run record: {problem} (remove the line, or use --restart "
            "to run every run again)"
        )
    if text and (not text.endswith("\n") or len(kept) != len([x for x in lines if x.strip()])):
        atomic_write_text(path, "".join(line + "\n" for line in kept))
    return records


class _NotARecord(ValueError):
    pass


class _CutShort(_NotARecord):
    pass


def _decode(line: str) -> object:
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        raise _CutShort(f"invalid JSON at column {error.colno}: {error.msg}") from None
    except ValueError:  # json raises only this one otherwise
        raise _NotARecord(f"a number of more than {sys.get_int_max_str_digits()} digits") from None
    except RecursionError:
        raise _NotARecord("nested too deeply") from None


def _check_record(record: object) -> RunRecord:
    """``record`` if it is a run record: the fields :func:`_run_and_append` writes, with
    ``key`` made of ``point``, ``seed`` and ``policy``, and ``metrics`` numbers, none
    negative or infinite, ``avg_sct_s`` (the one the report uses) finite. Other metrics
    may be NaN: the simulator's mean over nothing (``avg_slowdown`` when every stage
    takes no time)."""
    if not isinstance(record, dict):
        raise _NotARecord("not a JSON object")
    for field, kind in (("key", str), ("point", dict), ("seed", int), ("policy", str)):
        if field not in record:
            raise _NotARecord(f"{field}: missing")
        value = record[field]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise _NotARecord(f"{field}: not {_KINDS[kind]}")
    point = record["point"]
    for name, value in point.items():
        if not (
            value is None
            or isinstance(value, str | int | float)
            or (isinstance(value, list) and all(isinstance(item, str) for item in value))
        ):
            raise _NotARecord(f"point.{_name(name)}: not a parameter value")
    if record["key"] != json.dumps(
        {"point": point, "seed": record["seed"], "policy": record["policy"]},
        sort_keys=True,
        separators=(",", ":"),
    ):
        raise _NotARecord("key: does not match the record's point, seed and policy")
    if "metrics" not in record:
        raise _NotARecord("metrics: missing")
    metrics = record["metrics"]
    if not isinstance(metrics, dict):
        raise _NotARecord("metrics: not a JSON object")
    if "avg_sct_s" not in metrics:
        raise _NotARecord("metrics.avg_sct_s: missing")
    for key, value in metrics.items():
        name = _name(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _NotARecord(f"metrics.{name}: not a number")
        try:
            number = float(value)
        except OverflowError:  # an integer beyond any float
            number = math.inf
        if math.isinf(number):
            raise _NotARecord(f"metrics.{name}: infinite or too large")
        if number < 0:
            raise _NotARecord(f"metrics.{name}: negative ({number:g})")
        if math.isnan(number) and key == "avg_sct_s":
            raise _NotARecord(f"metrics.{name}: NaN, not a number of seconds")
    return cast(RunRecord, record)


_KINDS = {str: "a string", dict: "a JSON object", int: "an integer"}


def _name(key: str) -> str:
    """A field name from the file, for a one-line message."""
    if key.isidentifier() and len(key) <= 40:
        return key
    return json.dumps(key if len(key) <= 40 else key[:40] + "…")


# --- the task ------------------------------------------------------------------------------

_WORKLOADS: dict[tuple[str, int], tuple[Workload, dict[StageKey, float]]] = {}


def _workload(point: Point, seed: int) -> tuple[Workload, dict[StageKey, float]]:
    """The point's workload for ``seed`` and its stages' isolated SCTs, cached per process."""

    cache_key = (json.dumps([point.workload, point.load, *_shape_key(point)]), seed)
    if cache_key not in _WORKLOADS:
        workload = _build_workload(point, seed)
        if len(_WORKLOADS) > 8:
            _WORKLOADS.clear()
        _WORKLOADS[cache_key] = (workload, isolated_sct(workload))
    return _WORKLOADS[cache_key]


def _build_workload(point: Point, seed: int) -> Workload:
    from workloads.loader import load_workload

    if point.workload == "hp-tuning":
        return load_workload("hp-tuning", seed=seed, load=point.load, config=point.hp_config())
    return load_workload(point.workload, seed=seed, load=point.load)


def _shape_key(point: Point) -> list[object]:
    values = point.as_dict()
    return [
        values[name] for name in ("mix", "models", "eta", "max_trials", "sync", "jobs", "hosts")
    ]


def sweep_run(spec: SweepRun) -> dict[str, float]:
    """One run, inside a worker process or a Ray task: the ``beamer simulate`` metrics."""
    from sim.cli import resolve_flow_model

    workload, alone = _workload(spec.point, spec.seed)
    config = SimConfig(
        spec.point.queues,
        spec.point.quantize,
        flow_model=resolve_flow_model("auto", workload),
    )
    result = simulate(workload, policy_from_spec(spec.policy), config)
    metrics = summarize(result, alone)
    if not math.isfinite(metrics["avg_sct_s"]):  # runs.jsonl holds finite SCTs only
        raise ValueError("no stage finished, so there is no average SCT")
    return metrics
