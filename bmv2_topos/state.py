"""What a run created, on disk, so that nothing outlives it.

Each run writes ``<runs dir>/<run id>/state.json`` *before* it creates a
namespace or starts a process, and rewrites it after every change. The run
removes everything itself on exit, Ctrl-C, SIGTERM or failure; when it was
killed with SIGKILL, its guard (:mod:`bmv2_topos.guard`) removes it, and if the
guard died too, ``beamer clean`` reads the state files of dead runs and
removes what they list: the processes (by pid, only after checking that the
pid still is the process the run started, by its start time), then the
namespaces, whose veths go with them.

Names carry the project prefix ``bm`` + a 5-hex-digit run id, short enough
for interface names (15 characters). The owner also holds an abstract Unix
socket named after the run id for the run's whole life: the kernel releases it
when the owner dies (even by SIGKILL), so ``beamer clean`` can tell a live run
from a dead one without its state file (a run using another runs directory).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import signal
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bmv2_topos import netns
from control.files import atomic_write_text
from control.guard import process_start_ticks

DEFAULT_RUNS_DIR = Path("/run/beamer")
"""Root-only tmpfs location; a reboot clears it along with the namespaces."""

RUN_ID_RE = re.compile(r"^[0-9a-f]{5}$")
OUR_NAME_RE = re.compile(r"^bm[0-9a-f]{5}-")
STATE_FILE = "state.json"
FRESH_S = 10.0
"""A namespace or run directory younger than this may belong to a run still writing
its state: ``beamer clean`` leaves it alone."""


def runs_dir() -> Path:
    """The directory holding one sub-directory per run (``BEAMER_RUNS_DIR`` overrides).

    An empty variable counts as unset: ``Path("")`` is the current directory, which
    ``beamer clean`` would then search for runs."""
    return Path(os.environ.get("BEAMER_RUNS_DIR") or str(DEFAULT_RUNS_DIR))


def _claim_address(run_id: str) -> str:
    return f"\0beamer-run-{run_id}"


def claim_run_id(run_id: str) -> socket.socket | None:
    """Bind the run id's abstract socket, or None when another process holds it.

    Binding is atomic, so two runs never share an id, and the kernel drops the
    claim when its holder dies: a held claim means a live owner. The socket is
    not inherited, so a leftover child never keeps a dead run's claim.
    """
    claim = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        claim.bind(_claim_address(run_id))
    except OSError as error:
        claim.close()
        if error.errno == errno.EADDRINUSE:
            return None
        raise
    return claim


def run_id_claimed(run_id: str) -> bool:
    """Whether a live process holds ``run_id``'s claim (the run is in progress)."""
    try:
        probe = claim_run_id(run_id)
    except OSError:
        return True  # cannot tell: leave the run alone
    if probe is None:
        return True
    probe.close()
    return False


def new_run_id(base: Path) -> tuple[str, socket.socket]:
    """A run id no directory, namespace or live run uses, and its claim."""
    while True:
        run_id = secrets.token_hex(3)[:5]
        prefix = f"bm{run_id}-"
        clash = (base / run_id).exists() or any(
            name.startswith(prefix) for name in netns.list_namespaces()
        )
        if clash:
            continue
        claim = claim_run_id(run_id)
        if claim is not None:
            return run_id, claim


@dataclass
class ProcessRecord:
    pid: int
    start_ticks: int
    role: str

    def alive(self) -> bool:
        return process_start_ticks(self.pid) == self.start_ticks


@dataclass
class RunState:
    """The on-disk record of one run."""

    run_id: str
    owner_pid: int
    owner_start_ticks: int
    namespaces: list[str] = field(default_factory=list)
    processes: list[ProcessRecord] = field(default_factory=list)
    directory: Path = field(default=Path("."), repr=False)
    claim: socket.socket | None = field(default=None, repr=False, compare=False)
    """Held by the owner until teardown (see :func:`claim_run_id`); None when loaded."""

    @property
    def prefix(self) -> str:
        return f"bm{self.run_id}-"

    @classmethod
    def create(cls, base: Path) -> RunState:
        base.mkdir(parents=True, exist_ok=True)
        run_id, claim = new_run_id(base)
        directory = base / run_id
        pid = os.getpid()
        state = cls(run_id, pid, process_start_ticks(pid) or 0, directory=directory, claim=claim)
        try:
            directory.mkdir(mode=0o700)
            state.save()
        except BaseException:
            claim.close()
            raise
        return state

    @classmethod
    def load(cls, directory: Path) -> RunState:
        raw: dict[str, Any] = json.loads((directory / STATE_FILE).read_text())
        return cls(
            run_id=str(raw["run_id"]),
            owner_pid=int(raw["owner_pid"]),
            owner_start_ticks=int(raw["owner_start_ticks"]),
            namespaces=[str(name) for name in raw["namespaces"]],
            processes=[ProcessRecord(**record) for record in raw["processes"]],
            directory=directory,
        )

    def save(self) -> None:
        """Atomic rewrite: a reader never sees half a file."""
        document = {
            "run_id": self.run_id,
            "owner_pid": self.owner_pid,
            "owner_start_ticks": self.owner_start_ticks,
            "namespaces": self.namespaces,
            "processes": [asdict(record) for record in self.processes],
        }
        atomic_write_text(self.directory / STATE_FILE, json.dumps(document, indent=1))

    def owner_alive(self) -> bool:
        return process_start_ticks(self.owner_pid) == self.owner_start_ticks

    def add_namespace(self, name: str) -> None:
        self.namespaces.append(name)
        self.save()

    def add_process(self, pid: int, role: str) -> ProcessRecord:
        record = ProcessRecord(pid, process_start_ticks(pid) or 0, role)
        self.processes.append(record)
        self.save()
        return record

    def release(self) -> None:
        """Give up the run id's claim: from now on the run counts as over."""
        if self.claim is not None:
            self.claim.close()
            self.claim = None

    def teardown(self) -> list[str]:
        """Remove everything listed; returns what was removed (for ``beamer clean``).

        Every step runs even when an earlier one failed or was interrupted: a
        failed save must not leave the namespaces behind. What could not be
        removed stays in the state file for ``beamer clean``; the first failure
        is raised at the end.
        """
        removed: list[str] = []
        failures: list[BaseException] = []
        kept: list[ProcessRecord] = []
        for record in reversed(self.processes):
            try:
                if terminate(record):
                    removed.append(f"process {record.pid} ({record.role})")
            except BaseException as error:  # raised after the other steps
                failures.append(error)
                kept.insert(0, record)
        self.processes = kept
        try:
            self.save()  # a racing ``beamer clean`` need not look for these processes
        except BaseException as error:
            failures.append(error)
        left: list[str] = []
        try:
            present = set(netns.list_namespaces())
        except BaseException as error:
            failures.append(error)
            present = set(self.namespaces)
        for name in reversed(self.namespaces):
            if not name.startswith(self.prefix):
                continue  # never ours: a state file cannot make us delete another name
            try:
                if name in present and not delete_namespace(name):
                    raise netns.CommandError(f"could not delete namespace {name}")
                if name in present:
                    removed.append(f"namespace {name}")
            except BaseException as error:
                failures.append(error)
                left.insert(0, name)
        self.namespaces = left
        try:
            if self.processes or self.namespaces:
                self.save()
            else:
                shutil.rmtree(self.directory, ignore_errors=True)
        except BaseException as error:
            failures.append(error)
        self.release()
        if failures:
            raise failures[0]
        return removed


def terminate(record: ProcessRecord, grace_s: float = 3.0) -> bool:
    """SIGTERM, then SIGKILL after ``grace_s``; only if the pid is still ours."""
    if not record.alive():
        return False
    try:
        os.kill(record.pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap(record.pid)
        if not record.alive():
            return True
        time.sleep(0.05)
    if record.alive():
        try:
            os.kill(record.pid, signal.SIGKILL)
        except ProcessLookupError:
            return True
        for _ in range(100):
            _reap(record.pid)
            if not record.alive():
                break
            time.sleep(0.02)
    return True


def _reap(pid: int) -> None:
    """Collect a child of ours that has exited, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def delete_namespace(name: str) -> bool:
    try:
        netns.run(["ip", "netns", "delete", name])
    except netns.CommandError:
        return name not in netns.list_namespaces()
    return True


RUN_ID_VARIABLE = "BEAMER_RUN_ID"
OWNER_VARIABLE = "BEAMER_RUN_OWNER"
"""Both are set in the environment of every process a run starts (see the launcher):
the run id, and ``pid:start_ticks`` of the run's owner, so a leftover is recognised
as one even when its run keeps its state in another runs directory."""


@dataclass(frozen=True, slots=True)
class TaggedProcess:
    pid: int
    run_id: str
    owner: tuple[int, int] | None

    def owner_alive(self) -> bool:
        return self.owner is not None and process_start_ticks(self.owner[0]) == self.owner[1]


def tagged_processes() -> list[TaggedProcess]:
    """Every process carrying ``BEAMER_RUN_ID`` in its environment."""
    found: list[TaggedProcess] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environment = (entry / "environ").read_bytes()
        except OSError:
            continue
        variables = dict(
            item.decode(errors="replace").split("=", 1)
            for item in environment.split(b"\0")
            if b"=" in item
        )
        run_id = variables.get(RUN_ID_VARIABLE)
        if run_id is None:
            continue
        owner: tuple[int, int] | None = None
        pid_text, _, ticks_text = variables.get(OWNER_VARIABLE, "").partition(":")
        if pid_text.isdigit() and ticks_text.isdigit():
            owner = (int(pid_text), int(ticks_text))
        found.append(TaggedProcess(int(entry.name), run_id, owner))
    return found


@dataclass
class CleanReport:
    removed: list[str] = field(default_factory=list)
    skipped_live_runs: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    """Runs whose leftovers could not all be removed, one line each."""
    unreadable: list[str] = field(default_factory=list)
    """Run-id-named directories whose state file cannot be read, left for a person."""


def clean_leftovers(base: Path | None = None, fresh_s: float = FRESH_S) -> CleanReport:
    """Remove what dead runs left behind; runs whose owner still lives are left alone.

    Only a directory whose state file names it is a run's: anything else in the
    runs directory, even with a run-id-like name, is not ours to delete.
    Namespaces with the project prefix that no state file accounts for are
    leftovers too (a run writes its state before creating anything), unless
    their run id is still claimed by its live owner (a run using another runs
    directory), a process of that run has a live owner, or the namespace is
    younger than ``fresh_s``.
    """
    base = base or runs_dir()
    report = CleanReport()
    accounted: set[str] = set()
    live_ids: set[str] = set()
    if base.is_dir():
        for directory in sorted(base.iterdir()):
            if directory.is_symlink() or not directory.is_dir():
                continue
            if not RUN_ID_RE.match(directory.name):
                continue
            try:
                state = RunState.load(directory)
            except (OSError, ValueError, KeyError, TypeError) as error:
                # Being created, or not a run's at all: never removed, only protected.
                if _is_fresh(directory, fresh_s) or run_id_claimed(directory.name):
                    live_ids.add(directory.name)
                else:
                    report.unreadable.append(f"{directory}: {error}")
                continue
            if state.run_id != directory.name:
                continue
            if state.owner_alive() or run_id_claimed(state.run_id):
                report.skipped_live_runs.append(state.run_id)
                live_ids.add(state.run_id)
                continue
            accounted.update(state.namespaces)
            try:
                report.removed.extend(state.teardown())
            except Exception as error:  # one run's failure must not stop the rest
                report.failures.append(f"run {state.run_id}: {error}")
    for process in tagged_processes():
        if process.owner_alive() or run_id_claimed(process.run_id):
            live_ids.add(process.run_id)
            continue
        ticks = process_start_ticks(process.pid)
        if process.run_id in live_ids or ticks is None:
            continue
        if terminate(ProcessRecord(process.pid, ticks, "leftover")):
            report.removed.append(f"process {process.pid} (run {process.run_id})")
    for name in netns.list_namespaces():
        if not OUR_NAME_RE.match(name) or name in accounted:
            continue
        run_id = name[2:7]
        if run_id in live_ids or _is_fresh(netns.NETNS_DIR / name, fresh_s):
            continue
        if run_id_claimed(run_id):
            live_ids.add(run_id)
            continue
        if delete_namespace(name):
            report.removed.append(f"namespace {name}")
    return report


def _is_fresh(directory: Path, age_s: float = FRESH_S) -> bool:
    try:
        return time.time() - directory.stat().st_mtime < age_s
    except FileNotFoundError:
        return False
