"""One entry point for every workload source: generator, named trace, or a file.

``spec`` is ``hp-tuning`` (generated), ``fb2010`` (the Coflow-Benchmark trace
at its default location, see :func:`workloads.coflow_benchmark.default_trace_path`),
or a path to a workload file, whose format is recognised by content: a JSON
document (first non-blank character ``{``) or Coflow-Benchmark text.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from control.errors import UserError
from control.files import file_path
from control.model import Workload
from workloads import coflow_benchmark, hp_tuning, json_format
from workloads.files import read_text
from workloads.summary import rescale_to_load

NAMED_WORKLOADS = ("hp-tuning", "fb2010")
SEEDED_WORKLOADS = ("hp-tuning",)
"""The workloads drawn from the seed; any other (fb2010, a file) is the same for every seed."""
_BLANK = re.compile(r"[ \t\r\n]*")


def refuse_seed_for_unseeded(option: str, spec: str) -> None:
    """A seed given for a workload that no seed draws would run (or show) the same
    workload and call it another seed's."""
    if spec not in SEEDED_WORKLOADS:
        raise UserError(
            f"{option}: the workload {spec} is the same for every seed (only "
            f"{', '.join(SEEDED_WORKLOADS)} is drawn from one): leave {option} out"
        )


def load_workload(
    spec: str,
    *,
    seed: int = 1,
    load: float | None = None,
    config: hp_tuning.HpTuningConfig | None = None,
) -> Workload:
    """Resolve ``spec`` to a workload.

    ``seed`` and ``load`` override ``config`` (default :class:`HpTuningConfig`)
    for ``hp-tuning``. For a trace or a file, ``load`` (when given) stretches
    the arrival times so that the offered load is ``load``; ``seed`` is unused.
    """
    if not spec:
        # Path("") is ".", which would be refused as a directory.
        raise UserError(f"an empty workload name (named: {', '.join(NAMED_WORKLOADS)}; or a file)")
    if spec == "hp-tuning":
        base = config or hp_tuning.HpTuningConfig()
        chosen_load = base.load if load is None else load
        return hp_tuning.generate(dataclasses.replace(base, seed=seed, load=chosen_load))
    if spec == "fb2010":
        workload = read_file(coflow_benchmark.default_trace_path())
    else:
        workload = read_file(file_path(spec))
    return workload if load is None else rescale_to_load(workload, load)


def read_file(path: Path) -> Workload:
    """Read a JSON workload or a Coflow-Benchmark trace, told apart by content."""
    hint = "" if path.suffix else f" (named workloads: {', '.join(NAMED_WORKLOADS)})"
    text = read_text(path, missing_hint=hint)
    # A trace's header is two numbers, so any JSON value is read as JSON (and a
    # top-level array is refused as such, not as a trace with a bad header).
    if looks_like_json(text):
        return json_format.loads(text, str(path))
    return coflow_benchmark.parse(text, str(path))


def looks_like_json(text: str) -> bool:
    """Whether ``text`` opens as a JSON object or array (a trace opens with a number)."""
    start = _BLANK.match(text).end()  # type: ignore[union-attr]
    return text[start : start + 1] in ("{", "[")
