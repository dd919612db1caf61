"""Write a file so that readers see the old content or the new, never a part."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from control.errors import UserError


def atomic_write_text(target: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``target``, flush it, then rename it over.

    On any failure the temporary file is removed and ``target`` is untouched.
    """
    try:
        handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed below, renamed on success)
            "w",
            encoding="utf-8",
            dir=target.parent,
            prefix=f".{target.name}.",
            suffix=".tmp",
            delete=False,
        )
    except OSError as error:
        raise UserError(f"{target}: cannot write: {error.strerror or error}") from None
    try:
        with handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, target)
    except BaseException as error:
        Path(handle.name).unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise UserError(f"{target}: cannot write: {error.strerror or error}") from None
        raise
