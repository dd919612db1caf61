"""Shared benchmark helpers: repeat a measurement, report the median as JSON."""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
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
