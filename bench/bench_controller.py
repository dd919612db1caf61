"""Controller reaction time: event in → every write acknowledged, at scale.

Runs beamer.p4 on the embedded switch with its P4Runtime server on loopback in a
child process (as a real switch is: its gRPC threads do not share the controller's
interpreter), starts the controller with a real policy in this process, and fills it
with 100 running stages (100 experiments, one stage each) of 10 trials: 1,000
active coflows. Then it
sends the steady-state event mix, an iteration ending and the next one starting
(``coflow_finished`` + ``coflow_started`` of a random trial), through the HTTP
event API with the Python client, and reports p50 and p99 of the round trip,
the writes each event caused, and where the time went (snapshot, policy,
planning, diff, protobuf encoding, Write RPCs).

A burst follows: 20 trials end an iteration and start the next at once, each from
its own client, as host agents do; it reports the wall time and how many
reschedules covered the 40 events (group commit).

The pure-Python protobuf share is measured directly: every WriteRequest the
controller sent is rebuilt from its entries and serialised again, timed alone.
The reference measured in the same run is the HTTP round trip of an event that
the controller refuses (no scheduling, no writes): the fixed cost of the API.

    python -m bench.bench_controller [--quick] [--policies beamer,sincronia]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from google.protobuf.internal import api_implementation
from p4.v1 import p4runtime_pb2

from bench.common import emit, run_command, stop_child
from control.cli import OneLineErrors
from control.controller import Controller, ControllerConfig
from control.controller_cli import embedded_artifacts, load_policy
from control.errors import UserError
from control.events import EventClient, EventServer
from control.p4runtime_client import P4RuntimeClient
from control.policies.spec import parse_policy_list
from control.topology import parse_topology
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.switch import Switch, VirtualClock

BEAMER_P4 = Path(__file__).resolve().parent.parent / "p4src" / "beamer.p4"
NUM_HOSTS = 16
STAGES = 100
TRIALS_PER_STAGE = 10
GOAL_P50_MS = 20.0
BURST_TRIALS = 20


def topology(grpc_addr: str, hosts: int = NUM_HOSTS) -> Any:
    """One switch with ``hosts`` hosts at 1 Gbit/s on ports 1..hosts (at most 254)."""
    return parse_topology(
        {
            "name": "bench",
            "switches": [{"name": "s1", "device_id": 0, "grpc_addr": grpc_addr}],
            "hosts": [
                {"name": f"h{i}", "ip": f"10.0.0.{i}", "mac": f"02:00:00:00:00:{i:02x}"}
                for i in range(1, hosts + 1)
            ],
            "links": [
                {"node1": f"h{i}", "node2": "s1", "port2": i, "rate_mbps": 1000}
                for i in range(1, hosts + 1)
            ],
        }
    )


def plan(experiment_id: int, rng: random.Random) -> dict[str, Any]:
    """One stage of ring all-reduce trials on 4 random hosts, sizes spread 10x."""
    trials = []
    for trial_id in range(TRIALS_PER_STAGE):
        hosts = rng.sample(range(NUM_HOSTS), 4)
        size = rng.randint(10, 100) * 1_000_000
        flows = [
            {"src": hosts[i], "dst": hosts[(i + 1) % 4], "size_bytes": size // 2} for i in range(4)
        ]
        trials.append({"trial_id": trial_id, "iterations": 1000, "hosts": hosts, "flows": flows})
    second = [{"trial_id": 0, "iterations": 10, "flows": [{"src": 0, "dst": 1, "size_bytes": 1}]}]
    return {
        "experiment_id": experiment_id,
        "stages": [{"stage_id": 0, "trials": trials}, {"stage_id": 1, "trials": second}],
    }


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


class RecordingWrites:
    """Keeps a copy of every WriteRequest's updates, to time their protobuf cost alone."""

    def __init__(self) -> None:
        self.batches: list[list[p4runtime_pb2.Update]] = []
        self.original = P4RuntimeClient.write

    def install(self) -> None:
        recorder = self

        def write(client: P4RuntimeClient, updates: Any, *args: Any) -> None:
            recorder.batches.append(list(updates))
            recorder.original(client, updates, *args)

        P4RuntimeClient.write = write  # type: ignore[method-assign,assignment]

    def uninstall(self) -> None:
        P4RuntimeClient.write = self.original  # type: ignore[method-assign]

    def protobuf_seconds(self) -> float:
        """Rebuild each request from scratch (field by field) and serialise it."""
        started = time.perf_counter()
        for batch in self.batches:
            request = p4runtime_pb2.WriteRequest(device_id=0)
            request.election_id.low = 1
            for update in batch:
                copy = request.updates.add(type=update.type)
                source = update.entity.table_entry
                entry = copy.entity.table_entry
                entry.table_id = source.table_id
                for match in source.match:
                    entry.match.add(field_id=match.field_id).exact.value = match.exact.value
                action = entry.action.action
                action.action_id = source.action.action.action_id
                for param in source.action.action.params:
                    action.params.add(param_id=param.param_id, value=param.value)
            request.SerializeToString()
        return time.perf_counter() - started


def serve_switch() -> None:
    """Child mode: an embedded switch with its P4Runtime server until stdin closes."""
    switch = Switch(clock=VirtualClock(), priority_queues=8)
    server = P4RuntimeServer(switch, 0, "127.0.0.1:0")
    server.start()
    print(server.addr, flush=True)
    try:
        sys.stdin.read()
    finally:
        server.stop(0)
        switch.close()


@contextlib.contextmanager
def switch_process() -> Iterator[str]:
    """Start the switch child; yields its P4Runtime address; always ends the child."""
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_controller", "--serve-switch"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    try:
        assert child.stdout is not None
        address = child.stdout.readline().strip()
        if not address:
            raise RuntimeError("the switch process did not start")
        yield address
    finally:
        stop_child(child, 10)


def fill(url: str, plans: list[dict[str, Any]], clients: int = 10) -> None:
    """Release the experiments and start every trial's first coflow, from several clients
    at once (group commit keeps this from costing one reschedule per event)."""
    failures: list[BaseException] = []

    def agent(share: list[dict[str, Any]]) -> None:
        try:
            with EventClient(url) as client:
                for experiment in share:
                    experiment_id = experiment["experiment_id"]
                    client.experiment_released(experiment)
                    client.stage_released(experiment_id, 0)
                    for trial_id in range(TRIALS_PER_STAGE):
                        client.trial_started(experiment_id, 0, trial_id)
                        client.coflow_started(experiment_id, 0, trial_id, 0)
        except BaseException as error:  # reported below
            failures.append(error)

    threads = [threading.Thread(target=agent, args=(plans[i::clients],)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def measure_burst(
    url: str, iteration: dict[tuple[int, int], int], controller: Controller
) -> dict[str, float]:
    """A synchronisation burst: one trial of each of 20 stages ends an iteration and
    starts the next at the same moment, each from its own client (as host agents do)."""
    trials = [(experiment_id, 0) for experiment_id in range(0, STAGES, STAGES // BURST_TRIALS)]
    reschedules = controller.reschedules
    failures: list[BaseException] = []

    def agent(experiment_id: int, trial_id: int) -> None:
        current = iteration[experiment_id, trial_id]
        try:
            with EventClient(url) as client:
                client.coflow_finished(experiment_id, 0, trial_id, current)
                client.coflow_started(experiment_id, 0, trial_id, current + 1)
        except BaseException as error:  # reported below
            failures.append(error)
        iteration[experiment_id, trial_id] = current + 1

    threads = [threading.Thread(target=agent, args=trial) for trial in trials]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise failures[0]
    return {
        "burst_events": 2 * len(trials),
        "burst_s": elapsed,
        "burst_reschedules": controller.reschedules - reschedules,
    }


def run(events: int, policy_name: str, seed: int) -> dict[str, Any]:
    with switch_process() as address:
        return measure(address, events, policy_name, seed)


def measure(address: str, events: int, policy_name: str, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    policy, assign = load_policy(policy_name, 8)
    config = ControllerConfig(
        topology=topology(address),
        artifacts={"embedded": embedded_artifacts(BEAMER_P4)},
        policy_name=policy_name,
        counter_interval_s=3600.0,
    )
    controller = Controller(config, policy, assign)
    events_server = EventServer(controller, tcp_addr="127.0.0.1:0")
    recorder = RecordingWrites()
    try:
        controller.start()
        events_server.start()
        plans = [plan(experiment_id, rng) for experiment_id in range(STAGES)]
        fill_started = time.perf_counter()
        fill(events_server.url, plans)
        fill_s = time.perf_counter() - fill_started
        with EventClient(events_server.url) as client:
            status = client.status()
            assert len(status["order"]) == STAGES * TRIALS_PER_STAGE
            installed = len(status["switches"][0]["entries"])

            refused = []
            for _ in range(max(20, events // 10)):
                started = time.perf_counter()
                with contextlib.suppress(UserError):
                    client.stage_released(65535, 0)
                refused.append(time.perf_counter() - started)

            iteration = {(e, t): 0 for e in range(STAGES) for t in range(TRIALS_PER_STAGE)}
            latencies = []
            writes = {"insert": 0, "modify": 0, "delete": 0, "rpcs": 0}
            controller.phase_s = dict.fromkeys(controller.phase_s, 0.0)
            recorder.install()
            for _ in range(events // 2):
                experiment_id, trial_id = rng.choice(list(iteration))
                current = iteration[experiment_id, trial_id]
                for kind in ("coflow_finished", "coflow_started"):
                    number = current if kind == "coflow_finished" else current + 1
                    event = {
                        "type": kind,
                        "experiment_id": experiment_id,
                        "stage_id": 0,
                        "trial_id": trial_id,
                        "iteration": number,
                    }
                    started = time.perf_counter()
                    reply = client.send(event)
                    latencies.append(time.perf_counter() - started)
                    for name in writes:
                        writes[name] += reply["writes"][name]
                iteration[experiment_id, trial_id] = current + 1
            recorder.uninstall()
        phases = dict(controller.phase_s)
        burst = measure_burst(events_server.url, iteration, controller)
        protobuf_s = recorder.protobuf_seconds()
    finally:
        recorder.uninstall()
        events_server.stop()
        controller.stop()
    measured = len(latencies)
    total_s = sum(latencies)
    return {
        "latencies": latencies,
        "refused": refused,
        "writes_per_event": {k: v / measured for k, v in writes.items()},
        "phase_share": {k: v / total_s for k, v in phases.items()},
        "phase_ms_per_event": {k: v * 1e3 / measured for k, v in phases.items()},
        "protobuf_ms_per_event": protobuf_s * 1e3 / measured,
        "protobuf_share": protobuf_s / total_s,
        "fill_s": fill_s,
        **burst,
        "entries_installed": installed,
    }


def main() -> None:
    run_command(run_main)


def run_main() -> None:
    parser = OneLineErrors(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer events, one run")
    parser.add_argument(
        "--policies",
        default="beamer,sincronia",
        help="comma-separated policies to run (default beamer,sincronia)",
    )
    parser.add_argument("--serve-switch", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_switch:
        serve_switch()
        return
    # Checked before any switch starts: an unknown policy found after the others' runs
    # would cost them.
    policies = parse_policy_list(args.policies)
    runs = 1 if args.quick else 3
    events = 60 if args.quick else 300
    emit(
        {
            "benchmark": "controller reaction time (event in -> all writes acknowledged)",
            "stages": STAGES,
            "active_coflows": STAGES * TRIALS_PER_STAGE,
            "runs": runs,
            "goal_p50_ms": GOAL_P50_MS,
            "protobuf_backend": api_implementation.Type(),
            "policies": {
                name: summarise([run(events, name, seed) for seed in range(1, runs + 1)])
                for name in policies
            },
        }
    )


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    latencies = [x for r in results for x in r["latencies"]]
    refused = [x for r in results for x in r["refused"]]
    p50_ms = percentile(latencies, 50) * 1e3
    return {
        "events_measured": len(latencies),
        "p50_ms": round(p50_ms, 3),
        "p99_ms": round(percentile(latencies, 99) * 1e3, 3),
        "p50_over_goal": round(p50_ms / GOAL_P50_MS, 3),
        "reference_refused_event_p50_ms": round(statistics.median(refused) * 1e3, 3),
        "writes_per_event": _median_dict([r["writes_per_event"] for r in results]),
        "phase_ms_per_event": _median_dict([r["phase_ms_per_event"] for r in results]),
        "phase_share_of_reaction": _median_dict([r["phase_share"] for r in results]),
        "protobuf_build_and_serialise_ms_per_event": round(
            statistics.median(r["protobuf_ms_per_event"] for r in results), 4
        ),
        "protobuf_share_of_reaction": round(
            statistics.median(r["protobuf_share"] for r in results), 4
        ),
        "fill_1000_coflows_s": round(statistics.median(r["fill_s"] for r in results), 3),
        "burst_events": results[0]["burst_events"],
        "burst_s": round(statistics.median(r["burst_s"] for r in results), 3),
        "burst_reschedules": statistics.median(r["burst_reschedules"] for r in results),
        "entries_installed": results[0]["entries_installed"],
    }


def _median_dict(items: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(d[key] for d in items), 4) for key in items[0]}


if __name__ == "__main__":
    main()
