"""``beamer emulate`` (runs in network namespaces) and ``beamer clean`` (leftovers)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from control.errors import UserError
from control.files import output_directory, outputs_ready, read_json
from control.options import integer, number, parse_seeds, path_option, seed

if TYPE_CHECKING:
    from control.topology import Topology

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TOPOLOGY = REPO_ROOT / "bmv2_topos" / "single_switch.json"
DEFAULT_TIME_SCALE = 0.6
"""Kept equal to :data:`bmv2_topos.emulate.DEFAULT_TIME_SCALE` (this module imports lazily)."""
DEFAULT_RTO_MIN_MS = 10
"""Kept equal to :data:`bmv2_topos.launcher.DEFAULT_RTO_MIN_MS`."""
DEFAULT_CONGESTION_CONTROL = "cubic"
"""Kept equal to :data:`bmv2_topos.launcher.DEFAULT_CONGESTION_CONTROL`."""


def register(subparsers: Any) -> None:
    emulate = subparsers.add_parser(
        "emulate",
        help="run a tuning workload on emulated hosts and switches, one run per policy and seed",
        description="Builds the topology out of network namespaces (root needed), starts the "
        "switches and the controller, runs the HP-tuning workload as real tagged TCP, and "
        "prints the stage completion times next to the simulator's prediction.",
    )
    emulate.add_argument(
        "--policies", default="beamer,fair", help="comma-separated policies (default beamer,fair)"
    )
    emulate.add_argument(
        "--workload", default="hp-tuning", help="hp-tuning (default) or a workload file"
    )
    emulate.add_argument(
        "--time-scale",
        type=number,
        default=DEFAULT_TIME_SCALE,
        help="durations relative to the full-scale workload "
        f"(default {DEFAULT_TIME_SCALE:g}: a run takes 20-40 s)",
    )
    emulate.add_argument(
        "--queue-depth",
        type=integer,
        default=None,
        metavar="PACKETS",
        help="depth of each priority queue of the embedded switch (default 256)",
    )
    add_network_options(emulate)
    emulate.set_defaults(func=run_emulate)

    clean = subparsers.add_parser(
        "clean", help="remove namespaces, veths and processes left by killed emulation runs"
    )
    clean.set_defaults(func=run_clean)


def add_network_options(parser: Any) -> None:
    """The options of every command that runs on emulated networks (``emulate``, ``tune``):
    topology, switch target, seeds, classes, p4c's outputs for BMv2, and the outputs."""
    parser.add_argument("--topo", type=path_option, default=DEFAULT_TOPOLOGY, help="topology file")
    parser.add_argument(
        "--target", choices=("embedded", "bmv2"), default="embedded", help="switch target"
    )
    seeds = parser.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=seed, help="one seed")
    seeds.add_argument("--seeds", help="comma-separated seeds (default 1)")
    parser.add_argument("--queues", type=integer, default=8, help="priority classes (1..8)")
    parser.add_argument(
        "--rto-min-ms",
        type=integer,
        default=DEFAULT_RTO_MIN_MS,
        help=f"the hosts' minimum TCP retransmission timeout (1..10000, default "
        f"{DEFAULT_RTO_MIN_MS})",
    )
    parser.add_argument(
        "--congestion-control",
        default=DEFAULT_CONGESTION_CONTROL,
        metavar="NAME",
        help="the hosts' TCP congestion control, one the kernel has loaded "
        f"(default {DEFAULT_CONGESTION_CONTROL}, Linux's own default)",
    )
    parser.add_argument(
        "--bmv2-json", type=path_option, help="p4c's BMv2 JSON (with --target bmv2)"
    )
    parser.add_argument("--p4info", type=path_option, help="p4c's P4Info text (with --target bmv2)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", help="write CSV files and PNG plots here")


def network_seeds(args: argparse.Namespace) -> tuple[int, ...]:
    """Check the options of :func:`add_network_options`; the seeds to run."""
    if args.seed is not None:
        seeds: tuple[int, ...] = (args.seed,)
    else:
        seeds = parse_seeds("1" if args.seeds is None else args.seeds)
    if not 1 <= args.queues <= 8:
        raise UserError(f"--queues: {args.queues} is out of range 1..8")
    if not 1 <= args.rto_min_ms <= 10_000:
        raise UserError(f"--rto-min-ms: {args.rto_min_ms} is out of range 1..10000")
    if args.target == "bmv2" and (args.bmv2_json is None or args.p4info is None):
        raise UserError("--target bmv2 needs --bmv2-json and --p4info (outputs of p4c)")
    return seeds


def check_bmv2_files(args: argparse.Namespace, topology: Topology) -> None:
    """p4c's outputs, when a switch runs on BMv2 (``--target bmv2`` or a switch's own
    ``target``), read and parsed as the controller will read them: the controller starts
    only once the network and the switches are up, too late for a missing or broken file."""
    from control.controller_cli import bmv2_artifacts, refuse_unused_bmv2_files

    targets = {switch.target or args.target for switch in topology.switches}
    refuse_unused_bmv2_files(args.bmv2_json, args.p4info, targets)
    if "bmv2" not in targets:
        return
    if args.bmv2_json is None or args.p4info is None:
        raise UserError("a BMv2 switch needs --bmv2-json and --p4info (outputs of p4c)")
    try:
        read_json(args.bmv2_json, what="BMv2 JSON file", missing="no such BMv2 JSON file")
    except UserError as error:
        raise UserError(f"--bmv2-json {error}") from None
    try:
        bmv2_artifacts(args.bmv2_json, args.p4info)
    except UserError as error:  # the JSON was read above: this is the P4Info's
        raise UserError(f"--p4info {error}") from None


def policy_names(text: str, option: str) -> tuple[str, ...]:
    """The policies of ``text``, each once and every one known, checked before a
    mistake could surface after the network of the first run was built."""
    from control.policies.spec import parse_policy_list

    return parse_policy_list(text, option)


def output_directory_for(out: str | None, names: Sequence[str]) -> Path | None:
    """``--out``, made and shown to take ``names`` before the first network is built."""
    return None if out is None else outputs_ready(output_directory(out), names)


def run_emulate(args: argparse.Namespace) -> int:
    """SIGTERM and SIGHUP unwind the whole command as Ctrl-C does (not only while a
    network is up): the simulator's prediction, the gaps between runs and the writing
    of ``--out`` leave nothing behind either."""
    from control.interrupts import terminations_unwind

    with terminations_unwind():
        return _run_emulate(args)


def _run_emulate(args: argparse.Namespace) -> int:
    from bmv2_topos import netns
    from bmv2_topos.emulate import EmulationOptions, prepare_workloads, run_emulations
    from bmv2_topos.report import OUTPUT_NAMES, summary, table, write_outputs
    from control.topology import load_topology

    seeds = network_seeds(args)
    if not (math.isfinite(args.time_scale) and args.time_scale > 0):
        raise UserError(f"--time-scale: must be a positive finite number, got {args.time_scale}")
    if args.queue_depth is not None and not 1 <= args.queue_depth <= 100_000:
        raise UserError(f"--queue-depth: {args.queue_depth} is out of range 1..100000")
    if args.out is not None:
        output_directory(args.out)  # the name only: the directory is made last
    policies = policy_names(args.policies, "--policies")
    topology = load_topology(args.topo)
    check_bmv2_files(args, topology)
    options = EmulationOptions(
        topology=topology,
        policies=policies,
        seeds=seeds,
        workload=args.workload,
        target=args.target,
        queues=args.queues,
        rto_min_ms=args.rto_min_ms,
        congestion_control=args.congestion_control,
        time_scale=args.time_scale,
        bmv2_json=args.bmv2_json,
        p4info=args.p4info,
    )
    if args.queue_depth is not None:
        options = dataclasses.replace(options, queue_depth_packets=args.queue_depth)
    workloads = prepare_workloads(options)
    netns.require_congestion_control(args.congestion_control)
    netns.require_root()
    # Made once every input is known good: a refused command leaves no empty directory.
    out = output_directory_for(args.out, OUTPUT_NAMES)
    report = run_emulations(options, workloads=workloads)
    # The table first: an --out that went bad during the runs must not cost the results.
    if args.json:
        json.dump(summary(report), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print(table(report))
    sys.stdout.flush()
    if out is not None:
        for path in write_outputs(report, out):
            print(f"wrote {path}", file=sys.stderr)
    return 0


def run_clean(args: argparse.Namespace) -> int:
    from bmv2_topos import netns
    from bmv2_topos.state import clean_leftovers

    netns.require_root()
    report = clean_leftovers()
    for item in report.removed:
        print(f"removed {item}")
    for run_id in report.skipped_live_runs:
        print(f"left run {run_id} alone: it is still running")
    for failure in report.failures:
        print(f"beamer clean: could not remove all of {failure}", file=sys.stderr)
    for unreadable in report.unreadable:
        print(
            f"left {unreadable} (its state file cannot be read: not known to be a run's; "
            "remove it by hand if no run uses it)"
        )
    if not report.removed and not report.failures and not report.unreadable:
        print("nothing to clean")
    return 1 if report.failures else 0
