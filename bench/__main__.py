"""Run every benchmark module (``bench/bench_*.py``) and print one JSON object.

``python -m bench`` runs them all but the studies that take tens of minutes
(``STUDIES``: the headroom and online order searches), which run by name or in their
quick form with ``--quick``; ``python -m bench NAME ...`` runs only the named ones;
``--quick`` is passed on for short smoke runs. Each module runs in its own process so
that one benchmark's imports and threads cannot skew another's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from control.cli import OneLineErrors

BENCH_DIR = Path(__file__).resolve().parent
STUDIES = frozenset({"bench_headroom", "bench_rollout"})
"""Not run by a plain ``python -m bench``: their searches take tens of minutes."""


def available() -> list[str]:
    return sorted(path.stem for path in BENCH_DIR.glob("bench_*.py"))


def run_one(name: str, quick: bool) -> object:
    command = [sys.executable, "-m", f"bench.{name}", *(["--quick"] if quick else [])]
    completed = subprocess.run(
        command, cwd=BENCH_DIR.parent, capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        return {"error": f"exit status {completed.returncode}", "stderr": completed.stderr[-2000:]}
    try:
        return json.loads(completed.stdout)
    except json.JSONDecodeError:
        return {"error": "output was not JSON", "stdout": completed.stdout[-2000:]}


def main() -> int:
    parser = OneLineErrors(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="short runs for a smoke test")
    args = parser.parse_args()
    names = args.names or [name for name in available() if args.quick or name not in STUDIES]
    unknown = sorted(set(names) - set(available()))
    if unknown:
        print(f"python -m bench: error: unknown benchmark(s) {unknown}", file=sys.stderr)
        return 2
    results = {}
    for name in names:
        print(f"running {name} ...", file=sys.stderr)
        results[name] = run_one(name, args.quick)
    json.dump(results, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    failed = [name for name, result in results.items() if failed_result(result)]
    if failed:
        # The JSON above holds every result; a script or CI job needs the status too.
        print(f"python -m bench: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def failed_result(result: object) -> bool:
    """Whether ``result`` is :func:`run_one`'s report of a benchmark that failed."""
    return isinstance(result, dict) and "error" in result


if __name__ == "__main__":
    sys.exit(main())
