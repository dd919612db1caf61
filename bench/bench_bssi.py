"""BSSI ordering time: 1,000 stages × 300 ports (goal: under 100 ms), the compiled kernel
against the numpy loop it reproduces and a plain-Python statement of the same algorithm,
all measured in the same run (each checked to give the same order first)."""

from __future__ import annotations

import numpy as np

from bench.common import emit, median_seconds
from control.cli import OneLineErrors
from control.policies.bssi import bssi_order, bssi_order_numpy, bssi_order_plain


def workload(stages: int, ports: int, seed: int = 1) -> np.ndarray:
    """Each stage touches about 5 % of the ports with exponential byte counts."""
    rng = np.random.default_rng(seed)
    touched = rng.random((stages, ports)) < 0.05
    return rng.exponential(1e8, size=(stages, ports)) * touched


def main() -> None:
    parser = OneLineErrors(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    stages, ports = (200, 60) if args.quick else (1000, 300)
    demand = workload(stages, ports)
    repeats = 3 if args.quick else 7
    assert bssi_order(demand) == bssi_order_numpy(demand)  # also compiles the kernel
    kernel_s = median_seconds(lambda: bssi_order(demand), repeats)
    numpy_s = median_seconds(lambda: bssi_order_numpy(demand), repeats)
    small = workload(200, 60, seed=2)
    small_list = small.tolist()
    assert bssi_order(small) == bssi_order_numpy(small) == bssi_order_plain(small_list)
    reference_s = median_seconds(lambda: bssi_order_plain(small_list), 3)
    numpy_small_s = median_seconds(lambda: bssi_order_numpy(small), repeats)
    kernel_small_s = median_seconds(lambda: bssi_order(small), repeats)
    emit(
        {
            "stages": stages,
            "ports": ports,
            "bssi_ms": kernel_s * 1e3,
            "goal_ms": 100.0,
            "numpy_loop_ms": numpy_s * 1e3,
            "speedup_vs_numpy_loop": numpy_s / kernel_s,
            "reference_200x60_ms": reference_s * 1e3,
            "numpy_200x60_ms": numpy_small_s * 1e3,
            "bssi_200x60_ms": kernel_small_s * 1e3,
            "speedup_vs_reference_200x60": reference_s / kernel_small_s,
        }
    )


if __name__ == "__main__":
    main()
