"""An emulated run's guard: removes the run when its owner dies without doing so.

The owner removes its run itself on exit, Ctrl-C, SIGTERM, SIGHUP and failure. A
SIGKILL gives it no chance, nor does Ray, which ends its driver (``beamer tune``)
when the driver's raylet dies. The run's processes die with the owner (``setpriv
--pdeathsig``); its namespaces and run directory would stay until ``beamer clean``.
So each run starts a guard (:mod:`control.guard` has the mechanism): if the owner
dies without saying that its run is over, and the run's state file is still there,
the guard tears the run down from it, as ``beamer clean`` would, and says so on the
run's standard error. A guard killed too leaves the run to ``beamer clean``.

Run as ``python -m bmv2_topos.guard OWNER_PID OWNER_START_TICKS RUN_DIR`` with the
pipe as standard input (:func:`start_run_guard` starts it).
"""

from __future__ import annotations

import sys
from pathlib import Path

from bmv2_topos.state import STATE_FILE, RunState, claim_run_id
from control.guard import Guard, serve


def start_run_guard(run: RunState) -> Guard:
    """The guard of ``run``, whose owner is this process."""
    return Guard.start("bmv2_topos.guard", [str(run.directory)])


def tear_down_left_run(pid: int, arguments: list[str]) -> int:
    """The run in ``arguments[0]`` of a dead owner, torn down from its state file (if the
    file is gone, the owner tore it down before it died)."""
    directory = Path(arguments[0])
    if not (directory / STATE_FILE).exists():
        return 0
    run_id = directory.name
    claim = claim_run_id(run_id)  # ``beamer clean`` leaves a claimed run alone
    try:
        run = RunState.load(directory)
        removed = run.teardown()
    except Exception as error:
        print(
            f"beamer: run {run_id}: its owner (pid {pid}) ended without removing it, and "
            f"the guard could not remove everything ({error}); beamer clean removes the rest",
            file=sys.stderr,
        )
        return 1
    finally:
        if claim is not None:
            claim.close()
    print(
        f"beamer: run {run_id}: its owner (pid {pid}) ended without removing it; the guard "
        f"removed {len(removed)} leftovers",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:], tear_down_left_run))
