"""Reading a workload file: a regular file of at most :data:`MAX_FILE_BYTES`, UTF-8 text.

Every workload reader (JSON, Coflow-Benchmark trace, the offline command)
reads through :func:`read_text`, so a device, a FIFO or a huge file is refused
with one line before anything is read: ``/dev/zero`` would be read until memory
runs out, and a FIFO without a writer would block for ever. A leading UTF-8
byte order mark, which some editors write, is dropped.
"""

from __future__ import annotations

import codecs
import os
import stat
from pathlib import Path

from control.errors import UserError
from workloads.limits import MAX_FILE_BYTES

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_text(path: Path, *, missing_hint: str = "") -> str:
    """The UTF-8 text of the workload file ``path``, without a leading byte order mark.

    A missing file, a directory, anything but a regular file, a file above
    :data:`MAX_FILE_BYTES` and text that is not UTF-8 are :class:`UserError`;
    ``missing_hint`` is appended to the "no such file" message.
    """
    try:
        # stat first: a FIFO or a device is refused without being opened.
        _check_kind(path, os.stat(path))
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file{missing_hint}") from None
    except OSError as error:
        raise UserError(f"{path}: cannot read: {error.strerror or error}") from None
    try:
        with os.fdopen(fd, "rb") as handle:
            _check_kind(path, os.fstat(handle.fileno()))  # the same file as stat saw
            data = handle.read(MAX_FILE_BYTES + 1)  # bounded even if the file grows
    except OSError as error:
        raise UserError(f"{path}: cannot read: {error.strerror or error}") from None
    if len(data) > MAX_FILE_BYTES:
        raise _too_large(path, f"more than {MAX_FILE_BYTES:,} bytes")
    return _decode(path, data)


def _check_kind(path: Path, info: os.stat_result) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise UserError(f"{path}: is a directory, not a workload file")
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a regular file")
        raise UserError(f"{path}: is {kind}; a workload is read from a regular file")
    if info.st_size > MAX_FILE_BYTES:
        raise _too_large(path, f"{info.st_size:,} bytes")


def _too_large(path: Path, size: str) -> UserError:
    return UserError(
        f"{path}: {size}, above the limit of {MAX_FILE_BYTES:,} bytes for a workload file"
    )


def _decode(path: Path, data: bytes) -> str:
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return str(memoryview(data)[start:], "utf-8")
    except UnicodeDecodeError as error:
        offset = start + error.start
        line = data.count(b"\n", 0, offset) + 1
        raise UserError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[offset]:02x} at offset "
            f"{offset}: {error.reason})"
        ) from None
