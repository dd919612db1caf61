"""Emulation results as a table, JSON, CSV files and PNG plots."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from bmv2_topos.agent import StageRecord
from bmv2_topos.emulate import EmulationReport, RunResult
from control.errors import UserError
from control.files import atomic_write_all_bytes, csv_bytes
from control.interrupts import signals_held
from sim.report import png_bytes


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present and len(present) == len(values) else None


def _total(values: list[int | None]) -> int | None:
    """The sum, or None if any run has no count (a kernel that keeps none)."""
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def summary(report: EmulationReport) -> dict[str, dict[str, Any]]:
    """Per policy, the means over seeds (the ``--json`` object)."""
    result: dict[str, dict[str, Any]] = {}
    for policy in report.policies():
        runs = report.of(policy)
        predicted = _mean([run.predicted_avg_sct_s for run in runs])
        avg = statistics.fmean(run.avg_sct_s for run in runs)
        result[policy] = {
            "seeds": [run.key.seed for run in runs],
            "stages": sum(len(run.stages) for run in runs),
            "coflows": sum(run.coflows for run in runs),
            "avg_sct_s": avg,
            "p95_sct_s": statistics.fmean(run.p95_sct_s for run in runs),
            "avg_slowdown": statistics.fmean(run.avg_slowdown for run in runs),
            "sim_avg_sct_s": predicted,
            "emu_over_sim": None if predicted is None else avg / predicted,
            "per_seed_avg_sct_s": {str(run.key.seed): run.avg_sct_s for run in runs},
            "rtos": _total([None if run.tcp is None else run.tcp.timeouts for run in runs]),
            "retransmitted_segments": _total(
                [None if run.tcp is None else run.tcp.retransmitted_segments for run in runs]
            ),
        }
    if "fair" in result:
        fair = result["fair"]["avg_sct_s"]
        for values in result.values():
            values["avg_sct_vs_fair"] = values["avg_sct_s"] / fair
    return result


def table(report: EmulationReport) -> str:
    """Per-seed rows, then the mean over seeds of each policy (the policy column as wide
    as its longest name)."""
    width = max([12, *(len(run.key.policy) for run in report.runs)])
    header = (
        f"{'policy':<{width}} {'seed':>4} {'stages':>6} {'avg SCT s':>10} {'p95 SCT s':>10} "
        f"{'slowdown':>9} {'sim avg s':>10} {'emu/sim':>8} {'RTOs':>6}"
    )
    lines = [header, "-" * len(header)]
    for run in report.runs:
        lines.append(_row(run.key.policy, str(run.key.seed), run, width))
    lines.append("-" * len(header))
    means = summary(report)
    for policy, values in means.items():
        vs_fair = values.get("avg_sct_vs_fair")
        lines.append(
            f"{policy:<{width}} {'mean':>4} {values['stages']:>6} {values['avg_sct_s']:>10.2f} "
            f"{values['p95_sct_s']:>10.2f} {values['avg_slowdown']:>9.2f} "
            f"{_fmt(values['sim_avg_sct_s']):>10} {_fmt(values['emu_over_sim']):>8} "
            f"{_count(values['rtos']):>6}"
            + ("" if vs_fair is None or policy == "fair" else f"   {vs_fair:.2f}x fair")
        )
    return "\n".join(lines)


def _row(policy: str, seed: str, run: RunResult, width: int) -> str:
    return (
        f"{policy:<{width}} {seed:>4} {len(run.stages):>6} {run.avg_sct_s:>10.2f} "
        f"{run.p95_sct_s:>10.2f} {run.avg_slowdown:>9.2f} "
        f"{_fmt(run.predicted_avg_sct_s):>10} {_fmt(run.emu_over_sim):>8} "
        f"{_count(None if run.tcp is None else run.tcp.timeouts):>6}"
    )


def _count(value: int | None) -> str:
    return "n/a" if value is None else str(value)


OUTPUT_NAMES = ("stages.csv", "summary.csv", "sct_cdf.png", "avg_sct.png")
"""The files :func:`write_outputs` writes."""


def write_outputs(report: EmulationReport, directory: Path) -> list[Path]:
    """``stages.csv``, ``summary.csv``, ``sct_cdf.png`` and ``avg_sct.png`` in ``directory``,
    written together or not at all."""
    contents = output_contents(report, directory)
    with signals_held():
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # e.g. replaced by a file during the runs
            reason = error.strerror or error
            raise UserError(f"{directory}: cannot write the outputs there: {reason}") from None
        atomic_write_all_bytes(contents)
    return list(contents)


def output_contents(report: EmulationReport, directory: Path) -> dict[Path, bytes]:
    """What :func:`write_outputs` writes, by path, for a caller that writes more files
    with them, all or none."""
    stages = csv_bytes(
        [
            "policy",
            "seed",
            "experiment_id",
            "stage_id",
            "release_s",
            "end_s",
            "sct_s",
            "alone_s",
            "slowdown",
            "sim_sct_s",
            "emu_over_sim",
        ],
        (_stage_row(run, stage) for run in report.runs for stage in run.stages),
    )
    summary_csv = csv_bytes(
        [
            "policy",
            "seed",
            "stages",
            "avg_sct_s",
            "p95_sct_s",
            "avg_slowdown",
            "sim_avg_sct_s",
            "emu_over_sim",
            "wall_s",
            "rtos",
            "retransmitted_segments",
        ],
        (
            [
                run.key.policy,
                run.key.seed,
                len(run.stages),
                f"{run.avg_sct_s:.4f}",
                f"{run.p95_sct_s:.4f}",
                f"{run.avg_slowdown:.4f}",
                _fmt(run.predicted_avg_sct_s, 4),
                _fmt(run.emu_over_sim, 4),
                f"{run.wall_s:.2f}",
                _count(None if run.tcp is None else run.tcp.timeouts),
                _count(None if run.tcp is None else run.tcp.retransmitted_segments),
            ]
            for run in report.runs
        ),
    )
    cdf_png, bar_png = _plots(report)
    return dict(
        zip(
            (directory / name for name in OUTPUT_NAMES),
            (stages, summary_csv, cdf_png, bar_png),
            strict=True,
        )
    )


def _stage_row(run: RunResult, stage: StageRecord) -> list[object]:
    alone = run.alone_s[stage.experiment_id, stage.stage_id]
    sim = (run.predicted_sct_s or {}).get((stage.experiment_id, stage.stage_id))
    return [
        run.key.policy,
        run.key.seed,
        stage.experiment_id,
        stage.stage_id,
        f"{stage.release_s:.4f}",
        f"{stage.end_s:.4f}",
        f"{stage.sct_s:.4f}",
        f"{alone:.4f}",
        f"{stage.sct_s / alone:.4f}",
        _fmt(sim, 4),
        _fmt(None if not sim else stage.sct_s / sim, 4),
    ]


def _plots(report: EmulationReport) -> tuple[bytes, bytes]:
    """The SCT CDF and the bar chart against the simulator, as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    for policy in report.policies():
        values = sorted(sct for run in report.of(policy) for sct in run.scts_s)
        fractions = [(i + 1) / len(values) for i in range(len(values))]
        axes.step(values, fractions, where="post", label=policy)
    axes.set_xlabel("stage completion time (s)")
    axes.set_ylabel("fraction of stages")
    axes.set_title("Emulation: SCT CDF (all seeds)")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    cdf_png = png_bytes(figure)

    means = summary(report)
    policies = list(means)
    figure, axes = plt.subplots(figsize=(6, 4))
    positions = range(len(policies))
    axes.bar(
        [p - 0.2 for p in positions],
        [means[p]["avg_sct_s"] for p in policies],
        width=0.4,
        label="emulation",
    )
    axes.bar(
        [p + 0.2 for p in positions],
        [means[p]["sim_avg_sct_s"] or 0.0 for p in policies],
        width=0.4,
        label="simulator",
    )
    axes.set_xticks(list(positions), policies)
    axes.set_ylabel("average SCT (s), mean over seeds")
    axes.set_title("Emulation against the simulator's prediction")
    axes.legend()
    figure.tight_layout()
    bar_png = png_bytes(figure)
    return cdf_png, bar_png
