"""Tables and plots of simulation results; plots come as PNG bytes, for the caller to
write with the files that go with them (all or none)."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

COLUMNS: tuple[tuple[str, str, float], ...] = (
    ("avg SCT s", "avg_sct_s", 1.0),
    ("p50 SCT s", "p50_sct_s", 1.0),
    ("p95 SCT s", "p95_sct_s", 1.0),
    ("p99 SCT s", "p99_sct_s", 1.0),
    ("slowdown", "avg_slowdown", 1.0),
    ("avg CCT s", "avg_cct_s", 1.0),
    ("experiment s", "avg_experiment_s", 1.0),
)


def _cell(value: float) -> str:
    """A metric to three decimals; n/a where it has no value (a ratio to zero)."""
    return f"{value:.3f}" if math.isfinite(value) else "n/a"


def table(rows: Mapping[str, Mapping[str, float]], reference: str | None) -> str:
    """A fixed-width table, one row per label; ``vs ref`` is avg SCT over the reference's."""
    headers = ["policy", *(name for name, _, _ in COLUMNS)]
    if reference is not None:
        headers.append(f"vs {reference}")
    lines = []
    for label, metrics in rows.items():
        cells = [label, *(_cell(metrics[key] * scale) for _, key, scale in COLUMNS)]
        if reference is not None:
            cells.append(_cell(metrics.get("avg_sct_rel", math.nan)))
        lines.append(cells)
    widths = [max(len(row[i]) for row in [headers, *lines]) for i in range(len(headers))]
    out = [
        "  ".join(
            h.rjust(w) if i else h.ljust(w)
            for i, (h, w) in enumerate(zip(headers, widths, strict=True))
        )
    ]
    for row in lines:
        out.append(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    return "\n".join(out)


def sct_cdf_png(sct_by_label: Mapping[str, Sequence[float]], title: str) -> bytes:
    """CDF of stage completion times, one line per policy (log x axis), as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    positive = False
    for label, values in sct_by_label.items():
        data = np.sort(np.asarray(values, dtype=float))
        if len(data) == 0:
            continue
        positive = positive or bool(data[-1] > 0)
        axes.step(data, np.arange(1, len(data) + 1) / len(data), where="post", label=label)
    if positive:  # a log axis needs a time above zero (stages can take none)
        axes.set_xscale("log")
    axes.set_xlabel("stage completion time (s)")
    axes.set_ylabel("fraction of stages")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    return png_bytes(figure)


def normalised_png(values: Mapping[str, float], reference: str, title: str) -> bytes:
    """Average SCT of each label over the reference's (bars; 1.0 = reference), as PNG
    bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    labels = list(values)
    axes.bar(labels, [values[label] for label in labels], color="tab:blue")
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_ylabel(f"average SCT / {reference}")
    axes.set_title(title)
    axes.tick_params(axis="x", rotation=30)
    figure.tight_layout()
    return png_bytes(figure)


def png_bytes(figure: Any) -> bytes:
    """A matplotlib figure as PNG bytes, closed after: written later with the files that
    go with it, all or none."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, format="png", dpi=120)
    finally:
        plt.close(figure)
    return buffer.getvalue()
