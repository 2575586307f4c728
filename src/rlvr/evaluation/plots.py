"""Matplotlib figures for reports and comparisons, rendered off-screen (Agg canvas, no pyplot
global state, no display needed) to PNG bytes or ``data:`` URIs."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

TRAINING_SERIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("reward/mean",)),
    ("accuracy", ("reward/accuracy",)),
    ("response length (tokens)", ("response/length_mean",)),
    ("policy entropy (nats)", ("policy/entropy",)),
    ("KL to reference", ("policy/kl_ref",)),
    ("clip fraction", ("policy/clip_frac_low", "policy/clip_frac_high")),
    ("step time (s)", ("time/step",)),
    ("held-out accuracy", ("eval/greedy_accuracy", "eval/sampled_accuracy")),
)
"""(panel title, metrics.jsonl keys plotted in it) of the training-curves figure."""


def new_figure(width: float, height: float) -> Figure:
    """A figure attached to an Agg canvas (independent of matplotlib's global backend)."""
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def data_uri(fig: Figure) -> str:
    """The figure as a ``data:image/png;base64,...`` URI, for self-contained HTML."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(fig)).decode("ascii")


def _series(rows: Sequence[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for row in rows:
        value = row.get(key)
        if isinstance(value, int | float) and math.isfinite(value) and "step" in row:
            xs.append(float(row["step"]))
            ys.append(float(value))
    return xs, ys


def training_figure(rows: Sequence[dict[str, Any]]) -> Figure | None:
    """One panel per :data:`TRAINING_SERIES` entry that has data in ``rows`` (metrics.jsonl
    rows); None when no series has any data."""
    panels = []
    for title, keys in TRAINING_SERIES:
        lines = [(key, *_series(rows, key)) for key in keys]
        lines = [line for line in lines if line[1]]
        if lines:
            panels.append((title, lines))
    if not panels:
        return None
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig = new_figure(4.2 * cols, 2.9 * nrows)
    axes = fig.subplots(nrows, cols, squeeze=False)
    for ax, (title, lines) in zip(axes.flat, panels, strict=False):
        for key, xs, ys in lines:
            style = "o-" if len(xs) <= 3 or key.startswith("eval/") else "-"
            ax.plot(xs, ys, style, label=key, markersize=4)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if len(lines) > 1:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    return fig


def passk_figure(evals: Sequence[tuple[str, dict[str, Any]]]) -> Figure | None:
    """pass@k and maj@k against k (log2 axis), one line per evaluation, with the summaries'
    bootstrap intervals as error bars; None when no summary has any pass@k."""
    usable = [(label, s) for label, s in evals if s.get("ks")]
    if not usable:
        return None
    level = round(100 * float(usable[0][1].get("confidence", 0.95)))
    fig = new_figure(10, 3.8)
    axes = fig.subplots(1, 2, squeeze=False)[0]
    for ax, metric in zip(axes, ("pass", "maj"), strict=True):
        for label, summary in usable:
            ks = [k for k in summary["ks"] if f"{metric}@{k}" in summary["metrics"]]
            ys = np.array([summary["metrics"][f"{metric}@{k}"] for k in ks])
            ci = summary.get("ci", {})
            if all(f"{metric}@{k}" in ci for k in ks):
                lo = np.array([ci[f"{metric}@{k}"][0] for k in ks])
                hi = np.array([ci[f"{metric}@{k}"][1] for k in ks])
                err = np.clip(np.vstack([ys - lo, hi - ys]), 0, None)
                ax.errorbar(ks, ys, yerr=err, marker="o", capsize=3, label=label)
            else:
                ax.plot(ks, ys, "o-", label=label)
        ax.set_xscale("log", base=2)
        ticks = sorted({k for _, s in usable for k in s["ks"]})
        ax.set_xticks(ticks, [str(k) for k in ticks])
        ax.minorticks_off()
        ax.set_xlabel("k")
        ax.set_ylabel(f"{metric}@k")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.set_title(f"{metric}@k ({level}% bootstrap CI over problems)", fontsize=10)
        ax.legend(fontsize=8)
    return fig
