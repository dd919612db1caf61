"""``beamer tune``: Ray Tune's HyperBand, end to end over the emulated P4 switch."""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from typing import Any

from bmv2_topos.cli import add_network_options
from control.errors import UserError
from control.options import integer, number

MAX_TRIALS = 32
"""Every trial of the search runs at once on the machine (see tuner.run.trial_cpus)."""


def register(subparsers: Any) -> None:
    tune = subparsers.add_parser(
        "tune",
        help="run a Ray Tune HyperBand search whose trials train over the emulated switch",
        description="For each policy and seed: builds the emulated network (root needed), "
        "starts the controller with the policy, and runs a HyperBand search of Ray Tune whose "
        "trials train a small model data-parallel, with every gradient all-reduce crossing the "
        "switch as Beamer-tagged TCP. Prints the stage completion times, the simulator's "
        "prediction and the tuner's best configuration.",
    )
    tune.add_argument(
        "--policy",
        "--policies",
        dest="policies",
        default="beamer",
        help="comma-separated policies, e.g. beamer,fair,sincronia (default beamer)",
    )
    tune.add_argument(
        "--trials", type=integer, default=10, help="trials of the search (default 10)"
    )
    tune.add_argument(
        "--max-t", type=integer, default=4, help="HyperBand's max_t in iterations (default 4)"
    )
    tune.add_argument(
        "--eta", type=number, default=2.0, help="HyperBand's reduction factor (default 2)"
    )
    tune.add_argument("--workers", type=integer, default=2, help="data-parallel workers per trial")
    tune.add_argument("--sync", choices=("ring", "ps"), default="ring", help="all-reduce pattern")
    tune.add_argument(
        "--scheduler",
        choices=("hyperband", "asha"),
        default="hyperband",
        help="Ray Tune scheduler (ASHA has no stages and is refused, see docs/tune.md)",
    )
    add_network_options(tune)
    tune.set_defaults(func=run_tune)


def run_tune(args: argparse.Namespace) -> int:
    """SIGTERM and SIGHUP unwind the whole command as Ctrl-C does (not only while Ray
    runs): the network, Ray's processes and directory are removed, and a directory made
    for ``--out`` and left empty (a refused, failed or interrupted run) is removed again."""
    from control.files import removed_if_left_empty
    from control.interrupts import terminations_unwind

    with terminations_unwind(), removed_if_left_empty():
        return _run_tune(args)


NO_RAY = "beamer tune needs Ray: install the project's ray extra (pip install '.[ray]')"


RAY_MODULES = ("ray", "ray.tune", "ray.tune.schedulers", "ray.tune.search.basic_variant")


def require_ray() -> None:
    """Import what the search needs of Ray: an install that is missing or broken (one
    that fails on import) is refused in one line before anything starts."""
    try:
        for module in RAY_MODULES:
            importlib.import_module(module)
    except ImportError as error:
        lines = str(error).strip().splitlines()
        reason = lines[0] if lines else type(error).__name__
        raise UserError(f"{NO_RAY} (importing it failed: {reason})") from None


def _run_tune(args: argparse.Namespace) -> int:
    from bmv2_topos import bmv2, netns
    from bmv2_topos.cli import check_bmv2_files, network_seeds, output_directory_for
    from bmv2_topos.report import OUTPUT_NAMES, table
    from control.files import output_directory
    from control.policies import get_policy
    from control.policies.spec import parse_policy_list
    from control.topology import load_topology
    from tuner.plan import hyperband_plan
    from tuner.run import (
        TUNER_OUTPUT_NAMES,
        TuneOptions,
        run_searches,
        summary_json,
        tuner_table,
    )

    seeds = network_seeds(args)
    policies = parse_policy_list(args.policies, "--policy", get_policy)
    if not 2 <= args.trials <= MAX_TRIALS:
        raise UserError(f"--trials: {args.trials} is out of range 2..{MAX_TRIALS}")
    if not 1 <= args.max_t <= 100:
        raise UserError(f"--max-t: {args.max_t} is out of range 1..100")
    if not (math.isfinite(args.eta) and 1.5 <= args.eta <= 10):
        raise UserError(f"--eta: {args.eta} is out of range 1.5..10")
    try:  # the plan a search builds once Ray and the network are up: fail here instead
        hyperband_plan(args.trials, args.max_t, args.eta)
    except UserError as error:
        raise UserError(
            f"--trials {args.trials}, --max-t {args.max_t}, --eta {args.eta:g}: {error}"
        ) from None
    if args.out is not None:
        output_directory(args.out)  # the name only: the directory is made last
    topology = load_topology(args.topo)
    check_bmv2_files(args, topology)
    needed = args.workers + (1 if args.sync == "ps" else 0)
    if args.workers < 2:
        raise UserError(f"--workers: {args.workers}: a trial needs at least 2 workers")
    if needed > len(topology.hosts):
        raise UserError(
            f"--workers: {args.workers} workers ({args.sync}) need {needed} hosts; "
            f"{args.topo} has {len(topology.hosts)}"
        )
    require_ray()  # after the checks that need no Ray: importing it takes seconds
    if args.scheduler == "asha":
        from ray.tune.schedulers import AsyncHyperBandScheduler

        from tuner.scheduler import require_stages

        require_stages(AsyncHyperBandScheduler())
    netns.require_congestion_control(args.congestion_control)
    # What the network checks once Ray is up (10 s and more): refused here instead.
    netns.require_tools("ip", "ethtool", "tc")
    if any((switch.target or args.target) == "bmv2" for switch in topology.switches):
        bmv2.require_simple_switch_grpc()
    netns.require_root()
    # Made once every input is known good: a refused command leaves no empty directory.
    out = output_directory_for(args.out, [*OUTPUT_NAMES, *TUNER_OUTPUT_NAMES])
    options = TuneOptions(
        topology=topology,
        policies=policies,
        seeds=seeds,
        queues=args.queues,
        rto_min_ms=args.rto_min_ms,
        congestion_control=args.congestion_control,
        trials=args.trials,
        max_t=args.max_t,
        reduction_factor=args.eta,
        workers=args.workers,
        pattern=args.sync,
        target=args.target,
        bmv2_json=args.bmv2_json,
        p4info=args.p4info,
    )
    report = run_searches(options)
    if out is not None:
        for path in report.write_outputs(out):
            print(f"wrote {path}", file=sys.stderr)
    if args.json:
        json.dump(summary_json(report), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print(table(report.emulation))
        print()
        print(tuner_table(report))
    return 0
