"""``beamer simulate``: run policies over a workload in the fluid simulator and compare them."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from control.addresses import is_decimal
from control.errors import UserError
from control.files import (
    atomic_write_all_bytes,
    csv_bytes,
    output_directory,
    outputs_ready,
    removed_if_left_empty,
)
from control.interrupts import terminations_unwind
from control.model import StageKey, Workload
from control.options import comma_items, integer, number, refuse_repeats
from control.options import parse_seeds as seed_list
from control.options import seed as seed_option
from control.policies import POLICIES
from control.policies.spec import parse_policy_list, policy_from_spec
from control.quantize import STRATEGIES, Strategy
from sim.engine import FLOW_MODELS, FlowModel, SimConfig, simulate
from sim.executors import EXECUTORS, Executor, RunsFailed, TaskFailure, run_tasks
from sim.metrics import METRICS, isolated_sct, summarize
from sim.report import normalised_png, sct_cdf_png, table
from workloads.limits import SettingError
from workloads.loader import refuse_seed_for_unseeded


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="compare scheduling policies in the flow-level simulator",
        description=__doc__,
    )
    parser.add_argument(
        "--workload",
        default="hp-tuning",
        help="hp-tuning, fb2010 or a workload file (JSON or trace)",
    )
    parser.add_argument(
        "--policies",
        default="beamer,sincronia,varys,aalo,fifo-lm,fair",
        help=f"comma-separated, from: {', '.join(POLICIES)}; or beamer:knob=value;... "
        "for a Beamer variant (knobs in control/policies/beamer.py)",
    )
    parser.add_argument(
        "--seed", type=seed_option, default=None, help="one workload seed (default 1)"
    )
    parser.add_argument("--seeds", default=None, help="comma-separated seeds, e.g. 1,2,3")
    parser.add_argument("--load", type=number, default=None, help="offered load (hp-tuning: 0.8)")
    parser.add_argument(
        "--queues", default="ideal", help="K classes, 'ideal' (unlimited), or a list: ideal,8"
    )
    parser.add_argument(
        "--quantize", default="rank", choices=STRATEGIES, help="how a ranking maps onto K classes"
    )
    parser.add_argument(
        "--flow-model",
        default="auto",
        choices=("auto", *FLOW_MODELS),
        help="fast (the default, = auto): compiled allocators on merged identical flows; "
        "per-flow: the reference model, one entry per flow and numpy allocators. Both give "
        "the per-flow fluid answer",
    )
    parser.add_argument("--out", default=None, help="directory for CSV files and plots")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    add_executor_flags(parser)
    parser.set_defaults(func=run)


def add_executor_flags(parser: argparse.ArgumentParser) -> None:
    """``--jobs``, ``--executor local|ray`` and ``--ray-address`` (shared with ``beamer sweep``)."""
    parser.add_argument(
        "--jobs",
        type=integer,
        default=min(os.cpu_count() or 1, 4),
        help="runs in parallel worker processes, or a local Ray's CPUs (default: CPUs, at most 4)",
    )
    parser.add_argument(
        "--executor",
        default="local",
        choices=EXECUTORS,
        help="local worker processes, or one Ray task per run (needs the ray extra)",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        help="HOST:PORT of a running Ray cluster's head (default: a private local instance)",
    )


def parse_seeds(args: argparse.Namespace) -> list[int]:
    """The workload seeds. Only a generated workload has them: with a trace or a file,
    seeds 1,2 would run the same workload twice and report it as two seeds."""
    if args.seed is not None and args.seeds is not None:
        raise UserError("--seed and --seeds: give one or the other")
    seeds = [1 if args.seed is None else args.seed] if args.seeds is None else seed_list(args.seeds)
    given = "--seeds" if args.seeds is not None else "--seed" if args.seed is not None else None
    if given is not None:
        refuse_seed_for_unseeded(given, args.workload)
    return list(seeds)


def parse_queues(text: str) -> list[int | None]:
    modes: list[int | None] = []
    for part in comma_items(text, "--queues"):
        if part == "ideal":
            modes.append(None)
            continue
        if not is_decimal(part) or len(part) > 4:
            raise UserError(f"--queues: {part!r} is neither 'ideal' nor a number of classes")
        k = int(part)
        if not 1 <= k <= 64:
            raise UserError(f"--queues: {k} classes is outside 1..64")
        modes.append(k)
    refuse_repeats(modes, "--queues", lambda mode: str(mode or "ideal"))
    return modes


def parse_policies(text: str) -> list[str]:
    return list(parse_policy_list(text))


def mode_label(mode: int | None) -> str:
    return "ideal" if mode is None else f"{mode}q"


def run(args: argparse.Namespace) -> int:
    """``beamer simulate``. SIGTERM and SIGHUP stop it as Ctrl-C does (the runs in
    progress end, their workers with them), and a directory it made for ``--out`` and
    left empty is removed again."""
    with terminations_unwind(), removed_if_left_empty():
        return _simulate(args)


def _simulate(args: argparse.Namespace) -> int:
    seeds = parse_seeds(args)
    modes = parse_queues(args.queues)
    policies = parse_policies(args.policies)
    if args.load is not None and not (args.load > 0 and math.isfinite(args.load)):
        raise UserError(f"--load: must be a positive number, not {args.load}")
    strategy: Strategy = args.quantize
    executor = Executor(args.executor, args.jobs, args.ray_address)
    executor.check_ready()
    out = None if args.out is None else output_directory(args.out)
    # Load every seed's workload here first: bad input fails before any run starts,
    # and before the output directory is made.
    for seed in seeds:
        try:
            workload, _ = _prepared(args.workload, seed, args.load)
        except SettingError as error:
            if error.field != "load":
                raise
            raise UserError(f"--load: {args.workload}: {error.detail}") from None
        if not workload.experiments:
            raise UserError(f"{args.workload}: the workload has no experiments to simulate")
    if out is not None:
        reference_name = "beamer" if "beamer" in policies else None
        outputs_ready(out, _output_names(modes, reference_name))
    flow_model = resolve_flow_model(args.flow_model, workload)
    runs = [
        RunSpec(args.workload, seed, args.load, mode, strategy, name, flow_model)
        for seed in seeds
        for mode in modes
        for name in policies
    ]
    outcomes = _run_all(runs, executor)
    per_seed: dict[str, list[dict[str, float]]] = {}
    sct_values: dict[str, list[float]] = {}
    stage_rows: list[list[object]] = []
    for spec, (metrics, sct, rows) in zip(runs, outcomes, strict=True):
        label = spec.policy if len(modes) == 1 else f"{spec.policy} {mode_label(spec.mode)}"
        per_seed.setdefault(label, []).append(metrics)
        sct_values.setdefault(label, []).extend(sct)
        stage_rows.extend([label, *row] for row in rows)

    summary = _aggregate(per_seed, policies, modes)
    reference = "beamer" if "beamer" in policies else None
    # The files first: a closed or full standard output must not cost them.
    if out is not None:
        _write_outputs(out, summary, sct_values, stage_rows, policies, modes, reference)
    if args.json:
        # A metric with no value (a slowdown where every stage took no time) is null:
        # NaN is not JSON.
        finite = {
            label: {key: value if math.isfinite(value) else None for key, value in row.items()}
            for label, row in summary.items()
        }
        json.dump(finite, sys.stdout, indent=2, sort_keys=True, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print(
            f"workload {args.workload}, seeds {','.join(map(str, seeds))}, "
            f"quantisation {strategy}, flow model {flow_model}"
        )
        for mode in modes:
            labels = [n if len(modes) == 1 else f"{n} {mode_label(mode)}" for n in policies]
            print(f"\nqueues: {mode_label(mode)}")
            print(table({label: summary[label] for label in labels}, reference))
    return 0


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One simulation: a policy on one seed's workload in one queue mode."""

    workload: str
    seed: int
    load: float | None
    mode: int | None
    strategy: Strategy
    policy: str
    flow_model: FlowModel = "fast"


def resolve_flow_model(choice: str, workload: Workload) -> FlowModel:
    """``auto``: the fast model for every workload (it gives the per-flow answer)."""
    if choice == "auto":
        return "fast"
    for model in FLOW_MODELS:
        if choice == model:
            return model
    raise UserError(f"--flow-model: {choice!r} is not one of auto, {', '.join(FLOW_MODELS)}")


RunOutcome = tuple[dict[str, float], list[float], list[list[object]]]

_PREPARED: dict[tuple[str, int, float | None], tuple[Workload, dict[StageKey, float]]] = {}


def _prepared(spec: str, seed: int, load: float | None) -> tuple[Workload, dict[StageKey, float]]:
    """The workload of one seed and its stages' isolated SCTs, cached per process."""
    key = (spec, seed, load)
    if key not in _PREPARED:
        from workloads.loader import load_workload

        workload = load_workload(spec, seed=seed, load=load)
        _PREPARED[key] = (workload, isolated_sct(workload))
    return _PREPARED[key]


def _one_run(spec: RunSpec) -> RunOutcome:
    workload, alone = _prepared(spec.workload, spec.seed, spec.load)
    result = simulate(
        workload,
        policy_from_spec(spec.policy),
        SimConfig(spec.mode, spec.strategy, flow_model=spec.flow_model),
    )
    rows: list[list[object]] = []
    for key, sct_s in sorted(result.sct_s.items()):
        base = alone.get(key, 0.0)
        rows.append(
            [
                spec.seed,
                key.experiment_id,
                key.stage_id,
                result.stage_release_s[key],
                sct_s,
                sct_s / base if base > 0 else "",
            ]
        )
    return summarize(result, alone), list(result.sct_s.values()), rows


def _run_all(runs: list[RunSpec], executor: Executor) -> list[RunOutcome]:
    """Every run, in order, on ``executor`` (results are identical on every executor)."""
    outcomes: list[RunOutcome | TaskFailure | None] = [None] * len(runs)
    for index, outcome in run_tasks(_one_run, runs, executor, desc="simulate", describe=_describe):
        outcomes[index] = outcome
    failed = [runs[i] for i, outcome in enumerate(outcomes) if isinstance(outcome, TaskFailure)]
    if failed:
        raise RunsFailed(f"{len(failed)} of {len(runs)} runs failed, first: {_describe(failed[0])}")
    return [
        outcome
        for outcome in outcomes
        if outcome is not None and not isinstance(outcome, TaskFailure)
    ]


def _describe(spec: RunSpec) -> str:
    return f"seed {spec.seed} {spec.policy} {mode_label(spec.mode)}"


def _aggregate(
    per_seed: dict[str, list[dict[str, float]]], policies: list[str], modes: list[int | None]
) -> dict[str, dict[str, float]]:
    """Mean over seeds; with beamer present, avg SCT relative to beamer's in the same mode."""
    summary: dict[str, dict[str, float]] = {}
    for label, runs in per_seed.items():
        summary[label] = {key: statistics.fmean(run[key] for run in runs) for key in runs[0]}
    if "beamer" in policies:
        for mode in modes:
            suffix = "" if len(modes) == 1 else f" {mode_label(mode)}"
            reference = per_seed[f"beamer{suffix}"]
            if any(ref["avg_sct_s"] <= 0.0 for ref in reference):
                continue  # stages that took no time: no ratio to take (the table says n/a)
            for name in policies:
                runs = per_seed[f"{name}{suffix}"]
                ratios = [
                    run["avg_sct_s"] / ref["avg_sct_s"]
                    for run, ref in zip(runs, reference, strict=True)
                ]
                summary[f"{name}{suffix}"]["avg_sct_rel"] = statistics.fmean(ratios)
                summary[f"{name}{suffix}"]["seeds_beamer_lower"] = float(
                    sum(1 for r in ratios if r > 1.0)
                )
    return summary


def _output_names(modes: list[int | None], reference: str | None) -> list[str]:
    """The files ``--out`` gets (the plot against the reference where it has a ratio)."""
    names = ["summary.csv", "stages.csv"]
    for mode in modes:
        names.append(f"sct_cdf_{mode_label(mode)}.png")
        if reference is not None:
            names.append(f"avg_sct_vs_{reference}_{mode_label(mode)}.png")
    return names


def _write_outputs(
    out: Path,
    summary: dict[str, dict[str, float]],
    sct_values: dict[str, list[float]],
    stage_rows: list[list[object]],
    policies: list[str],
    modes: list[int | None],
    reference: str | None,
) -> None:
    """Every output file, written together or not at all."""
    keys = [*METRICS, "avg_sct_rel", "seeds_beamer_lower", "events", "wall_s"]
    files = {
        out / "summary.csv": csv_bytes(
            ["policy", *keys],
            [
                [label, *(metrics.get(key, "") for key in keys)]
                for label, metrics in summary.items()
            ],
        ),
        out / "stages.csv": csv_bytes(
            ["policy", "seed", "experiment", "stage", "release_s", "sct_s", "slowdown"],
            stage_rows,
        ),
    }
    for mode in modes:
        suffix = "" if len(modes) == 1 else f" {mode_label(mode)}"
        name = mode_label(mode)
        files[out / f"sct_cdf_{name}.png"] = sct_cdf_png(
            {policy: sct_values[f"{policy}{suffix}"] for policy in policies},
            f"SCT CDF, queues {name}",
        )
        if reference is not None and "avg_sct_rel" in summary[f"{reference}{suffix}"]:
            files[out / f"avg_sct_vs_{reference}_{name}.png"] = normalised_png(
                {policy: summary[f"{policy}{suffix}"]["avg_sct_rel"] for policy in policies},
                reference,
                f"average SCT relative to {reference}, queues {name}",
            )
    atomic_write_all_bytes(files)
    _remove_stale_outputs(out, {target.name for target in files})


STALE_OUTPUT = re.compile(r"(sct_cdf|avg_sct_vs_beamer)_(ideal|([1-9]|[1-5][0-9]|6[0-4])q)\.png")
"""The plots ``--out`` gets whose set depends on the run (its queue modes, whether Beamer
is compared): the names of every one this command can write, and of nothing else."""


def _remove_stale_outputs(out: Path, written: set[str]) -> None:
    """Remove the plots an earlier run left in ``out`` that this one did not write (other
    queue modes, no Beamer): they would sit beside this run's summary as if they were
    its own. Only this command's own plot names are touched; directories never."""
    try:
        entries = [entry for entry in os.scandir(out) if STALE_OUTPUT.fullmatch(entry.name)]
    except OSError as error:
        raise UserError(f"{out}: cannot list: {error.strerror or error}") from None
    for entry in entries:
        if entry.name in written or entry.is_dir(follow_symlinks=False):
            continue
        try:
            os.unlink(entry.path)
        except FileNotFoundError:
            pass
        except OSError as error:
            raise UserError(
                f"{entry.path}: cannot remove this plot of an earlier run: "
                f"{error.strerror or error}"
            ) from None
