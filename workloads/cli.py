"""``beamer workload``: generate a workload file, or summarise any workload."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from control.errors import UserError
from control.files import atomic_write_text, output_file_ready
from control.interrupts import terminations_unwind
from control.options import (
    StandardOutput,
    integer,
    number,
    output_or_stdout_option,
    path_option,
    seed,
)
from workloads import coflow_benchmark, json_format
from workloads.files import read_text
from workloads.hp_tuning import HpTuningConfig, shrink_changes
from workloads.limits import SettingError
from workloads.loader import load_workload, looks_like_json, refuse_seed_for_unseeded
from workloads.models import MODELS
from workloads.shapes import MIXES, Shape, parse_models, parse_sync
from workloads.summary import summarize


def register(subparsers: Any) -> None:
    """Add ``workload generate`` and ``workload show`` to the ``beamer`` command."""
    parser = subparsers.add_parser(
        "workload", help="generate, convert and inspect workloads", description=__doc__
    )
    commands = parser.add_subparsers(dest="workload_command", required=True, metavar="ACTION")

    generate = commands.add_parser(
        "generate",
        help="write a workload as beamer-workload/1 JSON",
        description="Generate an HP-tuning workload (or convert the FB2010 trace) to JSON.",
    )
    generate.add_argument("--kind", choices=("hp-tuning", "fb2010"), default="hp-tuning")
    generate.add_argument(
        "--seed", type=seed, default=None, help="random seed of hp-tuning (default 1)"
    )
    generate.add_argument(
        "--load", type=number, default=None, help="target offered load (hp-tuning default 0.8)"
    )
    generate.add_argument("--jobs", type=integer, default=None, help="number of tuning jobs")
    generate.add_argument("--hosts", type=integer, default=None, help="number of hosts")
    generate.add_argument(
        "--link-bps", type=number, default=None, help="host link rate in bit/s (default 10e9)"
    )
    generate.add_argument(
        "--mix",
        choices=MIXES,
        default=None,
        help="tuning jobs: SHA runs, Hyperband runs, or both (default mixed)",
    )
    generate.add_argument(
        "--models",
        default=None,
        help=f"comma-separated models the trials train (default all: {', '.join(MODELS)})",
    )
    generate.add_argument(
        "--eta",
        type=integer,
        default=None,
        help="reduction factor of every job (default: per shape)",
    )
    generate.add_argument(
        "--max-trials",
        type=integer,
        default=None,
        help="maximum budget R of every job: the widest stage starts at most R trials",
    )
    generate.add_argument(
        "--sync", default=None, help="synchronisation: ring, ps, or ring,ps (default both)"
    )
    generate.add_argument(
        "--time-scale",
        type=number,
        default=None,
        help="multiply every duration by this factor, shrinking bytes to keep the shape",
    )
    generate.add_argument(
        "--out",
        type=output_or_stdout_option,
        required=True,
        help="output JSON file (- for standard output)",
    )
    generate.set_defaults(func=_unwinding(_generate))

    show = commands.add_parser(
        "show",
        help="summarise a workload",
        description="Summarise a workload: hp-tuning, fb2010, or a JSON / trace file.",
    )
    show.add_argument("workload", help="hp-tuning, fb2010, or a file")
    show.add_argument("--seed", type=seed, default=None, help="seed for hp-tuning (default 1)")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(func=_show)

    trace = commands.add_parser(
        "to-trace",
        help="write a single-coflow workload in Coflow-Benchmark format",
        description="Write a workload of single coflows as a Coflow-Benchmark trace.",
    )
    trace.add_argument("workload", help="fb2010, or a file")
    trace.add_argument(
        "--out",
        type=output_or_stdout_option,
        required=True,
        help="output trace file (- for standard output)",
    )
    trace.add_argument(
        "--lossy",
        action="store_true",
        help="write it even if the trace cannot carry what changes a run (link rate, "
        "weights, compute times, stage and trial ids, uneven flows), with a warning",
    )
    trace.set_defaults(func=_unwinding(_to_trace))

    offline = commands.add_parser(
        "offline",
        help="write the offline variant of a Coflow-Benchmark trace",
        description="Write the offline variant of a Coflow-Benchmark trace: every coflow "
        "released at time 0, optionally only the coflows of at most --max-flows "
        "mapper x reducer pairs, each reducer's MB split evenly over its mappers and "
        "rounded to whole MB (at least 1). `beamer simulate --workload FILE` reads it.",
    )
    offline.add_argument(
        "trace", type=_trace_option, help="fb2010, or a Coflow-Benchmark trace file"
    )
    offline.add_argument(
        "--max-flows", type=integer, default=None, help="keep coflows of at most this many pairs"
    )
    offline.add_argument(
        "--keep-mb", action="store_true", help="keep the reducers' MB as they are (no rounding)"
    )
    offline.add_argument(
        "--out",
        type=output_or_stdout_option,
        required=True,
        help="output trace file (- for standard output)",
    )
    offline.set_defaults(func=_unwinding(_offline))


def _unwinding(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``command`` with SIGTERM and SIGHUP unwinding it as Ctrl-C does: the file it is
    writing then goes with its temporary, which a termination used to leave behind."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        with terminations_unwind():
            return command(args)

    return run


def _trace_option(text: str) -> str:
    """``fb2010`` or a trace's path (argparse ``type``), kept as written so that
    ``./fb2010`` stays a file; an empty one is refused as :func:`path_option` refuses
    an empty path (it named ``.``, a directory)."""
    path_option(text)
    return text


def _generate(args: argparse.Namespace) -> int:
    destination = _ready_destination(args.out)
    try:
        if args.kind == "fb2010":
            if args.seed is not None:
                raise UserError("--seed applies to --kind hp-tuning only: fb2010 is one trace")
            for flag in SHAPE_FLAGS:
                if getattr(args, flag) is not None:
                    raise UserError(f"--{flag.replace('_', '-')} applies to --kind hp-tuning only")
            workload = load_workload("fb2010", load=args.load)
        else:
            config = config_from_args(args)
            workload = load_workload("hp-tuning", seed=config.seed, config=config)
    except SettingError as error:
        raise UserError(f"{_options_of(error.field, args)}: {error.detail}") from None
    _deliver(args.out, json_format.text_to_write(workload, destination))
    summary = summarize(workload)
    _report(
        args.out,
        f"wrote {destination}: {summary.experiments} experiments, "
        f"{summary.coflows} coflows, {summary.total_bytes / 1e9:.3f} GB",
    )
    return 0


def _ready_destination(out: Path | StandardOutput) -> str:
    """``--out`` as messages name it, a file shown first to be writable: generating or
    converting a workload takes seconds, not to be lost to a path that cannot be written."""
    if not isinstance(out, StandardOutput):
        output_file_ready(out)
    return str(out)


def _deliver(out: Path | StandardOutput, text: str) -> None:
    """Write checked ``text`` to the ``--out`` file, whole or not at all, or to standard
    output for ``-`` (to pipe a workload on without a file)."""
    if isinstance(out, StandardOutput):
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        atomic_write_text(out, text)


def _report(out: Path | StandardOutput, line: str) -> None:
    """Say what was written: on standard error where the output took standard output."""
    print(line, file=sys.stderr if isinstance(out, StandardOutput) else sys.stdout)


def config_from_args(args: argparse.Namespace) -> HpTuningConfig:
    """The generator's configuration the ``workload generate`` flags ask for.

    Every flag is set in one step, so the configuration is checked as a whole
    (an impossible size is refused before anything is drawn) and never in a
    half-set state that a later flag would have made valid.
    """
    base = HpTuningConfig()
    changes: dict[str, Any] = dict(shape_from_args(args).changes())
    changes["seed"] = 1 if args.seed is None else args.seed
    if args.load is not None:
        changes["load"] = args.load
    if args.jobs is not None:
        changes["num_jobs"] = args.jobs
    if args.hosts is not None:
        changes["num_hosts"] = args.hosts
    if args.link_bps is not None or args.time_scale is not None:
        changes.update(
            shrink_changes(
                base,
                link_bps=base.link_bps if args.link_bps is None else args.link_bps,
                time_scale=1.0 if args.time_scale is None else args.time_scale,
            )
        )
    return dataclasses.replace(base, **changes)


_OPTIONS_OF_SETTING = {
    "num_jobs": ("jobs",),
    "num_hosts": ("hosts",),
    "link_bps": ("link_bps",),
    "load": ("load",),
    "time_scale": ("time_scale",),
    "bytes_scale": ("time_scale", "link_bps"),
    "jobs": ("max_trials", "eta", "mix"),
}


def _options_of(setting: str, args: argparse.Namespace) -> str:
    """The options that set the generator's ``setting``, with the values given."""
    names = _OPTIONS_OF_SETTING.get(setting)
    if names is None:
        return setting
    given = [name for name in names if getattr(args, name) is not None] or [names[0]]
    return ", ".join(f"--{name.replace('_', '-')}{_value(getattr(args, name))}" for name in given)


def _value(value: object) -> str:
    if value is None:
        return ""
    return f" {value:g}" if isinstance(value, float) else f" {value}"


SHAPE_FLAGS = (
    "jobs",
    "hosts",
    "link_bps",
    "time_scale",
    "mix",
    "models",
    "eta",
    "max_trials",
    "sync",
)


def shape_from_args(args: argparse.Namespace) -> Shape:
    """The ``--mix/--models/--eta/--max-trials/--sync`` flags as a :class:`Shape`."""
    try:
        return Shape(
            mix=args.mix or "mixed",
            models=None if args.models is None else parse_models(args.models),
            eta=args.eta,
            max_trials=args.max_trials,
            sync=None if args.sync is None else parse_sync(args.sync),
        )
    except UserError as error:
        # Shape names its fields as a grid file does; on the command line they are flags.
        field, _, rest = str(error).partition(": ")
        if field in ("models", "eta", "max_trials", "sync", "mix"):
            raise UserError(f"--{field.replace('_', '-')}: {rest}") from None
        raise


def json_number(value: object) -> object:
    """``value`` as JSON can hold it: a NaN or an infinity (not JSON) becomes null, as
    a metric without a value is null in ``simulate --json``."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _figure(value: float | None) -> str:
    """A figure of ``show``'s table: three decimals, or three significant digits when
    that would be more than a line of digits (arrivals 1e-300 s apart offer a load of
    1e295)."""
    if value is None or not math.isfinite(value):
        return "n/a" if value is None else f"{value} (arrivals too close together to measure it)"
    return f"{value:.3f}" if abs(value) < 1e6 else f"{value:.3e}"


def _show(args: argparse.Namespace) -> int:
    if args.seed is not None:
        refuse_seed_for_unseeded("--seed", args.workload)
    seed_drawn = 1 if args.seed is None else args.seed
    summary = summarize(load_workload(args.workload, seed=seed_drawn))
    if args.json:
        shown = {key: json_number(value) for key, value in dataclasses.asdict(summary).items()}
        print(json.dumps(shown, sort_keys=True, allow_nan=False))
        return 0
    load = _figure(summary.offered_load)
    kinds = ", ".join(f"{kind} {count}" for kind, count in summary.kinds.items()) or "none"
    rows = [
        ("hosts", f"{summary.num_hosts} at {summary.link_bps / 1e9:g} Gbit/s"),
        ("experiments", f"{summary.experiments} ({kinds})"),
        ("jobs (arrival times)", str(summary.jobs)),
        ("stages", str(summary.stages)),
        ("trial-stages", str(summary.trial_stages)),
        ("coflows", str(summary.coflows)),
        ("flows", str(summary.flows)),
        ("bytes", f"{summary.total_bytes:,} ({summary.total_bytes / 1e9:.3f} GB)"),
        ("arrivals", f"{summary.first_arrival_s:.3f} s .. {summary.last_arrival_s:.3f} s"),
        ("offered load", load),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0


def _to_trace(args: argparse.Namespace) -> int:
    destination = _ready_destination(args.out)
    workload = load_workload(args.workload)
    try:
        text = coflow_benchmark.dumps(workload)
    except UserError as error:  # what the format cannot hold: name the input
        raise UserError(f"{args.workload}: {error}") from None
    lost = coflow_benchmark.losses(workload, text)
    if lost and not args.lossy:
        raise UserError(
            f"{destination}: not written: a Coflow-Benchmark trace cannot carry the "
            f"{'; the '.join(lost)}; --lossy writes it without them"
        )
    coflow_benchmark.check_text(text, destination)
    _deliver(args.out, text)
    if lost:
        print(f"beamer: warning: {destination}: dropped the {'; the '.join(lost)}", file=sys.stderr)
    _report(args.out, f"wrote {destination}: {len(workload.experiments)} coflows")
    return 0


def _offline(args: argparse.Namespace) -> int:
    if args.max_flows is not None and args.max_flows < 1:
        raise UserError(f"--max-flows: must be at least 1, not {args.max_flows}")
    destination = _ready_destination(args.out)
    path = coflow_benchmark.default_trace_path() if args.trace == "fb2010" else Path(args.trace)
    source = read_text(path)
    if looks_like_json(source):
        raise UserError(
            f"{path}: a JSON workload; the offline variant is made of a Coflow-Benchmark trace"
        )
    text = coflow_benchmark.offline(
        source,
        str(path),
        max_flows=args.max_flows,
        whole_mb=not args.keep_mb,
    )
    coflow_benchmark.check_text(text, destination)
    _deliver(args.out, text)
    _report(args.out, f"wrote {destination}: {int(text.split()[1])} coflows, all released at 0")
    return 0
