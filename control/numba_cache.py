"""A place for numba's on-disk cache of compiled kernels wherever the project runs.

The kernels are compiled with ``@njit(cache=True)``, and numba refuses to even define
such a function (``RuntimeError: cannot cache function ...: no locator available``,
at import, so every command failed, ``--help`` too) when neither the ``__pycache__``
beside its source nor the user's cache directory (``$XDG_CACHE_HOME`` or
``~/.cache``, then ``numba``) can be written: an installed tree owned by root, run by
another user whose home is not writable. Then ``NUMBA_CACHE_DIR`` is set here to a
private directory under the temporary directory. Every module that compiles kernels
imports this one before numba, which reads the variable when it is first imported.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

CACHE_ENV = "NUMBA_CACHE_DIR"

KERNEL_DIRECTORIES = (
    Path(__file__).resolve().parent / "policies",
    Path(__file__).resolve().parents[1] / "sim",
)
"""The directories of the modules with cached kernels: numba caches each beside its
source, in ``__pycache__``, where it can."""


def _writable(directory: Path) -> bool:
    """Whether ``directory`` exists or can be made, and takes a new file (as numba checks)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError:
        return False
    return True


def _user_cache() -> Path:
    """numba's user-wide cache directory on Linux (``appdirs.user_cache_dir``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "numba"


def _private_directory() -> str:
    """A directory only this user can write: ``beamer-numba-UID`` in the temporary
    directory, kept between runs so that kernels compile once, unless someone else made
    that name (then a new directory, removed at exit)."""
    shared = Path(tempfile.gettempdir()) / f"beamer-numba-{os.getuid()}"
    with contextlib.suppress(OSError):  # there already, or no temporary directory
        shared.mkdir(mode=0o700)
    try:
        info = os.lstat(shared)
    except OSError:
        info = None
    if (
        info is not None
        and stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.getuid()
        and info.st_mode & 0o077 == 0
        and _writable(shared)
    ):
        return str(shared)
    own = tempfile.mkdtemp(prefix="beamer-numba-")
    atexit.register(shutil.rmtree, own, ignore_errors=True)
    return own


def ensure_cache_location() -> None:
    """Set ``NUMBA_CACHE_DIR`` to a private directory when numba would find nowhere to
    cache the kernels; leave it alone when it is set or when there is such a place."""
    if os.environ.get(CACHE_ENV):
        return
    if all(_writable(d / "__pycache__") for d in KERNEL_DIRECTORIES) or _writable(_user_cache()):
        return
    os.environ[CACHE_ENV] = _private_directory()  # inherited by worker processes
    config = sys.modules.get("numba.core.config")
    if config is not None:  # imported already: numba reads its config there at each use
        config.CACHE_DIR = os.environ[CACHE_ENV]  # type: ignore[attr-defined]


ensure_cache_location()
