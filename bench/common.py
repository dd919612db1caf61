"""Shared benchmark helpers: repeat a measurement, report the median as JSON."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def median_seconds(run: Callable[[], object], repeats: int = 5) -> float:
    """Median wall time of ``repeats`` calls; the median resists one slow outlier."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def emit(result: dict[str, Any]) -> None:
    """Print one JSON object on stdout (the benchmarks' only output format)."""
    json.dump(result, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


MAX_SEEDS = 100_000
"""Seeds one benchmark run may ask for: a range typed with one digit too many must be
refused, not expanded into memory."""


def parse_seed_ranges(text: str) -> list[int]:
    """Seeds as ``11-30`` or ``1,4,7`` (or both mixed), each once; a malformed list, a
    range whose end is below its start, a seed named twice (it would weigh twice in every
    mean) or more than :data:`MAX_SEEDS` seeds is a user error."""
    from control.addresses import is_decimal
    from control.errors import UserError
    from control.options import refuse_repeats

    seeds: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not is_decimal(low) or (dash and not is_decimal(high)):
            raise UserError(f"--seeds: {part.strip()!r} is not a seed or a range LOW-HIGH")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise UserError(f"--seeds: {part.strip()!r} ends below its start")
        if len(seeds) + last - first + 1 > MAX_SEEDS:
            raise UserError(f"--seeds: {text!r} names more than {MAX_SEEDS:,} seeds")
        seeds.extend(range(first, last + 1))
    refuse_repeats(seeds, "--seeds", lambda seed: f"seed {seed}")
    return seeds


def run_command(run_main: Callable[[], None]) -> None:
    """Run a benchmark's ``run_main``; a user error is one line on stderr and its exit
    status, Ctrl-C the line "interrupted" and 130 (a traceback says nothing here)."""
    from control.errors import UserError

    try:
        run_main()
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(error.exit_status)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


def stop_child(child: subprocess.Popen[Any], timeout_s: float) -> None:
    """End a child that stops when its standard input closes; kill it if it does not."""
    if child.stdin is not None:
        child.stdin.close()
    try:
        child.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def at_least_one(text: str) -> int:
    """A count option such as ``--workers`` or ``--repeats`` (argparse ``type``): a whole
    number, at least 1 (0 would run nothing, or be taken as 1 without a word)."""
    import argparse

    from control.options import integer

    count = integer(text)
    if count < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return count


def pool_size(workers: int) -> int:
    """Worker processes for ``--workers``: at least one, at most the machine's cores
    (more would only make the runs' wall times, which the tables report, longer)."""
    return max(1, min(workers, os.cpu_count() or 1))


@contextlib.contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """The process pool of a bench that spreads seeds over ``--workers`` processes.

    Its workers leave Ctrl-C to the bench (each would print a traceback of its own) and
    end with it however it ends; left early (Ctrl-C, a run that failed), the pool ends
    its workers at once rather than wait for the runs in progress."""
    from sim.executors import end_with, end_workers

    pool = ProcessPoolExecutor(
        max_workers=pool_size(workers), initializer=end_with, initargs=(os.getpid(),)
    )
    finished = False
    try:
        yield pool
        finished = True
    finally:
        if not finished:
            end_workers(pool)
        pool.shutdown(wait=True, cancel_futures=True)
