"""Arrival reaction with ``beamer-lookahead`` in the controller: the search beside it.

The lookahead searches an experiment order at each arrival, seconds of CPU. The
controller runs that search in a worker process and answers the arrival at once with
the ``beamer`` rule's placement; the searched order follows when the search returns.
This bench releases the experiments of the default HP-tuning workload (seed 1) one
after another into a controller driving beamer.p4 on the embedded switch (in a child
process, as in ``bench_controller``), each with its first stage's trials and coflows
started, through the HTTP event API, and measures per arrival:

* the round trip of the arrival's slowest event (``experiment_released`` ...
  ``coflow_started``) for ``beamer`` (the reference, in the same run), for the
  lookahead searching in the background, and for the lookahead searching in place
  (the reply waits for the search);
* for the background search, the time from the arrival until its order is ranked.

Each arrival waits until the previous search has returned, so both lookahead runs
search the same states and must end with the same order (``same_final_order``).
Nothing finishes while the experiments pile up, so later arrivals search among more
experiments than a running system holds: an upper bound on the search's cost.

    python -m bench.bench_arrivals [--quick] [--arrivals 16] [--policy beamer-lookahead-p99]

``--policy`` names the lookahead searched (any ``beamer-lookahead`` variant); a larger
search budget delays the searched order, not the reply.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, ClassVar

from bench.bench_controller import BEAMER_P4, switch_process, topology
from bench.common import emit, run_command
from bench.heldout import mix_workload
from control.controller import Controller, ControllerConfig
from control.controller_cli import embedded_artifacts, load_policy
from control.errors import UserError
from control.events import EventClient, EventServer
from control.model import Experiment
from control.policies.base import Allocator, Ranking, Snapshot
from control.policies.lookahead import LookaheadPolicy
from control.policies.spec import policy_from_spec

SETTLE_TIMEOUT_S = 600.0
"""A background search that has not returned by then fails the bench."""


class InPlace:
    """The lookahead without its background mode: the controller waits for each search."""

    clairvoyant: ClassVar[bool] = True
    allocator: ClassVar[Allocator] = "priority"

    def __init__(self, policy: LookaheadPolicy) -> None:
        self.policy = policy
        self.name = policy.name

    def rank(self, snapshot: Snapshot) -> Ranking:
        return self.policy.rank(snapshot)


def arrive(client: EventClient, experiment: Experiment) -> float:
    """Release ``experiment`` and start its first stage; the slowest round trip (s)."""
    experiment_id = experiment.experiment_id
    first = experiment.stages[0]
    slowest = 0.0

    def timed(send: Any, *args: Any) -> None:
        nonlocal slowest
        started = time.perf_counter()
        send(*args)
        slowest = max(slowest, time.perf_counter() - started)

    timed(client.experiment_released, experiment)
    timed(client.stage_released, experiment_id, first.stage_id)
    for trial in first.trials:
        timed(client.trial_started, experiment_id, first.stage_id, trial.trial_id)
        timed(client.coflow_started, experiment_id, first.stage_id, trial.trial_id, 0)
    return slowest


def run(mode: str, lookahead: str, experiments: list[Experiment], hosts: int) -> dict[str, Any]:
    """One controller run in ``mode`` (``beamer``, ``background`` or ``in-place``), the
    last two with the policy named ``lookahead``."""
    policy, assign = load_policy("beamer" if mode == "beamer" else lookahead, 8)
    driven: Any = InPlace(policy) if mode == "in-place" else policy  # type: ignore[arg-type]
    replies, settles = [], []
    with switch_process() as address:
        config = ControllerConfig(
            topology=topology(address, hosts),
            artifacts={"embedded": embedded_artifacts(BEAMER_P4)},
            policy_name=policy.name,
            counter_interval_s=3600.0,
        )
        controller = Controller(config, driven, assign)
        events = EventServer(controller, tcp_addr="127.0.0.1:0")
        try:
            controller.start()
            events.start()
            with EventClient(events.url) as client:
                for experiment in experiments:
                    started = time.perf_counter()
                    replies.append(arrive(client, experiment))
                    if mode == "background":
                        assert isinstance(policy, LookaheadPolicy)
                        deadline = started + SETTLE_TIMEOUT_S
                        while policy.pending:
                            if time.perf_counter() > deadline:
                                raise RuntimeError("a background search did not return")
                            time.sleep(0.005)
                        settles.append(time.perf_counter() - started)
        finally:
            events.stop()
            controller.stop()
    order = policy.order if isinstance(policy, LookaheadPolicy) else ()
    return {"replies_s": replies, "settles_s": settles, "order": order}


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(samples) * 1e3, 3),
        "max_ms": round(max(samples) * 1e3, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the first 4 arrivals only")
    parser.add_argument("--arrivals", type=int, default=16, help="experiments released")
    parser.add_argument(
        "--policy", default="beamer-lookahead", help="the lookahead (default beamer-lookahead)"
    )
    args = parser.parse_args()
    workload = mix_workload("default", 1)
    arrivals = 4 if args.quick else args.arrivals
    if not 1 <= arrivals <= len(workload.experiments):
        raise UserError(f"--arrivals: {arrivals} is not between 1 and {len(workload.experiments)}")
    if not isinstance(policy_from_spec(args.policy), LookaheadPolicy):
        raise UserError(f"--policy: {args.policy!r} is not a beamer-lookahead variant")
    experiments = sorted(workload.experiments, key=lambda e: (e.arrival_s, e.experiment_id))
    chosen = experiments[:arrivals]
    modes = ("beamer", "background", "in-place")
    runs = {mode: run(mode, args.policy, chosen, workload.num_hosts) for mode in modes}
    beamer = statistics.median(runs["beamer"]["replies_s"])
    emit(
        {
            "benchmark": "arrival reaction, a lookahead in the controller",
            "policy": args.policy,
            "workload": "default HP-tuning mix, seed 1",
            "arrivals": arrivals,
            "reference_beamer_reply": summary(runs["beamer"]["replies_s"]),
            "background_reply": summary(runs["background"]["replies_s"]),
            "in_place_reply": summary(runs["in-place"]["replies_s"]),
            "background_order_ranked_after": summary(runs["background"]["settles_s"]),
            "background_reply_over_beamer": round(
                statistics.median(runs["background"]["replies_s"]) / beamer, 3
            ),
            "in_place_reply_over_beamer": round(
                statistics.median(runs["in-place"]["replies_s"]) / beamer, 3
            ),
            "same_final_order": runs["background"]["order"] == runs["in-place"]["order"],
        }
    )


if __name__ == "__main__":
    run_command(main)
