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

Then stages end: the first ``--stage-ends`` experiments with a stage left, in arrival
order, each finish their running stage's coflows and start the next stage
(``coflow_finished`` ... ``stage_completed``, ``stage_released``, ``trial_started``,
``coflow_started``). The same three runs measure the slowest round trip of each stage
end and, in the background, the time until a search the stage end started
(``stage_evals``) is ranked; a lookahead without ``stage_evals`` searches at arrivals
only, and its stage ends cost what the rule's do.

    python -m bench.bench_arrivals [--quick] [--arrivals 16] [--stage-ends 8]
        [--policy beamer-lookahead-p99]

``--policy`` names the lookahead searched (any ``beamer-lookahead`` variant); a larger
search budget delays the searched order, not the reply.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any, ClassVar

from bench.bench_controller import BEAMER_P4, switch_process, topology
from bench.common import emit, run_command
from bench.heldout import mix_workload
from control.cli import OneLineErrors
from control.controller import Controller, ControllerConfig
from control.controller_cli import embedded_artifacts, load_policy
from control.errors import UserError
from control.events import EventClient, EventServer
from control.model import Experiment, Stage
from control.options import integer
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


class SlowestRoundTrip:
    """Sends events and keeps the slowest round trip among them (s)."""

    def __init__(self) -> None:
        self.slowest_s = 0.0

    def __call__(self, send: Callable[..., object], *args: Any) -> None:
        started = time.perf_counter()
        send(*args)
        self.slowest_s = max(self.slowest_s, time.perf_counter() - started)


def start_stage(
    timed: SlowestRoundTrip, client: EventClient, experiment_id: int, stage: Stage
) -> None:
    """Release ``stage`` and start each of its trials' first coflow."""
    timed(client.stage_released, experiment_id, stage.stage_id)
    for trial in stage.trials:
        timed(client.trial_started, experiment_id, stage.stage_id, trial.trial_id)
        timed(client.coflow_started, experiment_id, stage.stage_id, trial.trial_id, 0)


def arrive(client: EventClient, experiment: Experiment) -> float:
    """Release ``experiment`` and start its first stage; the slowest round trip (s)."""
    timed = SlowestRoundTrip()
    timed(client.experiment_released, experiment)
    start_stage(timed, client, experiment.experiment_id, experiment.stages[0])
    return timed.slowest_s


def end_stage(client: EventClient, experiment: Experiment, stage_index: int) -> float:
    """Finish stage ``stage_index`` of ``experiment`` (started by :func:`arrive` or by the
    last call) and start the next; the slowest round trip (s)."""
    experiment_id = experiment.experiment_id
    ending = experiment.stages[stage_index]
    timed = SlowestRoundTrip()
    for trial in ending.trials:
        timed(client.coflow_finished, experiment_id, ending.stage_id, trial.trial_id, 0)
        timed(client.trial_stopped, experiment_id, ending.stage_id, trial.trial_id)
    timed(client.stage_completed, experiment_id, ending.stage_id)
    start_stage(timed, client, experiment_id, experiment.stages[stage_index + 1])
    return timed.slowest_s


def settle(policy: LookaheadPolicy, started: float) -> float:
    """Wait until no background search is under way or due; seconds since ``started``."""
    deadline = started + SETTLE_TIMEOUT_S
    while policy.pending:
        if time.perf_counter() > deadline:
            raise RuntimeError("a background search did not return")
        time.sleep(0.005)
    return time.perf_counter() - started


def run(
    mode: str, lookahead: str, experiments: list[Experiment], stage_ends: int, hosts: int
) -> dict[str, Any]:
    """One controller run in ``mode`` (``beamer``, ``background`` or ``in-place``), the
    last two with the policy named ``lookahead``: every arrival, then ``stage_ends``
    stage ends."""
    policy, assign = load_policy("beamer" if mode == "beamer" else lookahead, 8)
    driven: Any = InPlace(policy) if mode == "in-place" else policy  # type: ignore[arg-type]
    replies, settles, stage_replies, stage_settles = [], [], [], []
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
                        settles.append(settle(policy, started))
                simulations_before = searched(policy)
                for experiment in staged(experiments, stage_ends):
                    started = time.perf_counter()
                    stage_replies.append(end_stage(client, experiment, 0))
                    if mode == "background":
                        assert isinstance(policy, LookaheadPolicy)
                        stage_settles.append(settle(policy, started))
                stage_simulations = searched(policy) - simulations_before
        finally:
            events.stop()
            controller.stop()
    order = policy.order if isinstance(policy, LookaheadPolicy) else ()
    return {
        "replies_s": replies,
        "settles_s": settles,
        "stage_replies_s": stage_replies,
        "stage_settles_s": stage_settles,
        "stage_simulations": stage_simulations,
        "order": order,
    }


def searched(policy: Any) -> int:
    """The simulations ``policy``'s searches have run so far (0 for the rule)."""
    return policy.simulations if isinstance(policy, LookaheadPolicy) else 0


def staged(experiments: list[Experiment], stage_ends: int) -> list[Experiment]:
    """The first ``stage_ends`` of ``experiments`` with a second stage."""
    return [e for e in experiments if len(e.stages) > 1][:stage_ends]


def summary(samples: list[float]) -> dict[str, float] | None:
    if not samples:
        return None
    return {
        "p50_ms": round(statistics.median(samples) * 1e3, 3),
        "max_ms": round(max(samples) * 1e3, 3),
    }


def main() -> None:
    parser = OneLineErrors(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the first 4 arrivals only")
    parser.add_argument("--arrivals", type=integer, default=16, help="experiments released")
    parser.add_argument(
        "--stage-ends", type=integer, default=8, help="stage ends after the arrivals (default 8)"
    )
    parser.add_argument(
        "--policy", default="beamer-lookahead", help="the lookahead (default beamer-lookahead)"
    )
    args = parser.parse_args()
    workload = mix_workload("default", 1)
    arrivals = 4 if args.quick else args.arrivals
    stage_ends = 2 if args.quick else args.stage_ends
    if not 1 <= arrivals <= len(workload.experiments):
        raise UserError(f"--arrivals: {arrivals} is not between 1 and {len(workload.experiments)}")
    if not 0 <= stage_ends <= arrivals:
        raise UserError(f"--stage-ends: {stage_ends} is not between 0 and {arrivals} (--arrivals)")
    if not isinstance(policy_from_spec(args.policy), LookaheadPolicy):
        raise UserError(f"--policy: {args.policy!r} is not a beamer-lookahead variant")
    experiments = sorted(workload.experiments, key=lambda e: (e.arrival_s, e.experiment_id))
    chosen = experiments[:arrivals]
    modes = ("beamer", "background", "in-place")
    runs = {mode: run(mode, args.policy, chosen, stage_ends, workload.num_hosts) for mode in modes}
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
            "stage_ends": len(runs["beamer"]["stage_replies_s"]),
            "stage_end_reference_beamer_reply": summary(runs["beamer"]["stage_replies_s"]),
            "stage_end_background_reply": summary(runs["background"]["stage_replies_s"]),
            "stage_end_in_place_reply": summary(runs["in-place"]["stage_replies_s"]),
            "stage_end_background_order_ranked_after": summary(
                runs["background"]["stage_settles_s"]
            ),
            "stage_end_simulations": {
                "background": runs["background"]["stage_simulations"],
                "in_place": runs["in-place"]["stage_simulations"],
            },
            "same_final_order": runs["background"]["order"] == runs["in-place"]["order"],
        }
    )


if __name__ == "__main__":
    run_command(main)
