"""``beamer controller`` (the daemon) and ``beamer status`` (what it is doing)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any, cast

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from control import quantize
from control.addresses import checked_hostport
from control.controller import (
    ClassAssigner,
    Controller,
    ControllerConfig,
    PipelineArtifacts,
    Target,
)
from control.errors import UserError
from control.events import (
    REQUEST_TIMEOUT_S,
    EventClient,
    EventHandler,
    EventServer,
    ServerLimits,
    client_address,
    default_socket_dir,
    default_socket_path,
    ensure_private_dir,
    raise_open_files_limit,
)
from control.files import output_name_problem, read_bytes, read_text
from control.interrupts import restore_handlers
from control.model import CoflowKey
from control.options import integer, number, output_path_option, path_option
from control.p4runtime_client import DEFAULT_ELECTION_ID, format_election_id, parse_election_id
from control.policies import warm_up as warm_up_policies
from control.policies.base import Policy, Ranking
from control.policies.spec import policy_from_spec
from control.topology import load_topology

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_P4 = REPO_ROOT / "p4src" / "beamer.p4"
DEFAULT_EVENTS_ADDR = "127.0.0.1:9100"

log = logging.getLogger("beamer.controller")


def register(subparsers: Any) -> None:
    run = subparsers.add_parser(
        "controller",
        help="run the controller: provision switches, take events, keep priorities in sync",
        description="Connects to every switch of a topology over P4Runtime, pushes the "
        "pipeline, installs forwarding, and rewrites the class tables on every workload event.",
    )
    run.add_argument(
        "--topo", required=True, type=path_option, help="topology file (bmv2_topos/*.json)"
    )
    run.add_argument(
        "--policy",
        required=True,
        help="scheduling policy (e.g. beamer, aalo, beamer-lookahead:tail_weight=2)",
    )
    run.add_argument("--queues", type=integer, default=8, help="priority classes K (1..8)")
    run.add_argument(
        "--quantize",
        choices=("rank", "exponential"),
        default="rank",
        help="how the ranking maps onto the K classes (control.quantize)",
    )
    run.add_argument("--events-addr", default=DEFAULT_EVENTS_ADDR, help="HOST:PORT for HTTP")
    run.add_argument(
        "--events-socket",
        default=None,
        help="Unix socket for hosts in other namespaces (default "
        f"{default_socket_path()}, in a directory only this user may write)",
    )
    run.add_argument(
        "--election-id",
        default=format_election_id(DEFAULT_ELECTION_ID),
        metavar="N|HIGH,LOW",
        help="P4Runtime election id, an integer or HIGH,LOW as p4runtime-shell takes it "
        "(default %(default)s = 2**65, above the tools' defaults)",
    )
    run.add_argument(
        "--target",
        choices=("embedded", "bmv2"),
        default="embedded",
        help="target of switches whose topology entry names none",
    )
    run.add_argument(
        "--p4", type=path_option, default=DEFAULT_P4, help="P4 source (embedded target)"
    )
    run.add_argument("--bmv2-json", type=path_option, help="p4c's BMv2 JSON (bmv2 target)")
    run.add_argument("--p4info", type=path_option, help="p4c's P4Info text file (bmv2 target)")
    run.add_argument("--counter-interval", type=number, default=1.0, help="seconds between reads")
    run.add_argument(
        "--write-budget",
        type=number,
        default=2.0,
        help="seconds an event waits for one switch's writes; a slower switch is set "
        "lagging and caught up in the background (default %(default)s)",
    )
    run.add_argument(
        "--journal",
        type=output_path_option,
        default=None,
        help="keep accepted events in this file so a restarted controller continues",
    )
    run.add_argument(
        "--events-timeout",
        type=number,
        default=REQUEST_TIMEOUT_S,
        help="seconds a client has to send one whole request (default %(default)s)",
    )
    run.set_defaults(func=run_controller)

    status = subparsers.add_parser(
        "status", help="show the controller's order, classes and installed entries"
    )
    where = status.add_mutually_exclusive_group()
    where.add_argument(
        "--events-addr", default=None, help=f"controller HOST:PORT (default {DEFAULT_EVENTS_ADDR})"
    )
    where.add_argument("--events-socket", default=None, help="controller Unix socket")
    status.add_argument("--json", action="store_true", help="print the raw JSON status")
    status.set_defaults(func=show_status)


# --- policy glue --------------------------------------------------------------------------


def load_policy(name: str, queues: int, strategy: str = "rank") -> tuple[Policy, ClassAssigner]:
    """The named policy (the simulator's code) and the K-class assigner of ``control.quantize``."""
    if strategy not in quantize.STRATEGIES:
        raise UserError(f"unknown quantisation {strategy!r} (known: rank, exponential)")
    chosen = cast(quantize.Strategy, strategy)

    def assign(ranking: Ranking, k: int) -> list[tuple[CoflowKey, int]]:
        classes = quantize.quantize(ranking, k, chosen)
        return [(key, classes[key]) for key in ranking.order()]

    return policy_from_spec(name), assign


# --- pipeline artefacts -----------------------------------------------------------------


def embedded_artifacts(p4_path: Path) -> PipelineArtifacts:
    # Imported here: only the embedded target needs the compiler, and the CLI stays quick.
    from softswitch.frontend import compile_file

    program = compile_file(p4_path)
    return PipelineArtifacts(program.p4info, program.device_config())


def refuse_unused_bmv2_files(
    bmv2_json: Path | None, p4info: Path | None, targets: set[Target]
) -> None:
    """``--bmv2-json`` and ``--p4info`` serve switches on BMv2 only: given for a network
    with none, they were ignored without a word, and a mistaken ``--target`` or path
    went unseen."""
    if "bmv2" in targets:
        return
    for option, value in (("--bmv2-json", bmv2_json), ("--p4info", p4info)):
        if value is not None:
            raise UserError(
                f"{option}: no switch runs on BMv2 (give --target bmv2, or a switch "
                'its "target": "bmv2" in the topology)'
            )


def bmv2_artifacts(json_path: Path | None, p4info_path: Path | None) -> PipelineArtifacts:
    if json_path is None or p4info_path is None:
        raise UserError(
            "the bmv2 target needs --bmv2-json and --p4info (from p4c --target bmv2 "
            "--arch v1model --p4runtime-files ...)"
        )
    device_config = read_bytes(json_path, what="BMv2 JSON file")
    p4info_text = read_text(p4info_path)
    p4info = p4info_pb2.P4Info()
    try:
        text_format.Parse(p4info_text, p4info)
    except text_format.ParseError as error:
        raise UserError(f"{p4info_path}:{error}") from None
    return PipelineArtifacts(p4info, device_config)


# --- commands -----------------------------------------------------------------------------

MIN_SECONDS = 0.001
"""The shortest interval, budget or timeout the controller takes: a nanosecond would read
counters without pause, set every switch lagging, or time every request out."""
MAX_SECONDS = 3600


def run_controller(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if not 1 <= args.queues <= 8:
        raise UserError(f"--queues: {args.queues} is out of range 1..8 (3-bit priority)")
    try:
        election_id = parse_election_id(args.election_id)
    except ValueError as error:
        raise UserError(f"--election-id: {error}") from None
    for option, seconds in (
        ("--events-timeout", args.events_timeout),
        ("--write-budget", args.write_budget),
        ("--counter-interval", args.counter_interval),
    ):
        if not MIN_SECONDS <= seconds <= MAX_SECONDS:
            raise UserError(f"{option}: {seconds} is not in [{MIN_SECONDS}, {MAX_SECONDS}] seconds")
    check_events_options(args)
    topology = load_topology(args.topo)
    if args.events_socket is not None:
        socket_path = args.events_socket
    else:
        ensure_private_dir(default_socket_dir())
        socket_path = default_socket_path()
    targets: set[Target] = {s.target or args.target for s in topology.switches}
    refuse_unused_bmv2_files(args.bmv2_json, args.p4info, targets)
    artifacts: dict[Target, PipelineArtifacts] = {}
    if "embedded" in targets:
        artifacts["embedded"] = embedded_artifacts(args.p4)
    if "bmv2" in targets:
        artifacts["bmv2"] = bmv2_artifacts(args.bmv2_json, args.p4info)
    policy, assign = load_policy(args.policy, args.queues, args.quantize)
    warm_up_policies()
    config = ControllerConfig(
        topology=topology,
        artifacts=artifacts,
        policy_name=args.policy,
        queues=args.queues,
        election_id=election_id,
        default_target=args.target,
        counter_interval_s=args.counter_interval,
        write_budget_s=args.write_budget,
        journal_path=args.journal,
    )
    limits = ServerLimits(request_timeout_s=args.events_timeout)
    raise_open_files_limit(limits.max_connections + 256)
    # Listening first: an address in use is refused before the controller takes its
    # journal's lock (a file it would leave behind). Nothing is served before start().
    server = EventServer(EventHandler(), args.events_addr, socket_path, limits)
    try:
        controller = Controller(
            config, policy, assign, policy_factory=lambda: policy_from_spec(args.policy)
        )
    except BaseException:
        server.stop()
        raise
    server.handler = controller
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    # SIGHUP (its terminal closed) too: stopped by a signal it does not handle, the
    # controller would leave its socket behind.
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        # The API serves while the switches are brought up: status and health answer, and
        # events are applied (a switch not yet ready catches up with them when it is).
        server.start()
        controller.start()
        for session in controller.sessions.values():
            log.info("%s (%s): %s", session.spec.name, session.spec.grpc_addr, session.state)
            if session.error:
                log.error("%s: %s", session.spec.name, session.error)
        log.info("events API on http://%s and unix:%s", server.url, socket_path)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        restore_handlers(previous)
        server.stop()
        controller.stop()
    return 0


def check_events_options(args: argparse.Namespace) -> None:
    """The event API's options, checked before the switches and the pipeline are: the
    server would refuse a bad address only after them, without naming the option, and
    an empty socket path taken as not given would serve the default socket instead."""
    try:
        checked_hostport(args.events_addr, allow_zero=True)
    except UserError as error:
        raise UserError(f"--events-addr: {error}") from None
    if args.events_socket is not None:
        if not args.events_socket.strip():
            raise UserError("--events-socket: an empty path (leave the option out for the default)")
        problem = output_name_problem(args.events_socket)
        if problem is not None:
            raise UserError(f"--events-socket: {problem}")


def status_address(args: argparse.Namespace) -> str:
    """The controller ``beamer status`` asks, checked before it connects. An option given
    empty is refused: taken as not given, it would ask the default address instead."""
    for option, value in (
        ("--events-socket", args.events_socket),
        ("--events-addr", args.events_addr),
    ):
        if value is not None:
            try:
                return client_address(value)
            except UserError as error:
                raise UserError(f"{option}: {error}") from None
    return DEFAULT_EVENTS_ADDR


def show_status(args: argparse.Namespace) -> int:
    address = status_address(args)
    with EventClient(address, timeout_s=10) as client:
        status = client.status()
    if args.json:
        json.dump(status, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    try:
        text = format_status(status)
    except KeyError as error:
        raise UserError(
            f"{address}: the status has no field {error}: not a Beamer controller?"
        ) from None
    except (TypeError, ValueError, IndexError, AttributeError):
        raise UserError(
            f"{address}: the status has a field of the wrong kind: not a Beamer controller?"
        ) from None
    sys.stdout.write(text)
    return 0


def format_status(status: dict[str, Any]) -> str:
    lines = [
        f"policy {status['policy']}, {status['queues']} classes, election id "
        f"{format_election_id(status['election_id'])}, {status['events_applied']} events"
        + (
            f", last reaction {status['last_reaction_ms']} ms"
            if status.get("last_reaction_ms") is not None
            else ""
        ),
        "",
        "switches:",
    ]
    for switch in status["switches"]:
        line = f"  {switch['name']:<8} {switch['address']:<22} {switch['state']}"
        current = switch.get("election_id")
        if current is not None and current != status["election_id"]:
            # Taken back from a client with a higher id: the id the switch last saw.
            line += f"  election id {format_election_id(current)}"
        if switch.get("error"):
            line += f"  ({switch['error']})"
        if switch.get("retry_in_s") is not None:
            line += f"  next attempt in {switch['retry_in_s']:.1f} s"
        lines.append(line)
    lines += [
        "",
        "order (most urgent first):",
        "  rank  coflow (exp, stage, trial, iter)  id  class",
    ]
    for rank, item in enumerate(status["order"]):
        exp, stage, trial, iteration = item["coflow"]
        mark = "  coflow entry" if item["override"] else ""
        lines.append(
            f"  {rank:>4}  ({exp}, {stage}, {trial}, {iteration}){'':<14} "
            f"{item['coflow_id']:#010x}  {item['class']}{mark}"
        )
    lines += ["", "stages:"]
    for stage in status["stages"]:
        mark = "  (fallback: stage-level only)" if stage["fallback"] else ""
        lines.append(
            f"  experiment {stage['experiment_id']} stage {stage['stage_id']}: "
            f"class {stage['class']}{mark}"
        )
    for switch in status["switches"]:
        lines += ["", f"entries on {switch['name']} ({len(switch['entries'])}):"]
        lines += [f"  {entry}" for entry in switch["entries"]]
    return "\n".join(lines) + "\n"
