"""The default event socket lives in a directory only the controller's user may write,
so another user cannot pre-create the path and keep the controller from starting."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from controller_process import REPO, controller_process, embedded_switch, write_topology

from control.errors import UserError
from control.events import EventClient, default_socket_dir, ensure_private_dir


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env["TMPDIR"] = str(tmp)
    return env


def test_default_directory_is_per_user_without_a_runtime_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert default_socket_dir() == tmp_path / f"beamer-{os.getuid()}"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    assert default_socket_dir() == tmp_path / "run"


def test_private_directory_is_created_and_checked(tmp_path: Path) -> None:
    private = tmp_path / "beamer-x"
    ensure_private_dir(private)
    assert private.is_dir() and private.stat().st_mode & 0o777 == 0o700
    ensure_private_dir(private)  # again: fine
    private.chmod(0o777)
    with pytest.raises(
        UserError,
        match=r"beamer-x may be written by other users \(mode 0777\); "
        r"choose another socket with --events-socket PATH",
    ):
        ensure_private_dir(private)
    link = tmp_path / "link"
    link.symlink_to(private)
    with pytest.raises(UserError, match="link is not a directory"):
        ensure_private_dir(link)
    planted = tmp_path / "planted"
    planted.write_text("")
    with pytest.raises(UserError, match="planted is not a directory"):
        ensure_private_dir(planted)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to another user")
def test_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "beamer-0"
    other.mkdir(mode=0o700)
    os.chown(other, 65534, 65534)
    with pytest.raises(UserError, match=r"belongs to user 65534, not to this user \(0\)"):
        ensure_private_dir(other)


def test_a_planted_file_at_the_old_default_path_does_not_stop_the_controller(
    tmp_path: Path,
) -> None:
    # What another user could do to the former default, TMPDIR/beamer-controller.sock.
    (tmp_path / "beamer-controller.sock").write_text("")
    with (
        embedded_switch() as switch,
        controller_process(tmp_path, switch.addr, default_socket=True, env=_env(tmp_path)) as c,
    ):
        private = tmp_path / f"beamer-{os.getuid()}"
        assert c.socket_path == private / "beamer-controller.sock"
        assert private.stat().st_mode & 0o777 == 0o700
        with EventClient(str(c.socket_path), timeout_s=10) as client:
            assert client.health()
    assert not c.socket_path.exists()


def test_an_unsafe_default_directory_is_a_one_line_error(tmp_path: Path) -> None:
    private = tmp_path / f"beamer-{os.getuid()}"
    private.mkdir()
    private.chmod(0o777)
    topo = write_topology(tmp_path, "127.0.0.1:1")
    result = subprocess.run(
        [
            *(sys.executable, "-m", "control.cli", "controller", "--topo", str(topo)),
            *("--policy", "beamer", "--events-addr", "127.0.0.1:0"),
        ],
        cwd=REPO,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"beamer: error: events API: {private} may be written by other users (mode 0777); "
        "choose another socket with --events-socket PATH"
    ]
