"""A sweep's results per figure: CSV, plot (ratio to the reference, per-seed spread), table."""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection
from pathlib import Path
from typing import Any, TypedDict

from control.files import atomic_write_all_bytes, csv_bytes, text_bytes
from sim.grid import Figure, Grid, Setting, run_key
from sim.report import png_bytes

MAX_PLOT_INCHES = 200.0
"""Widest plot: the width grows with the settings and policies of a figure, and a plot
is drawn in memory (120 dpi, 4 bytes a pixel): 200 inches are 24,000 pixels, about 50 MB,
where a figure of 100,000 settings would ask for gigabytes (or more pixels than
matplotlib draws) after every run had finished."""

INCHES_PER_SETTING = 1.1
"""Room for one setting's label under a plot (more with many policies, up to
:data:`MAX_PLOT_INCHES` in all); when the settings outgrow the width, only every k-th
setting is named, evenly, so that the labels stay apart."""

MAX_PLOTTED_RATIO = 1e300
"""Largest ratio drawn: matplotlib's scales overflow near the largest float, and a run
log edited by hand may hold any finite SCT. A larger ratio is drawn at this value; the
CSV file and the table give it exactly."""

RowKey = tuple[str, str]
"""A row of a figure: its setting's label and its policy."""


class RunRecord(TypedDict):
    """One line of ``runs.jsonl``: a finished run and its ``beamer simulate`` metrics."""

    key: str
    point: dict[str, Any]
    seed: int
    policy: str
    metrics: dict[str, float]


def _run_key(setting: Setting, seed: int, policy: str) -> str:
    return run_key(setting.point, seed, policy)


def aggregate(grid: Grid, figure: Figure, records: dict[str, RunRecord]) -> list[dict[str, Any]]:
    """One row per setting and policy: mean avg SCT and its ratio to the reference's.

    The ratio is taken per seed (same workload) and then averaged; ``rel_min``,
    ``rel_max`` and ``rel_stdev`` give its spread over seeds, ``per_seed`` the
    values. Only seeds where both runs finished count, and where the ratio is a
    number (not when the reference's average SCT is 0: stages that take no time).
    """
    reference = grid.reference
    rows: list[dict[str, Any]] = []
    for setting in figure.settings:
        ref_by_seed = {
            seed: records[key]["metrics"]["avg_sct_s"]
            for seed in grid.seeds
            if (key := _run_key(setting, seed, reference)) in records
        }
        for policy in grid.policies:
            mine = {
                seed: records[key]["metrics"]["avg_sct_s"]
                for seed in grid.seeds
                if (key := _run_key(setting, seed, policy)) in records
            }
            by_seed = {
                seed: mine[seed] / ref_by_seed[seed]
                for seed in grid.seeds
                if seed in mine and ref_by_seed.get(seed, 0.0) > 0
            }
            seeds = [seed for seed, ratio in by_seed.items() if math.isfinite(ratio)]
            ratios = [by_seed[seed] for seed in seeds]
            row: dict[str, Any] = {
                "setting": setting.label,
                **dict(setting.values),
                "policy": policy,
                "seeds": len(seeds),
                "avg_sct_s": _mean(mine.values()) if mine else None,
                "avg_sct_rel": _mean(ratios) if ratios else None,
                "rel_min": min(ratios) if ratios else None,
                "rel_max": max(ratios) if ratios else None,
                "rel_stdev": statistics.stdev(ratios) if len(ratios) > 1 else 0.0,
                f"seeds_{reference}_lower": sum(1 for r in ratios if r > 1.0),
                "per_seed": {seed: ratio for seed, ratio in zip(seeds, ratios, strict=True)},
            }
            rows.append(row)
    return rows


def _mean(values: Collection[float]) -> float:
    """``statistics.fmean``, also where the sum of ``values`` would overflow."""
    try:
        return statistics.fmean(values)
    except OverflowError:
        return math.fsum(value / len(values) for value in values)


def write_reports(out: Path, grid: Grid, records: dict[str, RunRecord]) -> dict[str, Any]:
    """``FIGURE.csv`` and ``FIGURE.png`` per figure and ``table.md``; returns the rows as JSON."""
    reference = grid.reference
    result: dict[str, Any] = {
        "grid": str(grid.path),
        "reference": reference,
        "seeds": list(grid.seeds),
        "policies": list(grid.policies),
        "figures": {},
    }
    files: dict[Path, bytes] = {}
    markdown = [
        f"Produced by `beamer sweep {grid.path}`: average SCT over {reference}'s "
        f"(mean over seeds {','.join(map(str, grid.seeds))} of each seed's ratio; > 1 means "
        f"{reference} is lower), and on how many seeds {reference} is lower.",
    ]
    for figure in grid.figures:
        rows = aggregate(grid, figure, records)
        result["figures"][figure.name] = rows
        columns = [
            "setting",
            *figure.varied,
            "policy",
            "seeds",
            "avg_sct_s",
            "avg_sct_rel",
            "rel_min",
            "rel_max",
            "rel_stdev",
            f"seeds_{reference}_lower",
            "per_seed",
        ]
        files[out / f"{figure.name}.csv"] = csv_bytes(
            columns, [[_cell(row, column) for column in columns] for row in rows]
        )
        by_key = _by_key(rows)
        files[out / f"{figure.name}.png"] = _plot(grid, figure, by_key)
        markdown.append("")
        markdown.extend(_markdown(grid, figure, by_key))
    files[out / "table.md"] = text_bytes("\n".join(markdown) + "\n")
    atomic_write_all_bytes(files)  # the reports agree with each other: all or none
    return result


def report_names(grid: Grid) -> list[str]:
    """The files :func:`write_reports` writes."""
    return [name for f in grid.figures for name in (f"{f.name}.csv", f"{f.name}.png")] + [
        "table.md"
    ]


def _cell(row: dict[str, Any], column: str) -> object:
    value = row.get(column)
    if value is None:
        return ""
    if column == "per_seed":
        return " ".join(f"{seed}:{ratio:.4f}" for seed, ratio in value.items())
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def _by_key(rows: list[dict[str, Any]]) -> dict[RowKey, dict[str, Any]]:
    """The rows by setting and policy, made once per figure: a figure may have tens of
    thousands of settings, and a search of the rows per setting took minutes."""
    return {(row["setting"], row["policy"]): row for row in rows}


def _markdown(grid: Grid, figure: Figure, rows: dict[RowKey, dict[str, Any]]) -> list[str]:
    reference = grid.reference
    others = [policy for policy in grid.policies if policy != reference]
    header = [f"figure `{figure.name}`", f"{reference} avg SCT s"]
    header += [f"{policy} / {reference}" for policy in others]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---", *["---:"] * (len(header) - 1)]) + "|",
    ]
    for setting in figure.settings:
        ref = rows[setting.label, reference]
        cells = [setting.label, _num(ref["avg_sct_s"], 2)]
        for policy in others:
            row = rows[setting.label, policy]
            if row["avg_sct_rel"] is None:
                cells.append("n/a")
            else:
                lower = row[f"seeds_{reference}_lower"]
                cells.append(f"{_num(row['avg_sct_rel'], 3)} ({lower}/{row['seeds']})")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _num(value: float | None, digits: int) -> str:
    """``value`` with ``digits`` decimals; beyond a billion in exponent form (a number
    of hundreds of digits would stretch the table)."""
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}" if abs(value) < 1e9 else f"{value:.{digits}e}"


def _plot(grid: Grid, figure: Figure, rows: dict[RowKey, dict[str, Any]]) -> bytes:
    """Average SCT relative to the reference per setting: mean, min-max bar and each seed
    (PNG bytes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reference = grid.reference
    others = [policy for policy in grid.policies if policy != reference] or [reference]
    labels = [setting.label for setting in figure.settings]
    width = 0.8 / len(others)
    inches = min(
        MAX_PLOT_INCHES, max(6.4, INCHES_PER_SETTING * len(labels) * max(1, len(others) / 2))
    )
    fig, axes = plt.subplots(figsize=(inches, 4.2))
    for offset, policy in enumerate(others):
        xs, means, low, high, seed_x, seed_y = [], [], [], [], [], []
        for position, label in enumerate(labels):
            row = rows[label, policy]
            if row["avg_sct_rel"] is None:
                continue
            x = position - 0.4 + width * (offset + 0.5)
            mean, lowest, highest = (
                _drawable(row[name]) for name in ("avg_sct_rel", "rel_min", "rel_max")
            )
            xs.append(x)
            means.append(mean)
            low.append(mean - lowest)
            high.append(highest - mean)
            for ratio in row["per_seed"].values():
                seed_x.append(x)
                seed_y.append(_drawable(ratio))
        points = axes.errorbar(
            xs, means, yerr=[low, high], fmt="o", capsize=3, label=policy, markersize=6
        )
        axes.scatter(seed_x, seed_y, s=10, alpha=0.5, color=points[0].get_color())
    axes.axhline(1.0, color="black", linewidth=0.8)
    named = _named_positions(len(labels), inches)
    axes.set_xticks(named, [labels[i] for i in named], rotation=20 if len(named) > 4 else 0)
    axes.set_xlabel(", ".join(figure.varied))
    axes.set_ylabel(f"average SCT / {reference}'s")
    axes.set_title(
        f"{figure.name}: mean over seeds {','.join(map(str, grid.seeds))} "
        "(bars: min-max, dots: seeds)",
        fontsize=10,
    )
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(fontsize=8)
    fig.tight_layout()
    return png_bytes(fig)


def _named_positions(settings: int, inches: float) -> range:
    """The settings named under a plot ``inches`` wide: every one, or every k-th when
    they outgrow :data:`INCHES_PER_SETTING` each."""
    room = max(1, int(inches / INCHES_PER_SETTING))
    return range(0, settings, max(1, math.ceil(settings / room)))


def _drawable(ratio: float) -> float:
    """``ratio`` as the plot draws it: at most :data:`MAX_PLOTTED_RATIO`."""
    return min(ratio, MAX_PLOTTED_RATIO)
