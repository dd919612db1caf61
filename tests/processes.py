"""Ending the processes a test starts, whatever state they are in."""

from __future__ import annotations

import subprocess
from typing import Any


def end_process(process: subprocess.Popen[Any], timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not ended within ``timeout_s``; reaped either way."""
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout_s)
