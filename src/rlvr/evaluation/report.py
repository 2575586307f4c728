"""A self-contained HTML report of a run: training curves, pass@k of its evaluations, samples.

The report is one HTML file with inline CSS and its figures embedded as base64 PNG ``data:``
URIs: no scripts, no external assets, no server; it opens from disk in any browser. Model
outputs, prompts and config values are untrusted text and are HTML-escaped everywhere.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from rlvr.evaluation.harness import EvalError, load_summary
from rlvr.evaluation.plots import (
    TRAINING_SERIES,
    category_figure,
    data_uri,
    passk_figure,
    training_figure,
)

MAX_TEXT = 2000  # characters of a prompt/completion shown in the samples table

_CSS = """
body { font-family: system-ui, -apple-system, sans-serif; margin: 2em auto; max-width: 1300px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: .9em; }
th, td { border: 1px solid #ddd; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { white-space: pre-wrap; word-break: break-word; margin: 0; font-size: .85em; }
pre.config { background: #f8f8f8; padding: 1em; }
img { max-width: 100%; } .note { color: #666; font-size: .9em; }
"""


def _e(value: Any) -> str:
    """HTML-escape any value (quotes too)."""
    return html.escape(str(value), quote=True)


def _read_jsonl(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Rows of a JSON-lines file and the number of lines that are not JSON objects."""
    rows, bad = [], 0
    if not path.is_file():
        return rows, bad
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            bad += 1
    return rows, bad


def _fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}f}" if math.isfinite(value) else "-"
    return "-" if value is None else str(value)


def _last(rows: list[dict[str, Any]], key: str) -> Any:
    values = [r[key] for r in rows if isinstance(r.get(key), int | float)]
    return values[-1] if values else None


def _first(rows: list[dict[str, Any]], key: str) -> Any:
    values = [r[key] for r in rows if isinstance(r.get(key), int | float)]
    return values[0] if values else None


def find_eval_dirs(run_dir: Path) -> list[Path]:
    """Subdirectories of a run holding an evaluation (``summary.json``), e.g. ``RUN/eval-*``."""
    return sorted(p for p in Path(run_dir).iterdir() if (p / "summary.json").is_file())


def _eval_label(path: Path, summary: dict[str, Any]) -> str:
    if summary.get("checkpoint"):
        step = summary.get("step")
        return f"step {step}" if step is not None else str(summary["checkpoint"])
    return f"base: {summary.get('model') or path.name}"


def _overview(run_dir: Path, config: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    train_rows = [r for r in rows if "reward/mean" in r or "policy/loss" in r]
    items = [
        ("run directory", str(run_dir)),
        ("model", config.get("model", {}).get("name", "-")),
        ("task", _task_text(config.get("task", {}))),
        ("algorithm preset", config.get("algorithm", {}).get("preset", "-")),
        ("training steps logged", len(train_rows)),
        (
            "reward (first / last step)",
            f"{_fmt(_first(rows, 'reward/mean'))} / {_fmt(_last(rows, 'reward/mean'))}",
        ),
        (
            "held-out greedy accuracy (first / last)",
            f"{_fmt(_first(rows, 'eval/greedy_accuracy'))} / "
            f"{_fmt(_last(rows, 'eval/greedy_accuracy'))}",
        ),
    ]
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in items)
    return f'<section id="overview"><h2>Overview</h2><table>{body}</table></section>'


def _task_text(task: dict[str, Any]) -> str:
    if not task:
        return "-"
    if task.get("name") == "file":
        column = task.get("category_column")
        return f"file {task.get('path')}" + (f", categories from {column!r}" if column else "")
    return f"{task.get('name', 'arithmetic')} level {task.get('levels') or task.get('level', '-')}"


def _training(rows: list[dict[str, Any]], bad: int) -> str:
    parts = ['<section id="training"><h2>Training curves</h2>']
    fig = training_figure(rows)
    if fig is None:
        parts.append(
            '<p class="note">No training metrics logged (metrics.jsonl is missing or empty).</p>'
        )
    else:
        parts.append(f'<img alt="training curves" src="{data_uri(fig)}">')
        missing = [
            key
            for _, keys in TRAINING_SERIES
            for key in keys
            if not any(isinstance(r.get(key), int | float) for r in rows)
        ]
        if missing:
            parts.append(f'<p class="note">Not logged in this run: {_e(", ".join(missing))}.</p>')
    if bad:
        parts.append(f'<p class="note">{bad} unreadable line(s) of metrics.jsonl skipped.</p>')
    parts.append("</section>")
    return "".join(parts)


def _categories(rows: list[dict[str, Any]]) -> str:
    """Per-category curves of a run whose task has categories ("" otherwise)."""
    fig = category_figure(rows)
    if fig is None:
        return ""
    return (
        '<section id="categories"><h2>Categories</h2>'
        f'<img alt="per-category curves" src="{data_uri(fig)}"></section>'
    )


def _evaluation(run_dir: Path, eval_dirs: list[Path]) -> str:
    parts = ['<section id="evaluation"><h2>Held-out evaluation: pass@k</h2>']
    evals = []
    for path in eval_dirs:
        summary = load_summary(path)
        evals.append((path, summary))
    evals.sort(key=lambda e: (e[1].get("checkpoint") is not None, e[1].get("step") or -1))
    if not evals:
        parts.append(
            '<p class="note">No evaluations found in this run. Create them with '
            f"<code>rlvr eval {_e(run_dir)} --n 16</code> (the latest checkpoint) and "
            f"<code>rlvr eval BASE_MODEL --out {_e(run_dir)}/eval-base --n 16</code>.</p>"
            "</section>"
        )
        return "".join(parts)
    labels = [_eval_label(p, s) for p, s in evals]
    fig = passk_figure(list(zip(labels, (s for _, s in evals), strict=True)))
    if fig is not None:
        parts.append(f'<img alt="pass@k curves" src="{data_uri(fig)}">')
    header = [
        "evaluation",
        "directory",
        "task",
        "n",
        "temperature",
        "prompts",
        "pass@1",
        "pass@k",
        "maj@k",
        "mean@n",
        "answer entropy",
        "length",
        "truncated",
    ]
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for label, (path, s) in zip(labels, evals, strict=True):
        m, n, ks = s["metrics"], s.get("n"), s.get("ks") or [1]
        kmax = max(ks)
        cells = [
            label,
            path.name,
            _task_text(s.get("task", {})),
            n,
            s.get("sampling", {}).get("temperature"),
            s.get("n_prompts"),
            _fmt(m.get("pass@1")),
            f"{_fmt(m.get(f'pass@{kmax}'))} (k={kmax})",
            f"{_fmt(m.get(f'maj@{kmax}'))} (k={kmax})",
            _fmt(m.get(f"mean@{n}")),
            _fmt(m.get("answer_entropy")),
            _fmt(m.get("length_mean"), 1),
            _fmt(m.get("truncated_frac")),
        ]
        body.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    parts.append(f"<table><tr>{head}</tr>{''.join(body)}</table></section>")
    return "".join(parts)


def _clip(text: Any) -> str:
    text = "" if text is None else str(text)
    if len(text) > MAX_TEXT:
        return text[:MAX_TEXT] + f"\n... ({len(text) - MAX_TEXT} more characters)"
    return text


def _samples(run_dir: Path, max_samples: int) -> str:
    rows, bad = _read_jsonl(run_dir / "samples.jsonl")
    parts = ['<section id="samples"><h2>Sample completions</h2>']
    if not rows:
        parts.append('<p class="note">No samples.jsonl rows in this run.</p></section>')
        return "".join(parts)
    rows.sort(key=lambda r: r.get("step") if isinstance(r.get("step"), int) else -1)
    if len(rows) > max_samples:
        picks = np.unique(np.linspace(0, len(rows) - 1, max_samples).round().astype(int))
        shown = [rows[i] for i in picks]
    else:
        shown = rows
    parts.append(
        f'<p class="note">{len(shown)} of {len(rows)} logged samples, spread evenly over '
        "training. Model output is shown as escaped text.</p>"
    )
    head = "".join(f"<th>{h}</th>" for h in ("step", "reward", "answer", "prompt", "completion"))
    body = []
    for r in shown:
        reward = r.get("reward")
        body.append(
            "<tr>"
            f'<td class="num">{_e(r.get("step", "-"))}</td>'
            f'<td class="num">{_e(_fmt(reward) if isinstance(reward, float) else reward)}</td>'
            f"<td><pre>{_e(_clip(r.get('answer')))}</pre></td>"
            f"<td><pre>{_e(_clip(r.get('prompt')))}</pre></td>"
            f"<td><pre>{_e(_clip(r.get('completion')))}</pre></td>"
            "</tr>"
        )
    parts.append(f"<table><tr>{head}</tr>{''.join(body)}</table>")
    if bad:
        parts.append(f'<p class="note">{bad} unreadable line(s) of samples.jsonl skipped.</p>')
    parts.append("</section>")
    return "".join(parts)


def build_report(run_dir: Path, eval_dirs: list[Path] | None = None, max_samples: int = 24) -> str:
    """The HTML report of a run (see the module docstring).

    Args:
        run_dir: a run directory (``config.yaml`` and/or ``metrics.jsonl``).
        eval_dirs: evaluations to plot; default: every ``RUN/*/summary.json`` directory.
        max_samples: rows of the samples table.
    """
    import yaml

    run_dir = Path(run_dir)
    if not run_dir.is_dir() or not (
        (run_dir / "config.yaml").is_file() or (run_dir / "metrics.jsonl").is_file()
    ):
        raise EvalError(f"{run_dir} is not a run directory (no config.yaml or metrics.jsonl)")
    config_text = (
        (run_dir / "config.yaml").read_text() if (run_dir / "config.yaml").is_file() else ""
    )
    try:
        config = yaml.safe_load(config_text) or {}
    except yaml.YAMLError:
        config = {}
    config = config if isinstance(config, dict) else {}
    rows, bad = _read_jsonl(run_dir / "metrics.jsonl")
    evals = find_eval_dirs(run_dir) if eval_dirs is None else list(eval_dirs)
    created = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    sections = [
        _overview(run_dir, config, rows),
        _training(rows, bad),
        _categories(rows),
        _evaluation(run_dir, evals),
        _samples(run_dir, max_samples),
        '<section id="config"><h2>Config</h2>'
        f'<pre class="config">{_e(config_text or "(no config.yaml)")}</pre></section>',
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>rlvr report: {_e(run_dir.name)}</title><style>{_CSS}</style></head><body>"
        f"<h1>rlvr report: {_e(run_dir.name)}</h1>"
        f'<p class="note">Generated {_e(created)} by <code>rlvr report</code>.</p>'
        + "".join(sections)
        + "</body></html>\n"
    )
