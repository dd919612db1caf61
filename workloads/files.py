"""Reading a workload file: a regular file of at most :data:`MAX_FILE_BYTES`, UTF-8 text.

Every workload reader (JSON, Coflow-Benchmark trace, the offline command) reads
through :func:`read_text`, the project's one reader of user files
(:func:`control.files.read_text`) with the workload's limit and wording.
"""

from __future__ import annotations

from pathlib import Path

from control import files
from workloads.limits import MAX_FILE_BYTES


def read_text(path: Path, *, missing_hint: str = "") -> str:
    """The UTF-8 text of the workload file ``path`` (see :func:`control.files.read_text`);
    ``missing_hint`` is appended to the "no such file" message."""
    return files.read_text(
        path,
        what="workload file",
        missing=f"no such file{missing_hint}",
        max_bytes=MAX_FILE_BYTES,
    )
