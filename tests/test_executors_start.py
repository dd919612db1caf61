"""A private Ray instance that fails to start leaves nothing behind.

In a module of its own: the Ray tests of test_executors.py share one instance for
the whole module, and a second start in the same process would stand in its way.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest


def test_a_local_ray_that_fails_to_start_leaves_no_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    from sim.executors import start_local_ray

    def refuse(**kwargs: Any) -> None:
        raise RuntimeError("the node timed out during startup")

    before = set(Path(tempfile.gettempdir()).glob("beamer-ray-*"))
    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(RuntimeError, match="timed out"):
        start_local_ray(2)
    assert set(Path(tempfile.gettempdir()).glob("beamer-ray-*")) == before
