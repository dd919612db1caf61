"""Reading user files and writing outputs so that nothing is ever half-written.

One implementation for every component: workload files, compiler outputs,
simulator reports, run state and the controller's journal.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from control.errors import UserError


def read_text(path: Path) -> str:
    """The UTF-8 text of a user's file; a missing or unreadable file is a :class:`UserError`."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text ({error.reason})") from None
    except OSError as error:
        raise UserError(f"{path}: cannot read: {error.strerror or error}") from None


def atomic_write(target: Path, write: Callable[[Path], object]) -> None:
    """Let ``write`` fill a temporary file beside ``target``, then rename it over.

    Readers see the old content or the new, never a part; on any failure the
    temporary file is removed and ``target`` is untouched. The file gets the
    usual permissions (``0666`` less the umask), not ``mkstemp``'s ``0600``.
    """
    try:
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as error:
        raise UserError(f"{target}: cannot write: {error.strerror or error}") from None
    os.close(fd)
    temporary = Path(name)
    try:
        write(temporary)
        with temporary.open("rb") as written:
            os.fsync(written.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, target)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise UserError(f"{target}: cannot write: {error.strerror or error}") from None
        raise


def atomic_write_text(target: Path, text: str) -> None:
    """:func:`atomic_write` of UTF-8 text."""
    atomic_write(target, lambda path: path.write_text(text, encoding="utf-8"))


def atomic_write_bytes(target: Path, data: bytes) -> None:
    """:func:`atomic_write` of bytes."""
    atomic_write(target, lambda path: path.write_bytes(data))
