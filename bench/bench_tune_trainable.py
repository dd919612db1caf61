"""What one iteration of the tuner's trainable costs: the gradient's bytes, the compute
phase (every worker's shard gradient), the update and the evaluation, and the gradient
all-reduce over loopback TCP against the same sum taken in memory in the same run."""

from __future__ import annotations

import os
from typing import Any

from bench.common import emit, median_seconds, run_command
from control.cli import OneLineErrors
from control.errors import UserError
from control.options import integer
from tuner.allreduce import GroupHost, WorkerGroup, sync_model_bytes
from tuner.contract import HostEndpoint, Pattern
from tuner.training import DataParallelTraining, TrainingConfig, gradient_bytes, local_sum

LINK_BPS = 20e6
"""The emulation's host links."""


def _loopback(hosts: int) -> list[GroupHost]:
    return [GroupHost(f"h{i}", HostEndpoint(None, f"127.0.0.{i + 1}")) for i in range(hosts)]


def _case(config: TrainingConfig, pattern: Pattern, workers: int, repeats: int) -> dict[str, Any]:
    training = DataParallelTraining(config, workers)
    gradients = training.compute()
    summed = local_sum(gradients)
    hosts = workers + (1 if pattern == "ps" else 0)
    model_bytes = sync_model_bytes(training.model.count, pattern, workers)
    with WorkerGroup(_loopback(hosts), pattern, training.model.count) as group:
        group.allreduce(gradients)  # the first transfer opens the windows
        allreduce_s = median_seconds(lambda: group.allreduce(gradients), repeats)
        flow_bytes = [connection.size_bytes for connection in group.connections]
    in_memory_s = median_seconds(lambda: local_sum(gradients), repeats)
    # Alone on 20 Mbit/s links: a ring's flows use disjoint links; a parameter
    # server's link carries every push, then every pull.
    busiest_link_bytes = flow_bytes[0] if pattern == "ring" else workers * model_bytes * 2
    return {
        "compute_s": median_seconds(training.compute, repeats),
        "apply_s": median_seconds(lambda: training.apply(summed), repeats),
        "evaluate_s": median_seconds(training.evaluate, repeats),
        "model_bytes": model_bytes,
        "sync_bytes_per_iteration": sum(flow_bytes),
        "loopback_allreduce_s": allreduce_s,
        "in_memory_sum_s": in_memory_s,
        "loopback_vs_in_memory": allreduce_s / in_memory_s,
        "alone_sync_s_at_20_mbps": busiest_link_bytes * 8 / LINK_BPS,
    }


MAX_HIDDEN_WIDTH = 4096
"""Widest hidden layer measured: its gradient is 70 MB (at 512, 1.2 MB); the model is
built in memory once per worker."""


def main() -> None:
    parser = OneLineErrors(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--hidden-width", type=integer, default=512)
    args = parser.parse_args()
    if not 1 <= args.hidden_width <= MAX_HIDDEN_WIDTH:
        raise UserError(
            f"--hidden-width: {args.hidden_width} is not between 1 and {MAX_HIDDEN_WIDTH}"
        )
    repeats = 5 if args.quick else 21
    config = TrainingConfig(hidden_width=args.hidden_width)
    results: dict[str, Any] = {
        "hidden_width": config.hidden_width,
        "gradient_bytes": gradient_bytes(config),
        "batch_size": config.batch_size,
        "load_average_1min": os.getloadavg()[0],
    }
    cases: list[tuple[Pattern, int]] = [("ring", 2), ("ring", 4), ("ps", 2)]
    for pattern, workers in cases:
        results[f"{pattern}_w{workers}"] = _case(config, pattern, workers, repeats)
    emit(results)


if __name__ == "__main__":
    run_command(main)
