"""numba's cache of the compiled kernels where neither the source tree nor the home
directory can be written: every command, ``--help`` too, failed at import with
``RuntimeError: cannot cache function ...: no locator available``."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from control import numba_cache

REPO = Path(__file__).resolve().parents[1]
NOBODY = 65534
NOWHERE = Path("/proc/beamer-no-such-directory")  # cannot be made, not even by root


@pytest.fixture
def no_cache_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Neither the kernels' ``__pycache__`` nor the user's cache can be written; the
    temporary directory is ``tmp_path``, which is returned. Environment and numba's
    configuration are given back afterwards."""
    import numba.core.config

    monkeypatch.delenv(numba_cache.CACHE_ENV, raising=False)
    config = vars(numba.core.config)  # its settings, read at each use
    monkeypatch.setitem(config, "CACHE_DIR", config["CACHE_DIR"])
    monkeypatch.setattr(numba_cache, "KERNEL_DIRECTORIES", (NOWHERE,))
    monkeypatch.setenv("XDG_CACHE_HOME", str(NOWHERE))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_with_no_writable_location_the_cache_goes_to_a_private_directory(
    no_cache_location: Path,
) -> None:
    import numba.core.config

    numba_cache.ensure_cache_location()
    chosen = no_cache_location / f"beamer-numba-{os.getuid()}"
    assert os.environ[numba_cache.CACHE_ENV] == str(chosen)
    configured = vars(numba.core.config)["CACHE_DIR"]
    assert configured == str(chosen)  # numba was imported already: its setting too
    assert stat.S_IMODE(chosen.stat().st_mode) == 0o700


def test_a_shared_directory_made_by_someone_else_is_not_used(no_cache_location: Path) -> None:
    """Another user could plant compiled code (numba's cache is pickles) there."""
    planted = no_cache_location / f"beamer-numba-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)
    numba_cache.ensure_cache_location()
    chosen = Path(os.environ[numba_cache.CACHE_ENV])
    assert chosen != planted and chosen.parent == no_cache_location
    assert stat.S_IMODE(chosen.stat().st_mode) == 0o700


def test_a_writable_location_is_left_to_numba(
    no_cache_location: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(numba_cache, "KERNEL_DIRECTORIES", (no_cache_location / "src",))
    numba_cache.ensure_cache_location()
    assert numba_cache.CACHE_ENV not in os.environ


def _writable_by_nobody(directory: Path) -> bool:
    target = directory / "__pycache__"
    info = (target if target.exists() else directory).stat()
    return bool(info.st_mode & stat.S_IWOTH) or (
        info.st_uid == NOBODY and bool(info.st_mode & stat.S_IWUSR)
    )


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="runs a command as an unprivileged user (root and setpriv needed)",
)
def test_every_command_runs_for_a_user_who_can_write_neither_the_tree_nor_home() -> None:
    if any(_writable_by_nobody(d) for d in numba_cache.KERNEL_DIRECTORIES):
        pytest.skip("that user could write the source tree: numba would cache there")
    base = Path(tempfile.mkdtemp(prefix="beamer-test-numba-"))  # tmp_path is root's only
    try:
        base.chmod(0o755)
        home, temporary = base / "home", base / "tmp"
        home.mkdir(mode=0o555)  # root's: not writable for that user
        temporary.mkdir()
        temporary.chmod(0o777)
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in (numba_cache.CACHE_ENV, "XDG_CACHE_HOME")
        }
        env.update(HOME=str(home), TMPDIR=str(temporary))
        as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        done = subprocess.run(
            [*as_nobody, sys.executable, "-m", "control.cli", "--help"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        assert "simulate" in done.stdout
        # The kernels' cache is set up in the private directory.
        assert list((temporary / f"beamer-numba-{NOBODY}").iterdir())
    finally:
        shutil.rmtree(base, ignore_errors=True)
