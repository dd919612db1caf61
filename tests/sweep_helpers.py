"""Helpers shared by the sweep tests: a small grid and reading ``runs.jsonl``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SMALL_GRID = """\
# a small grid: 2-job SHA workloads on 10 hosts
policies: [beamer, sincronia, fair]
seeds: [1, 2]
defaults: {jobs: 2, hosts: 10, mix: sha, max_trials: 4}
figures:
  - name: load
    vary: {load: [0.5, 1.0]}
  - name: classes
    vary:
      queues: [2, ideal]
    fixed: {load: 1.0}
"""


def write_grid(tmp_path: Path, text: str = SMALL_GRID, name: str = "small.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def records(path: Path) -> dict[str, dict[str, Any]]:
    """runs.jsonl by key, without the wall-clock time (the one metric that varies)."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        record["metrics"].pop("wall_s")
        out[record["key"]] = record
    return out


FAST_GRID = """\
policies: [fifo-lm, fair]
seeds: [1, 2]
defaults: {jobs: 1, hosts: 9, mix: sha, max_trials: 2, eta: 2}
figures:
  - name: f
    vary: {load: [0.5, 0.9]}
"""
"""Eight runs of a second or less each: one 1-job SHA workload per seed and load."""


def write_records(grid_path: Path, out: Path, sct_s: dict[str, float]) -> Path:
    """``out/runs.jsonl`` with every run of the grid done, each policy's average SCT
    ``sct_s[policy]``: a finished sweep, without running it."""
    from sim.grid import load_grid, run_key

    grid = load_grid(grid_path)
    lines = []
    for point in grid.points():
        for seed in grid.seeds:
            for policy in grid.policies:
                record = {
                    "key": run_key(point, seed, policy),
                    "point": point.as_dict(),
                    "seed": seed,
                    "policy": policy,
                    "metrics": {"avg_sct_s": sct_s[policy], "wall_s": 0.1},
                }
                lines.append(json.dumps(record, sort_keys=True) + "\n")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "runs.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    return path
