"""Runs last (file name): the suite left no namespace, veth or process of an emulation run.

Something is a leftover when its run is over: no run directory any more, a
dead owner, or an owner that is this test session (whose runs must all have
ended). A run of another live process (say, a ``make run`` beside the suite)
is not ours to judge.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from bmv2_topos import netns, state

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")


def _finished(run_id: str) -> bool:
    directory = state.runs_dir() / run_id
    try:
        run = state.RunState.load(directory)
    except (OSError, ValueError, KeyError):
        return not directory.exists()
    return run.owner_pid == os.getpid() or not run.owner_alive()


def test_no_namespace_of_a_finished_run_is_left() -> None:
    leftovers = [
        name
        for name in netns.list_namespaces()
        if state.OUR_NAME_RE.match(name) and _finished(name[2:7])
    ]
    assert leftovers == []


def test_no_veth_of_ours_in_the_root_namespace() -> None:
    links = subprocess.run(
        ["ip", "-o", "link", "show"], capture_output=True, text=True, check=True
    ).stdout
    names = re.findall(r"^\d+: ([^:@]+)", links, flags=re.MULTILINE)
    assert [name for name in names if state.OUR_NAME_RE.match(name)] == []


def test_no_process_of_a_finished_run_is_left() -> None:
    leftovers = [
        process
        for process in state.tagged_processes()
        if not process.owner_alive() or process.owner == (os.getpid(), _my_start_ticks())
    ]
    assert leftovers == []


def _my_start_ticks() -> int | None:
    return state.process_start_ticks(os.getpid())


def test_no_run_directory_of_this_session_is_left() -> None:
    base = state.runs_dir()
    mine = []
    for directory in base.iterdir() if base.is_dir() else ():
        try:
            if state.RunState.load(directory).owner_pid == os.getpid():
                mine.append(directory.name)
        except (OSError, ValueError, KeyError):
            continue
    assert mine == []


GUARD_MODULES = (b"control.guard", b"bmv2_topos.guard")


def test_no_guard_of_a_finished_command_is_left() -> None:
    """A guard exits when its owner ends its work, or once it removed what a dead owner
    left (control.guard): none of this session's, nor of a dead owner, may run on."""
    me = (os.getpid(), _my_start_ticks())
    leftovers = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "cmdline"), "rb") as stream:
                argv = stream.read().split(b"\0")
        except OSError:
            continue
        if "-m" not in [a.decode(errors="replace") for a in argv]:
            continue
        index = argv.index(b"-m")
        if index + 3 >= len(argv) or argv[index + 1] not in GUARD_MODULES:
            continue
        owner = (int(argv[index + 2]), int(argv[index + 3]))
        if owner == me or state.process_start_ticks(owner[0]) != owner[1]:
            leftovers.append((int(entry.name), argv[index + 1].decode()))
    assert leftovers == []
