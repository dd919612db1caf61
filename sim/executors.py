"""Where simulation runs execute: local worker processes, or Ray tasks.

:func:`run_tasks` calls one picklable, module-level function on every item and
yields ``(index, result)`` as runs finish, in completion order, with a progress
bar (runs done / total, ETA) on stderr. A run that raises yields a
:class:`TaskFailure` instead of its result; the other runs go on.

Executors:

* ``local``: ``jobs`` worker processes on this machine (in the calling process
  when ``jobs`` is 1);
* ``ray``: one Ray task per run. Without an address a private Ray instance is
  started with ``jobs`` CPUs, reachable on the loopback interface only, and
  shut down at the end (also on Ctrl-C and failure); with ``ray_address``
  (``HOST:PORT`` of a running cluster's head, ``ray://HOST:PORT`` of its Ray
  Client server, or ``auto``) the runs go to that cluster, whose nodes need the
  project installed.

Ray is an optional dependency (``pip install .[ray]``) imported only here, and
only when the ``ray`` executor runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import ipaddress
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from tqdm import tqdm

from control.addresses import checked_hostport
from control.errors import UserError
from control.guard import Guard
from control.interrupts import (
    HELD_SIGNALS,
    restore_handlers,
    signals_held,
    unwind_on_termination,
)

ExecutorKind = Literal["local", "ray"]
EXECUTORS: tuple[ExecutorKind, ...] = ("local", "ray")

Item = TypeVar("Item")
Result = TypeVar("Result")

# With this switch off, a local Ray instance uses the loopback address for every
# service (by default its services listen on every interface).
_RAY_LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_RAY_NICENESS_ENV = "RAY_worker_niceness"
_LOCAL_TEMP_DIR: str | None = None
_LOCAL_TEMP_GUARD: Guard | None = None
"""Removes the directory if this process dies without :func:`stop_local_ray` (SIGKILL,
or Ray ending its driver when the raylet dies)."""
_PREVIOUS_HANDLERS: dict[int, Any] = {}
"""The SIGTERM and SIGHUP handlers before the local Ray instance started."""


MAX_JOBS = 1024
"""Parallel runs at most: each is a process (or a Ray CPU) with its own simulator in
memory; far more than any one machine's cores, far fewer than would exhaust it."""


@dataclass(frozen=True, slots=True)
class Executor:
    """How to run: ``kind``, parallel runs (local processes, or a local Ray's CPUs)."""

    kind: ExecutorKind = "local"
    jobs: int = 1
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise UserError(f"--executor: {self.kind!r} is not one of {', '.join(EXECUTORS)}")
        if not 1 <= self.jobs <= MAX_JOBS:
            raise UserError(f"--jobs: {self.jobs} is out of range 1..{MAX_JOBS}")
        if self.ray_address is not None and self.kind != "ray":
            raise UserError("--ray-address applies to --executor ray only")
        if self.ray_address is not None:
            _ray_head(self.ray_address)  # the form, refused before anything else happens

    def check_ready(self) -> None:
        """Refuse, in one line, what would stop the runs from starting: Ray not installed,
        no Ray head at ``ray_address``. Called before a command writes or deletes anything,
        so that a refused command changes nothing (Ray itself is not imported here); the
        runs take it as checked, and do not probe the head again."""
        if self.kind != "ray":
            return
        if importlib.util.find_spec("ray") is None:
            raise UserError(_NO_RAY)
        if self.ray_address is not None:
            _check_reachable(self.ray_address)


class RunsFailed(UserError):
    """Some runs raised (each was reported as it failed); the others completed."""

    exit_status = 1


@dataclass(frozen=True, slots=True)
class TaskFailure:
    """A run that raised: one line for the user, the traceback for the record."""

    error: str
    details: str


@dataclass(frozen=True, slots=True)
class _Outcome(Generic[Result]):
    value: Result | None
    failure: TaskFailure | None


def _failure(error: BaseException) -> TaskFailure:
    line = f"{type(error).__name__}: {error}".splitlines()[0]
    details = "".join(traceback.format_exception(error))
    return TaskFailure(line, details)


def _guarded(fn: Callable[[Item], Result], item: Item) -> _Outcome[Result]:
    """Run one item; an exception becomes a :class:`TaskFailure` (keeps pools healthy)."""
    try:
        return _Outcome(fn(item), None)
    except Exception as error:
        return _Outcome(None, _failure(error))


def run_tasks(
    fn: Callable[[Item], Result],
    items: Sequence[Item],
    executor: Executor,
    *,
    desc: str,
    describe: Callable[[Item], str] = str,
) -> Iterator[tuple[int, Result | TaskFailure]]:
    """Yield ``(index, result or TaskFailure)`` for every item, as runs finish.

    Failures are also written above the progress bar with ``describe(item)``.
    Leaving the loop early (``break``, Ctrl-C) cancels the runs not yet done.
    """
    bar = tqdm(total=len(items), desc=desc, unit="run", file=sys.stderr, disable=None)
    try:
        if executor.kind == "ray":
            source = _ray_outcomes(fn, items, executor)
        elif executor.jobs <= 1 or len(items) <= 1:
            source = ((index, _guarded(fn, item)) for index, item in enumerate(items))
        else:
            source = _pool_outcomes(fn, items, executor.jobs)
        try:
            for index, outcome in source:
                bar.update()
                if outcome.failure is not None:
                    bar.write(
                        f"run failed: {describe(items[index])}: {outcome.failure.error}",
                        file=sys.stderr,
                    )
                    yield index, outcome.failure
                else:
                    yield index, outcome.value  # type: ignore[misc]
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()
    finally:
        bar.close()


def _pool_outcomes(
    fn: Callable[[Item], Result], items: Sequence[Item], jobs: int
) -> Iterator[tuple[int, _Outcome[Result]]]:
    # No more workers than runs: each is a process that loads the simulator. Spawned, not
    # forked: a fork copies a process that may run threads (gRPC's, Ray's, the progress
    # bar's) with whatever locks and half-done state they hold at that instant, and a
    # forked worker was seen to spin for minutes in numba's compiler.
    pool = ProcessPoolExecutor(
        max_workers=min(jobs, len(items)),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=end_with,
        initargs=(os.getpid(),),
    )
    finished = False
    try:
        futures: dict[Future[_Outcome[Result]], int] = {
            pool.submit(_guarded, fn, item): index for index, item in enumerate(items)
        }
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                error = future.exception()
                # A worker process that dies (killed, out of memory) breaks the pool: this
                # and every run not yet done fail; the finished ones are kept.
                if error is not None:
                    yield futures[future], _Outcome(None, _failure(error))
                else:
                    yield futures[future], future.result()
        finished = True
    finally:
        # Left early (Ctrl-C, SIGTERM, the caller stopped): the runs in progress are not
        # wanted, and shutdown(wait=True) would wait for them, minutes for a search.
        with signals_held():  # a second Ctrl-C must not leave the workers half-ended
            if not finished:
                end_workers(pool)
            pool.shutdown(wait=True, cancel_futures=True)


WORKER_GRACE_S = 5.0
"""How long a pool worker told to end (SIGTERM) has before it is killed."""


def end_workers(pool: ProcessPoolExecutor) -> None:
    """End ``pool``'s worker processes now, in the middle of their runs (Python 3.14 has
    ``terminate_workers``; before it, the processes are only in ``_processes``)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        with contextlib.suppress(OSError, ValueError):  # ended already, or closed
            process.terminate()
    for process in processes:
        with contextlib.suppress(ValueError):
            process.join(WORKER_GRACE_S)
            if process.is_alive():
                process.kill()
                process.join(WORKER_GRACE_S)


_PR_SET_PDEATHSIG = 1


def end_with(parent_pid: int) -> None:
    """Make this pool worker end when ``parent_pid`` does, however that ends.

    Killed by SIGTERM, SIGHUP or SIGKILL, the command runs no ``finally`` and its pool
    workers would wait for work for ever, orphaned. The kernel sends them SIGTERM when
    their parent goes (Linux's parent-death signal).

    Ctrl-C is ignored here: the terminal sends it to every worker too, each would end
    with a traceback of its own, and the command ends its workers itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent went before the signal was set
        os._exit(1)


FAILED_START_GRACE_S = 2.0
"""How long the processes of a Ray start that failed or was interrupted get to exit
before they are killed (a finished instance's get :func:`stop_local_ray`'s default)."""


def start_local_ray(num_cpus: int, attempts: int = 2) -> None:
    """Start a private Ray instance with ``num_cpus`` CPUs, listening on loopback only.

    Ray gives its raylet a fixed 30 s to register; on a loaded machine that can pass.
    A start that fails is cleaned up completely (processes and directory) and tried
    again, up to ``attempts`` times in all; the last failure is raised.
    """
    # Ray runs its workers at niceness 15 by default: on a shared machine they would
    # then get almost no CPU. The runs are this command's work: normal priority.
    os.environ.setdefault(_RAY_NICENESS_ENV, "0")
    ray = _loopback_only()

    global _LOCAL_TEMP_DIR, _LOCAL_TEMP_GUARD
    # What stop_local_ray gives back: the handlers from before Ray, not the one ray.init
    # installs (which would outlive the instance).
    _PREVIOUS_HANDLERS.update(_python_handlers((signal.SIGTERM, signal.SIGHUP)))
    for attempt in range(1, attempts + 1):
        # Its own directory for sockets and logs, removed by stop_local_ray: nothing is
        # left behind, and no other Ray instance on the machine is found or joined.
        _LOCAL_TEMP_DIR = tempfile.mkdtemp(prefix="beamer-ray-")
        _LOCAL_TEMP_GUARD = Guard.start("control.guard", [_LOCAL_TEMP_DIR])
        try:
            ray.init(
                address="local",
                _temp_dir=_LOCAL_TEMP_DIR,
                num_cpus=num_cpus,
                include_dashboard=False,
                logging_level=logging.WARNING,
                log_to_driver=False,
                configure_logging=True,
            )
            # Ray answers SIGTERM in the driver with a crash report and an exit that runs
            # no ``finally``: unwind as Ctrl-C does instead, so that stop_local_ray runs.
            unwind_on_termination()
            return
        except BaseException as error:
            # What did start, and the directory. A start cut short (Ctrl-C, or Ray's own
            # timeout) leaves processes that shutdown() does not know and that would
            # never exit on their own: they get a short grace, not a finished run's.
            stop_local_ray(grace_s=FAILED_START_GRACE_S)
            if attempt == attempts or not isinstance(error, Exception):
                raise
            line = f"{type(error).__name__}: {error}".splitlines()[0]
            print(f"Ray did not start ({line}); starting it again", file=sys.stderr)


def stop_local_ray(grace_s: float = 20.0) -> None:
    """Shut the instance of :func:`start_local_ray` down and remove its directory.

    Ray's processes that are still running ``grace_s`` after shutdown (a start that
    failed half-way is not known to ``ray.shutdown``) are killed: they are ours.
    """
    global _LOCAL_TEMP_DIR, _LOCAL_TEMP_GUARD
    import ray

    try:
        # A Ctrl-C (a second one), SIGTERM or SIGHUP while Ray goes down would leave its
        # processes and its directory behind: held until both are gone, then raised.
        with signals_held():
            ray_processes = _ray_descendants()
            if _LOCAL_TEMP_GUARD is not None:  # not Ray's: its command line names the dir
                ray_processes.discard(_LOCAL_TEMP_GUARD.process.pid)
            ray.shutdown()
            _reinstall_handlers()
            # Ray's processes (GCS, raylet, their agents and workers) outlive shutdown()
            # by a moment and write into the directory until they exit: wait for them,
            # then remove it.
            _kill_lingering(ray_processes, grace_s, still_ours=lambda pid: b"ray" in _cmdline(pid))
            if _LOCAL_TEMP_DIR is not None:
                remove_with_holders(_LOCAL_TEMP_DIR)
                _LOCAL_TEMP_DIR = None
    finally:
        if _LOCAL_TEMP_GUARD is not None:
            guard, _LOCAL_TEMP_GUARD = _LOCAL_TEMP_GUARD, None
            guard.stop()
        # Only now: a signal held above meets the handler of start_local_ray (SIGTERM
        # unwinds, as Ctrl-C does), not Ray's nor the default one that kills silently.
        restore_handlers(_PREVIOUS_HANDLERS)


def _python_handlers(signums: Sequence[int]) -> dict[int, Any]:
    """The Python handlers of ``signums`` (from the main thread only, which alone may set
    them again; a handler set outside Python is not known, and left out)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    handlers = {signum: signal.getsignal(signum) for signum in signums}
    return {signum: handler for signum, handler in handlers.items() if handler is not None}


def _reinstall_handlers() -> None:
    """Install the Python handlers of Ctrl-C, SIGTERM and SIGHUP again. ``ray.shutdown()``
    sets SIGTERM back to its default action in C, behind Python's back (``getsignal``
    still names the Python handler): a SIGTERM then would kill the command at once,
    leaving Ray's directory."""
    for signum, handler in _python_handlers(HELD_SIGNALS).items():
        signal.signal(signum, handler)


def remove_with_holders(directory: str, grace_s: float = 5.0) -> None:
    """Remove ``directory`` and end the processes that keep files open in it.

    A Ray worker that started while the instance shut down is not in the list taken
    before, and once its raylet is gone it is nobody's descendant; but every Ray process
    keeps its logs open in the instance's own directory. Such a process, and only such,
    is ended (TERM, then KILL after ``grace_s``), so that it cannot write the directory
    back after it was removed."""
    for _ in range(3):
        holders = _processes_in(directory)
        for pid in holders:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        _kill_lingering(holders, grace_s)
        for _ in range(20):
            shutil.rmtree(directory, ignore_errors=True)
            if not os.path.exists(directory):
                break
            time.sleep(0.1)
        if not os.path.exists(directory) and not _processes_in(directory):
            return


def _kill_lingering(
    pids: set[int], grace_s: float, still_ours: Callable[[int], bool] = lambda pid: True
) -> None:
    """Wait up to ``grace_s`` for ``pids`` to exit, then SIGKILL those still running (and
    ``still_ours``: a pid may have been reused), and wait up to 5 s more for them."""
    _wait_gone(pids, timeout_s=grace_s)
    for pid in pids:
        if _running(pid) and still_ours(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    _wait_gone(pids, timeout_s=5.0)


def _processes_in(directory: str) -> set[int]:
    """Pids of other processes with a file open under ``directory``, or it as their cwd."""
    inside = os.path.join(os.path.realpath(directory), "")
    found: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            links = [os.readlink(os.path.join(entry.path, "cwd"))]
            fd_dir = os.path.join(entry.path, "fd")
            for fd in os.listdir(fd_dir):
                with contextlib.suppress(OSError):
                    links.append(os.readlink(os.path.join(fd_dir, fd)))
        except OSError:
            continue  # gone, or not ours to look into
        if any(os.path.join(link, "").startswith(inside) for link in links):
            found.add(int(entry.name))
    return found


def _ray_descendants() -> set[int]:
    """Pids of this process's descendants that are Ray's (the instance it started)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "stat"), "rb") as stream:
                stat = stream.read()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    stack = [os.getpid()]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return {pid for pid in found if b"ray" in _cmdline(pid)}


def _wait_gone(pids: set[int], timeout_s: float) -> None:
    """Wait until none of ``pids`` runs any more (zombies count as gone)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_running(pid) for pid in pids):
        time.sleep(0.1)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stream:
            stat = stream.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] != b"Z"


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as stream:
            return stream.read()
    except OSError:
        return b""


def _loopback_only() -> Any:
    """Import ray with every service of this process (and those it starts) on loopback."""
    os.environ[_RAY_LOCAL_ONLY_ENV] = "0"  # read by the processes Ray starts
    ray = _import_ray()
    from ray._private import ray_constants

    # ... and by this process when ray is first imported, which may have happened already.
    ray_constants.ENABLE_RAY_CLUSTER = False
    # Ray's crash handler in the driver: ray.shutdown() takes it down by setting SIGTERM
    # back to its default action (in C, unseen by Python), for the second it still runs;
    # a SIGTERM then would end the command at once and leave Ray's processes and
    # directory. Without it the driver's SIGTERM stays with Python throughout.
    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True
    return ray


def _is_loopback(address: str) -> bool:
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_NO_RAY = "--executor ray needs Ray: install the project's ray extra (pip install '.[ray]')"


def _first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (Ray's run over several lines), or its type."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(_NO_RAY) from None
    return ray


RAY_PROBE_TIMEOUT_S = 5.0
RAY_HEAD_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"
"""A call every Ray head's GCS answers (Ray's first call on connecting)."""
RAY_CLIENT_METHOD = "/ray.rpc.RayletDriver/ClusterInfo"
"""A call every Ray Client server answers."""
RAY_CLIENT_SCHEME = "ray://"
"""``ray://HOST:PORT`` names a Ray Client server (Ray's other way into a cluster); every
other scheme Ray would take apart itself, with errors of several lines."""


def _ray_head(address: str) -> tuple[str, int] | None:
    """(host, port) that ``--ray-address`` names (``HOST:PORT`` or ``ray://HOST:PORT``),
    None for ``auto`` (Ray finds the cluster of this node); any other form is refused."""
    if address == "auto":
        return None
    try:  # another scheme (http://...) is refused here too
        return checked_hostport(address.removeprefix(RAY_CLIENT_SCHEME))
    except UserError:
        shown = repr(address if len(address) <= 80 else address[:77] + "...")
        raise UserError(
            f"--ray-address: {shown} is not HOST:PORT (or ray://HOST:PORT, or auto)"
        ) from None


def _check_reachable(address: str) -> None:
    """Fail fast with one line when no Ray head (or Ray Client server) answers at the
    address (Ray itself retries for minutes); ``auto`` is left to Ray."""
    hostport = _ray_head(address)
    if hostport is None:
        return
    try:
        with socket.create_connection(hostport, timeout=5):
            pass
    except OSError as error:
        reason = error.strerror or str(error) or type(error).__name__
        raise UserError(f"--ray-address {address}: no Ray head answers there ({reason})") from None
    # A Ray head speaks gRPC there; anything else (a web server, a silent listener) would
    # keep Ray retrying for minutes.
    import grpc

    from control.grpc_channels import wait_until_ready

    channel = grpc.insecure_channel(address.removeprefix(RAY_CLIENT_SCHEME))
    try:
        wait_until_ready(channel, RAY_PROBE_TIMEOUT_S)
        # Another gRPC server would have Ray retry for half a minute, logging each try.
        client = address.startswith(RAY_CLIENT_SCHEME)
        method = RAY_CLIENT_METHOD if client else RAY_HEAD_METHOD
        try:
            channel.unary_unary(method)(b"", timeout=RAY_PROBE_TIMEOUT_S)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.UNIMPLEMENTED:
                what = "a Ray Client server" if client else "a Ray head"
                raise UserError(
                    f"--ray-address {address}: a gRPC server answers there, but it has "
                    f"no {method}: not {what}"
                ) from None
            # Any other answer (Ray's own refusal of an empty request) is left to Ray.
    except grpc.FutureTimeoutError:
        raise UserError(
            f"--ray-address {address}: something listens there but does not speak gRPC "
            f"within {RAY_PROBE_TIMEOUT_S:g} s: not a Ray head"
        ) from None
    finally:
        channel.close()


def _ray_outcomes(
    fn: Callable[[Item], Result], items: Sequence[Item], executor: Executor
) -> Iterator[tuple[int, _Outcome[Result]]]:
    if executor.ray_address is not None and _is_loopback(executor.ray_address):
        # A head on this machine's loopback (ray start --head with the same switch):
        # this process must not announce the machine's outside address to it.
        ray = _loopback_only()
    else:
        ray = _import_ray()
    owned = not ray.is_initialized()
    if owned:
        if executor.ray_address is None:
            start_local_ray(executor.jobs)
        else:
            try:
                ray.init(
                    address=executor.ray_address,
                    log_to_driver=False,
                    logging_level=logging.WARNING,  # no notes of how it connected
                )
            except (ConnectionError, ValueError, RuntimeError) as error:
                raise UserError(
                    f"--ray-address {executor.ray_address}: cannot connect: {_first_line(error)}"
                ) from None
    pending: list[Any] = []
    try:
        # One task per run; Ray schedules them over the cluster's CPUs.
        remote = ray.remote(num_cpus=1, max_retries=0)(_guarded)
        refs = {remote.remote(fn, item): index for index, item in enumerate(items)}
        pending = list(refs)
        while pending:
            # Block for the next result, then take every other one already there.
            done, pending = ray.wait(pending, num_returns=1)
            if pending:
                more, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
                done += more
            for ref in done:
                try:
                    outcome = ray.get(ref)
                except ray.exceptions.RayError as error:  # the worker died, the task was lost
                    outcome = _Outcome(None, _failure(error))
                yield refs[ref], outcome
    finally:
        if owned and executor.ray_address is None:
            # The private instance goes with its tasks. Cancelling them first is not
            # needed, and a forced cancel whose task was just replying crashed Ray's
            # core worker (a failed check), which then ran no cleanup at all.
            stop_local_ray()
        else:
            for ref in pending:
                ray.cancel(ref, force=True)
            if owned:
                ray.shutdown()  # disconnects; the cluster goes on
