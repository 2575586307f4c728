"""Matplotlib figures for reports and comparisons, rendered off-screen (Agg canvas, no pyplot
global state, no display needed) to PNG bytes or ``data:`` URIs."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

TRAINING_SERIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("reward", "mean reward", ("reward/mean",)),
    ("accuracy", "fraction of samples correct", ("reward/accuracy",)),
    ("response length", "tokens", ("response/length_mean",)),
    ("policy entropy", "nats per token", ("policy/entropy",)),
    ("KL to reference", "KL (nats per token)", ("policy/kl_ref",)),
    ("clip fraction", "fraction of tokens", ("policy/clip_frac_low", "policy/clip_frac_high")),
    ("step time", "seconds", ("time/step",)),
    (
        "held-out accuracy",
        "fraction of problems",
        ("eval/greedy_accuracy", "eval/sampled_accuracy"),
    ),
)
"""(panel title, y-axis label, metrics.jsonl keys plotted in it) of the training-curves figure."""

EVENT_STYLES: dict[str, tuple[str, str, str]] = {
    "resume": ("tab:blue", "--", "resumed"),
    "lr": ("tab:green", "-.", "learning rate changed"),
}
"""(colour, line style, legend label) of each kind of run event marked on the curves: a resume
and a change of the learning rate or its schedule (``--resume --set train.lr=...``)."""


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
    """(steps, values) of ``key``'s finite values."""
    xs, ys = [], []
    for row in rows:
        value = row.get(key)
        if isinstance(value, int | float) and math.isfinite(value) and "step" in row:
            xs.append(float(row["step"]))
            ys.append(float(value))
    return xs, ys


def _style(ax: Any, title: str, ylabel: str, legend: bool) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step", fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=7)


def _plot_lines(
    ax: Any,
    rows: Sequence[dict[str, Any]],
    keys: Sequence[str],
    error_bars: Mapping[str, Callable[[float], tuple[float, float]]],
    marks: Sequence[float],
    events: Sequence[tuple[float, str]] = (),
) -> int:
    """Plot each key's finite values, with error bars where given, a red dotted line at each
    step of ``marks`` and a line styled by :data:`EVENT_STYLES` at each ``(x, kind)`` of
    ``events``; returns the number of legend entries."""
    entries = 0
    for key in keys:
        xs, ys = _series(rows, key)
        if not xs:
            continue
        style = "o-" if len(xs) <= 3 or key.startswith("eval/") else "-"
        if key in error_bars:
            y, bounds = np.array(ys), np.array([error_bars[key](v) for v in ys])  # [P], [P, 2]
            err = np.clip(np.vstack([y - bounds[:, 0], bounds[:, 1] - y]), 0, None)
            ax.errorbar(xs, ys, yerr=err, fmt=style, capsize=3, label=key, markersize=4)
        else:
            ax.plot(xs, ys, style, label=key, markersize=4)
        entries += 1
    for i, step in enumerate(marks):
        ax.axvline(step, color="red", linestyle=":", label="non-finite" if i == 0 else None)
    labelled: set[str] = set()
    for x, kind in events:
        color, style, label = EVENT_STYLES[kind]
        ax.axvline(x, color=color, linestyle=style, label=None if kind in labelled else label)
        labelled.add(kind)
    return entries + bool(marks) + len(labelled)


def _grid(count: int) -> tuple[Figure, list[Any]]:
    """A figure of ``count`` panels, at most 3 per row (the unused ones hidden)."""
    cols = min(3, count)
    nrows = math.ceil(count / cols)
    fig = new_figure(4.2 * cols, 2.9 * nrows)
    axes = list(fig.subplots(nrows, cols, squeeze=False).flat)
    for ax in axes[count:]:
        ax.set_visible(False)
    return fig, axes[:count]


def training_figure(
    rows: Sequence[dict[str, Any]],
    error_bars: Mapping[str, Callable[[float], tuple[float, float]]] | None = None,
    marks: Sequence[float] = (),
    events: Sequence[tuple[float, str]] = (),
) -> Figure | None:
    """One panel per :data:`TRAINING_SERIES` entry with data in ``rows`` (metrics.jsonl rows; a
    series whose values are all NaN/inf still gets its panel); None when none has any.

    Args:
        error_bars: metrics key -> function of a plotted value giving its (low, high)
            interval, e.g. a confidence interval of a held-out accuracy.
        marks: steps marked by a red dotted line on every panel (where a metric was NaN/inf).
        events: ``(x, kind)`` marked on every panel in the style of :data:`EVENT_STYLES`
            (resumes, learning-rate changes).
    """
    panels = [
        (title, ylabel, keys)
        for title, ylabel, keys in TRAINING_SERIES
        if any(isinstance(row.get(key), int | float) for row in rows for key in keys)
    ]
    if not panels:
        return None
    fig, axes = _grid(len(panels))
    for ax, (title, ylabel, keys) in zip(axes, panels, strict=True):
        entries = _plot_lines(ax, rows, keys, error_bars or {}, marks, events)
        _style(ax, title, ylabel, legend=entries > 1)
    return fig


def reward_terms(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Labels of the reward terms a run logged (``reward/<label>/mean``, the keys of
    ``RewardBreakdown.metrics()``), in first-logged order."""
    found: dict[str, None] = {}
    for row in rows:
        for key in row:
            if key.startswith("reward/") and key.endswith("/mean") and key.count("/") == 2:
                found[key[len("reward/") : -len("/mean")]] = None
    return list(found)


def reward_terms_figure(
    rows: Sequence[dict[str, Any]],
    weights: Mapping[str, float] | None = None,
    marks: Sequence[float] = (),
    events: Sequence[tuple[float, str]] = (),
) -> Figure | None:
    """One panel per reward term: its unweighted batch mean per step (``reward/<label>/mean``),
    titled with its weight when ``weights`` (label -> weight) has it, ``marks`` and ``events``
    as in :func:`training_figure`; None without terms."""
    terms = reward_terms(rows)
    if not terms:
        return None
    fig, axes = _grid(len(terms))
    for ax, term in zip(axes, terms, strict=True):
        entries = _plot_lines(ax, rows, [f"reward/{term}/mean"], {}, marks, events)
        weight = (weights or {}).get(term)
        title = term if weight is None else f"{term} (weight {weight:g})"
        _style(ax, title, "mean score (unweighted)", legend=entries > 1)
    return fig


def categories_in(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The categories a run logged (``category/<name>/samples_frac``), in the task's order where
    the run shows it (per-category eval and curriculum keys list them in that order)."""
    found: dict[str, None] = {}
    for row in rows:
        for key in row:
            for prefix, suffix in (
                ("eval/greedy_accuracy/", ""),
                ("curriculum/prob/", ""),
                ("category/", "/samples_frac"),
            ):
                if key.startswith(prefix) and key.endswith(suffix):
                    found[key[len(prefix) : len(key) - len(suffix)]] = None
    logged = {
        key[len("category/") : -len("/samples_frac")]
        for row in rows
        for key in row
        if key.startswith("category/") and key.endswith("/samples_frac")
    }
    return [c for c in found if c in logged]


def category_figure(rows: Sequence[dict[str, Any]]) -> Figure | None:
    """For a task with categories: the share of each step's training samples per category
    (stacked), the curriculum's probability of each category (when one was logged) and the
    held-out greedy accuracy of each category; None when the run logged no categories."""
    categories = categories_in(rows)
    if not categories:
        return None
    panels = [("share of training samples", "fraction of samples", "category/{}/samples_frac")]
    if any(f"curriculum/prob/{c}" in row for row in rows for c in categories):
        panels.append(("curriculum probability", "sampling probability", "curriculum/prob/{}"))
    panels.append(("held-out greedy accuracy", "fraction correct", "eval/greedy_accuracy/{}"))
    fig = new_figure(4.2 * len(panels), 3.1)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (title, ylabel, pattern) in zip(axes, panels, strict=True):
        if pattern.startswith("category/"):  # stacked; a category absent from a step had 0
            logged = [r for r in rows if any(pattern.format(c) in r for c in categories)]
            steps = [float(r["step"]) for r in logged]
            shares = [[float(r.get(pattern.format(c), 0.0)) for r in logged] for c in categories]
            ax.stackplot(steps, shares, labels=categories, alpha=0.85)
            ax.set_ylim(0, 1)
        else:
            for c in categories:
                xs, ys = _series(rows, pattern.format(c))
                if xs:
                    ax.plot(
                        xs, ys, "o-" if pattern.startswith("eval/") else "-", label=c, markersize=4
                    )
        _style(ax, title, ylabel, legend=True)
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
