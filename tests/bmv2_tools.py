"""Finding BMv2 and p4c for the differential tests.

The tests look for ``simple_switch_grpc`` and ``p4c`` on PATH, then in
``../shared/tools/p4/bin`` beside the repository (where a test machine may keep
them). A tool that is absent, or present but unable to start (its runtime
libraries missing), makes the tests that need it skip with the reason.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SIDE_TOOLS = REPO_ROOT.parent / "shared" / "tools" / "p4" / "bin"


@functools.cache
def tool_dir(name: str) -> Path | None:
    """The directory holding a working ``name``, or None."""
    found = shutil.which(name)
    candidates = [Path(found).parent] if found else []
    if (SIDE_TOOLS / name).exists():
        candidates.append(SIDE_TOOLS)
    for directory in candidates:
        # p4c's driver takes no --version without a source in some builds; its
        # back end beside it shows whether the libraries load.
        probe = "p4c-bm2-ss" if name == "p4c" and (directory / "p4c-bm2-ss").exists() else name
        try:
            subprocess.run(
                [str(directory / probe), "--version"],
                capture_output=True,
                timeout=30,
                check=True,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        return directory
    return None


def require(*names: str) -> dict[str, str]:
    """Paths of the named tools, or skip the test saying which one is missing.

    Also puts their directories on PATH, so that commands the test runs
    (``beamer compile``, ``beamer emulate --target bmv2``) find them too.
    """
    paths: dict[str, str] = {}
    for name in names:
        directory = tool_dir(name)
        if directory is None:
            pytest.skip(
                f"{name} not found (or its runtime libraries are missing): "
                "put BMv2/p4c on PATH or in ../shared/tools/p4/bin"
            )
        paths[name] = str(directory / name)
        if str(directory) not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = f"{directory}{os.pathsep}{os.environ.get('PATH', '')}"
    return paths


_COMPILED = Path(tempfile.mkdtemp(prefix="beamer-p4c-"))
atexit.register(shutil.rmtree, _COMPILED, True)


@functools.cache
def _p4c_compile_once(source: Path) -> tuple[Path, Path]:
    p4c = require("p4c")["p4c"]
    out_dir = _COMPILED / source.stem
    p4info = out_dir / f"{source.stem}.p4c.p4info.txtpb"
    completed = subprocess.run(
        [p4c, "--target", "bmv2", "--arch", "v1model", "-o", str(out_dir),
         "--p4runtime-files", str(p4info), str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    return out_dir / f"{source.stem}.json", p4info


def p4c_compile(source: Path) -> tuple[Path, Path]:
    """p4c's BMv2 JSON and P4Info text for ``source`` (compiled once per test session)."""
    require("p4c")
    return _p4c_compile_once(source.resolve())
