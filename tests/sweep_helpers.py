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
