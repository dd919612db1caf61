"""A run's guard (``bmv2_topos.guard``): it removes a run whose owner died without
removing it, and leaves alone a run whose owner ended it (or left the rest to
``beamer clean``). An owner stands in here for ``beamer emulate``: a process that holds
the pipe's write end and a run directory whose state file lists a process of the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bmv2_topos import guard, state

REPO = Path(__file__).resolve().parents[1]
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


@dataclass
class Scene:
    owner: subprocess.Popen[bytes]
    member: subprocess.Popen[bytes]
    """A process of the run (a switch, say), listed in its state file."""
    guard: subprocess.Popen[bytes]
    run: state.RunState
    write_end: int | None
    """The pipe's write end, if the test holds it too (else the owner alone)."""


def _start(tmp_path: Path, *, test_holds_pipe: bool = False, owner_code: str = "") -> Scene:
    """An owner, a member process and a run directory; the guard watching them. The owner
    runs ``owner_code`` (``FD`` is its write end), else sleeps."""
    read_end, write_end = os.pipe()
    code = owner_code.replace("FD", str(write_end)) or "import time; time.sleep(120)"
    owner = subprocess.Popen([sys.executable, "-c", code], pass_fds=(write_end,))
    member = subprocess.Popen(SLEEPER)
    base = tmp_path / "runs"
    base.mkdir()
    run = state.RunState.create(base)
    run.release()  # the owner stands in for this process: its claim is not ours
    run.owner_pid = owner.pid
    run.owner_start_ticks = state.process_start_ticks(owner.pid) or 0
    run.add_process(member.pid, "switch-s1")
    process = subprocess.Popen(
        [sys.executable, "-m", "bmv2_topos.guard", str(owner.pid), str(run.owner_start_ticks),
         str(run.directory)],
        cwd=REPO, stdin=read_end, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(read_end)
    if not test_holds_pipe:
        os.close(write_end)
    return Scene(owner, member, process, run, write_end if test_holds_pipe else None)


@pytest.fixture
def scenes() -> Iterator[list[Scene]]:
    made: list[Scene] = []
    yield made
    for scene in made:
        for process in (scene.owner, scene.member, scene.guard):
            if process.poll() is None:
                process.kill()
            process.wait()
        if scene.write_end is not None:
            os.close(scene.write_end)


def _guard_output(scene: Scene) -> tuple[int, str]:
    _, stderr = scene.guard.communicate(timeout=30)
    return scene.guard.returncode, stderr.decode()


def test_a_killed_owners_run_is_removed_by_its_guard(tmp_path: Path, scenes: list[Scene]) -> None:
    scene = _start(tmp_path)
    scenes.append(scene)
    time.sleep(0.5)
    assert scene.guard.poll() is None  # the owner lives: the guard waits
    # Killed and not reaped: a zombie, whose pid and start time are still there.
    scene.owner.send_signal(signal.SIGKILL)
    code, stderr = _guard_output(scene)
    assert code == 0, stderr
    assert not scene.run.directory.exists()
    assert scene.member.wait(timeout=10) != 0  # terminated, as the state file listed it
    assert f"its owner (pid {scene.owner.pid}) ended without removing it" in stderr
    assert "removed 1 leftovers" in stderr


def test_an_owner_that_closes_the_pipe_alive_keeps_its_run(
    tmp_path: Path, scenes: list[Scene]
) -> None:
    # The launcher stops its guard after its teardown. Where that teardown failed in part,
    # the state file stays for ``beamer clean`` (the owner says so): the guard must not
    # touch the run. Here this test process is the owner.
    run = state.RunState.create(tmp_path)
    member = subprocess.Popen(SLEEPER)
    try:
        run.add_process(member.pid, "switch-s1")
        handle = guard.start_run_guard(run)
        time.sleep(0.5)
        assert handle.process.poll() is None  # the owner lives: the guard waits
        handle.stop()
        assert handle.process.returncode == 0
        assert (run.directory / state.STATE_FILE).exists()
        assert member.poll() is None
    finally:
        member.kill()
        member.wait()
        run.teardown()


def test_an_owner_gone_while_another_process_holds_the_pipe_is_still_noticed(
    tmp_path: Path, scenes: list[Scene]
) -> None:
    # A child forked by the owner keeps the pipe open after the owner's death: the guard
    # looks at the owner itself too.
    scene = _start(tmp_path, test_holds_pipe=True)
    scenes.append(scene)
    scene.owner.send_signal(signal.SIGKILL)
    scene.owner.wait()
    code, stderr = _guard_output(scene)
    assert code == 0, stderr
    assert not scene.run.directory.exists()
    assert scene.member.wait(timeout=10) != 0


def test_a_pipe_that_ends_without_the_owners_word_waits_for_the_owner_to_be_gone(
    tmp_path: Path, scenes: list[Scene]
) -> None:
    # A killed process's descriptors close before it is a zombie: at the pipe's end the
    # owner may still look alive. Here it closes the pipe and lives on for a second.
    scene = _start(tmp_path, owner_code="import os, time; os.close(FD); time.sleep(1.5)")
    scenes.append(scene)
    code, stderr = _guard_output(scene)
    assert scene.owner.poll() is not None  # the guard acted only once the owner was gone
    assert code == 0, stderr
    assert not scene.run.directory.exists()
    assert scene.member.wait(timeout=10) != 0


def test_a_run_already_removed_is_left_as_it_is(tmp_path: Path, scenes: list[Scene]) -> None:
    scene = _start(tmp_path)
    scenes.append(scene)
    (scene.run.directory / state.STATE_FILE).unlink()
    scene.owner.send_signal(signal.SIGKILL)
    code, stderr = _guard_output(scene)
    assert code == 0 and stderr == ""
    assert scene.member.poll() is None


# --------------------------------------------------------------------- directories


def test_a_dead_owners_directories_are_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    # The guard of a command's temporary directories (a private Ray instance's): removed
    # when the command is killed, kept when it ends them itself.
    killed, kept = tmp_path / "killed", tmp_path / "kept"
    for directory in (killed, kept):
        (directory / "session" / "logs").mkdir(parents=True)
        (directory / "session" / "logs" / "raylet.out").write_text("log")
    code = (
        "import sys, time\n"
        "from control.guard import directories_guarded\n"
        "with directories_guarded(sys.argv[1]):\n"
        "    if sys.argv[2] == 'die':\n"
        "        print('guarded', flush=True)\n"
        "        time.sleep(120)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", code, str(killed), "die"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert owner.stdout is not None and owner.stdout.readline() == b"guarded\n"
    owner.send_signal(signal.SIGKILL)
    _, stderr = owner.communicate(timeout=30)  # the guard holds stderr until it is done
    assert not killed.exists(), stderr
    ended = subprocess.run(
        [sys.executable, "-c", code, str(kept), "end"], cwd=REPO, capture_output=True, timeout=30
    )
    assert ended.returncode == 0, ended.stderr
    assert kept.exists()  # the owner ended the block alive: the directory is its own
