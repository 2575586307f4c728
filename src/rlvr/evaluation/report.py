"""A self-contained HTML report of a run: a red notice naming any metric that went NaN/inf
(and where), the held-out accuracy before -> after training with 95% Wilson intervals, training
curves (with y-axis labels, non-finite steps, resumes and learning-rate changes marked),
per-reward-term curves, the code sandbox's reward-hacking counters (programs killed per limit,
forbidden attempts), the sampler/trainer mismatch and its correction (first, last, max),
per-category curves, pass@k of its evaluations, and samples with their per-term reward
breakdown.

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
    EVENT_STYLES,
    TRAINING_SERIES,
    category_figure,
    data_uri,
    passk_figure,
    reward_terms,
    reward_terms_figure,
    training_figure,
)
from rlvr.progress import first_action

MAX_TEXT = 2000  # characters of a prompt/completion shown in the samples table
Z95 = 1.959963984540054  # standard normal quantile of 0.975: 95% two-sided intervals
NONFINITE_TEXT = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
"""How metrics.jsonl writes non-finite values (older files wrote ``null`` instead)."""
LR_KEYS = ("train.lr", "train.lr_schedule", "train.warmup_steps", "train.min_lr_ratio")
"""Config keys whose change on ``--resume`` changes the learning rate from the resumed step."""

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
.alert { border: 2px solid #c00; background: #fff0f0; padding: .5em 1em; margin: 1em 0; }
.alert strong, .bad { color: #c00; } .headline { font-size: 1.15em; }
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


def read_metric_rows(
    path: Path,
) -> tuple[list[dict[str, Any]], int, dict[str, list[tuple[Any, str]]]]:
    """Rows of a ``metrics.jsonl`` with non-finite values as floats, and where they were.

    Returns:
        ``(rows, bad, nonfinite)``: the rows, with the strings "nan", "inf" and "-inf" and the
        ``null`` of older files (which wrote every non-finite value so) turned into float
        NaN/inf; the number of lines that are not JSON objects; and, per metrics key, the
        ``(step, text as written)`` of each of its non-finite values in file order.
    """
    rows, bad = _read_jsonl(path)
    nonfinite: dict[str, list[tuple[Any, str]]] = {}
    for row in rows:
        for key, value in row.items():
            if value is None:
                text = "null"
            elif isinstance(value, str) and value in NONFINITE_TEXT:
                text = value
            else:
                continue
            if key != "step":
                row[key] = NONFINITE_TEXT.get(text, math.nan)
                nonfinite.setdefault(key, []).append((row.get("step"), text))
    return rows, bad, nonfinite


def run_events(run_dir: Path) -> list[tuple[float, str, str]]:
    """The resumes of a run and the learning-rate changes they made, from ``resumes.jsonl``:
    ``(x, kind, text)`` with kind ``resume`` or ``lr`` (:data:`~rlvr.evaluation.plots.EVENT_STYLES`)
    and x half a step after the step resumed from, where the curves go on."""
    rows, _ = _read_jsonl(Path(run_dir) / "resumes.jsonl")
    events = []
    for row in rows:
        step = row.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            continue
        checkpoint = row.get("checkpoint")
        source = f" (from {checkpoint})" if checkpoint else " (no checkpoint: from the start)"
        events.append((step + 0.5, "resume", f"after step {step}{source}"))
        changes = row.get("changes") if isinstance(row.get("changes"), dict) else {}
        lr = [
            f"{key} {change.get('old')} → {change.get('new')}"
            for key, change in changes.items()
            if key in LR_KEYS and isinstance(change, dict)
        ]
        if lr:
            events.append((step + 0.5, "lr", f"from step {step + 1}: {', '.join(lr)}"))
    return events


def wilson_interval(accuracy: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``accuracy`` observed on ``n`` trials::

        (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)

    Unlike the normal approximation it stays inside [0, 1] and is not empty at 0% or 100%.
    """
    center = accuracy + z * z / (2 * n)
    half = z * math.sqrt(max(accuracy * (1 - accuracy), 0.0) / n + z * z / (4 * n * n))
    return (center - half) / (1 + z * z / n), (center + half) / (1 + z * z / n)


def _finite(value: Any) -> bool:
    """A logged finite number (a bool is not one)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _fmt(value: Any, digits: int = 3) -> str:
    """A number for a table: non-finite floats as nan/inf/-inf (shown, never hidden)."""
    if isinstance(value, float):
        if math.isfinite(value):
            return f"{value:.{digits}f}"
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
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


def _alerts(rows: list[dict[str, Any]], nonfinite: dict[str, list[tuple[Any, str]]]) -> str:
    """A red box at the top naming every metric that went non-finite and where, and the steps
    the trainer skipped for it ("" when there is nothing to report)."""
    items = []
    for key, where in nonfinite.items():
        steps = [str(step) for step, _ in where]
        shown = ", ".join(steps[:10]) + (f" and {len(steps) - 10} more" if len(steps) > 10 else "")
        legacy = " (how older rlvr versions wrote NaN/inf)" if where[0][1] == "null" else ""
        items.append(
            f"<li><code>{_e(key)}</code> is {_e(where[0][1])}{legacy} at step {_e(where[0][0])}; "
            f"non-finite at {len(steps)} step(s): {_e(shown)}</li>"
        )
    skipped = _last(rows, "train/skipped_nonfinite")
    if skipped:
        items.append(
            f"<li>{_e(_fmt(skipped, 0))} training step(s) skipped for non-finite values "
            "(<code>train/skipped_nonfinite</code> at the last step)</li>"
        )
    if not items:
        return ""
    return (
        '<div class="alert" id="nonfinite"><strong>Non-finite values in this run</strong>'
        f"<ul>{''.join(items)}</ul>Red dotted lines mark these steps in the curves below.</div>"
    )


def _eval_n(rows: list[dict[str, Any]], config: dict[str, Any]) -> tuple[int | None, str]:
    """Held-out problems per evaluation, and where that number comes from: the logged
    ``eval/greedy_n``, else the config's ``eval.n_prompts`` (at most that many were used)."""
    logged = _last(rows, "eval/greedy_n")
    if _finite(logged) and logged >= 1:
        return int(logged), f"n = {int(logged)} held-out problems"
    n_prompts = (config.get("eval") or {}).get("n_prompts")
    if isinstance(n_prompts, int) and n_prompts >= 1:
        return n_prompts, (
            f"n = {n_prompts} held-out problems (eval.n_prompts; fewer if the task has fewer)"
        )
    return None, ""


def _accuracy_text(accuracy: float, n: int | None) -> str:
    """An accuracy with its 95% Wilson interval when ``n`` is known: 42.0% [32.8%, 51.8%]."""
    if n is None or not math.isfinite(accuracy):
        return f"{accuracy:.1%}"
    low, high = wilson_interval(accuracy, n)
    return f"{accuracy:.1%} [{low:.1%}, {high:.1%}]"


def _before_after(rows: list[dict[str, Any]], config: dict[str, Any]) -> str:
    """The headline: held-out greedy accuracy before -> after training, with intervals."""
    evals = [
        (r["step"], r["eval/greedy_accuracy"])
        for r in rows
        if isinstance(r.get("eval/greedy_accuracy"), int | float) and "step" in r
    ]
    if not evals:
        return '<p class="headline" id="before-after">No held-out evaluation in metrics.jsonl.</p>'
    n, n_text = _eval_n(rows, config)
    (step_a, a), (step_b, b) = evals[0], evals[-1]
    when = "before training" if step_a == 0 else f"at step {step_a}"
    text = f"Held-out greedy accuracy: {_accuracy_text(a, n)} {when}"
    if len(evals) == 1:
        text += " (the only evaluation)"
    else:
        text += f" → {_accuracy_text(b, n)} after step {step_b} ({(b - a) * 100:+.1f} points)"
        if n is not None and math.isfinite(a) and math.isfinite(b):
            (lo_a, hi_a), (lo_b, hi_b) = wilson_interval(a, n), wilson_interval(b, n)
            if lo_b <= hi_a and lo_a <= hi_b:
                text += "; the intervals overlap: not clear evidence of a change"
    note = f" 95% Wilson intervals, {n_text}." if n is not None else ""
    return (
        f'<p class="headline" id="before-after">{_e(text)}.<span class="note">{_e(note)}</span></p>'
    )


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
    if any("train/skipped_nonfinite" in r for r in rows):
        skipped = _fmt(_last(rows, "train/skipped_nonfinite"), 0)
        items.append(("steps skipped for non-finite values", skipped))
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in items)
    return f'<section id="overview"><h2>Overview</h2><table>{body}</table></section>'


def _task_text(task: dict[str, Any]) -> str:
    if not task:
        return "-"
    if task.get("name") == "file":
        column = task.get("category_column")
        return f"file {task.get('path')}" + (f", categories from {column!r}" if column else "")
    return f"{task.get('name', 'arithmetic')} level {task.get('levels') or task.get('level', '-')}"


def _training(
    rows: list[dict[str, Any]],
    bad: int,
    eval_n: int | None,
    marks: list[float],
    events: list[tuple[float, str, str]],
) -> str:
    """Training curves; held-out accuracies with 95% Wilson intervals when ``eval_n`` (held-out
    problems per evaluation) is known; ``marks``: steps where a metric was NaN/inf; ``events``:
    the resumes and learning-rate changes (:func:`run_events`), marked and listed."""
    parts = ['<section id="training"><h2>Training curves</h2>']
    bars = {}
    if eval_n is not None:
        bars = {
            f"eval/{kind}_accuracy": lambda acc: wilson_interval(acc, eval_n)
            for kind in ("greedy", "sampled")
        }
    fig = training_figure(rows, bars, marks, [(x, kind) for x, kind, _ in events])
    if fig is None:
        parts.append(
            '<p class="note">No training metrics logged (metrics.jsonl is missing or empty).</p>'
        )
    else:
        parts.append(f'<img alt="training curves" src="{data_uri(fig)}">')
        missing = [
            key
            for _, _, keys in TRAINING_SERIES
            for key in keys
            if not any(isinstance(r.get(key), int | float) for r in rows)
        ]
        if missing:
            parts.append(f'<p class="note">Not logged in this run: {_e(", ".join(missing))}.</p>')
        if events:
            marked = "; ".join(f"{EVENT_STYLES[kind][2]}: {text}" for _, kind, text in events)
            parts.append(
                f'<p class="note" id="run-events">Marked on the curves (blue dashed: a resume, '
                f"green dash-dot: a learning-rate change): {_e(marked)}.</p>"
            )
    if eval_n is not None and bars:
        parts.append(
            f'<p class="note">Held-out accuracy error bars: 95% Wilson intervals, n = {eval_n}.</p>'
        )
    if bad:
        parts.append(f'<p class="note">{bad} unreadable line(s) of metrics.jsonl skipped.</p>')
    parts.append("</section>")
    return "".join(parts)


def _reward_terms(
    rows: list[dict[str, Any]],
    config: dict[str, Any],
    marks: list[float],
    events: list[tuple[float, str, str]],
) -> str:
    """Per-term reward curves of a run with ``reward.terms`` ("" otherwise), titled with the
    terms' weights from the config, ``marks`` and ``events`` as in :func:`_training`, and the
    failed calls of each term."""
    weights = {
        term.get("label") or term.get("name"): term.get("weight", 1.0)
        for term in (config.get("reward") or {}).get("terms") or []
        if isinstance(term, dict)
    }
    fig = reward_terms_figure(rows, weights, marks, [(x, kind) for x, kind, _ in events])
    if fig is None:
        return ""
    parts = [
        '<section id="reward-terms"><h2>Reward terms</h2>'
        f'<img alt="reward term curves" src="{data_uri(fig)}">'
        '<p class="note">Each term\'s unweighted batch mean per step '
        "(<code>reward/&lt;term&gt;/mean</code>); the reward is their weighted sum.</p>"
    ]
    for term in reward_terms(rows):
        key = f"reward/{term}/errors"
        failed = sum(r[key] for r in rows if _finite(r.get(key)))
        if failed:
            parts.append(
                f'<p class="note bad">{_e(term)}: {failed:.0f} failed reward call(s) '
                f"(<code>{_e(key)}</code>), each scored 0 under reward.on_error: zero.</p>"
            )
    parts.append("</section>")
    return "".join(parts)


SANDBOX_EVENTS = {
    "killed": "programs ended by a budget (memory, cpu_time, wall_time, processes, disk, "
    "output_limit) or a signal",
    "forbidden": "programs that tried what the sandbox forbids where that is observable "
    "(syscall: killed by the seccomp filter; non_plain_value: a test compared an object of the "
    "solution that is not plain data, e.g. one whose __eq__ always succeeds)",
}


def _sandbox(rows: list[dict[str, Any]]) -> str:
    """The code sandbox's reward-hacking counters (``sandbox/*`` metrics, samples per step),
    totalled over the run ("" when no reward used the sandbox)."""
    keys = sorted({k for r in rows for k in r if k.startswith("sandbox/")})
    if not keys:
        return ""
    sampled = sum(r["sandbox/samples"] for r in rows if _finite(r.get("sandbox/samples")))
    body = []
    for key in (k for k in keys if k != "sandbox/samples"):
        hits = [(r.get("step"), r[key]) for r in rows if _finite(r.get(key)) and r[key] > 0]
        total = sum(count for _, count in hits)
        steps = ", ".join(_e(step) for step, _ in hits[:12]) + (" ..." if len(hits) > 12 else "")
        share = f"{total / sampled:.1%}" if sampled else "-"
        body.append(
            f"<tr><td><code>{_e(key)}</code></td><td class='num'>{total:.0f}</td>"
            f"<td class='num'>{share}</td><td>{steps}</td></tr>"
        )
    table = (
        "<table><tr><th>counter</th><th>samples</th><th>of sandboxed</th><th>steps</th></tr>"
        + "".join(body)
        + "</table>"
        if body
        else "<p>No program hit a limit or tried anything forbidden.</p>"
    )
    notes = "".join(
        f"<li><code>sandbox/{k}/*</code>: {_e(v)}</li>" for k, v in SANDBOX_EVENTS.items()
    )
    return (
        '<section id="sandbox"><h2>Code sandbox: limits and forbidden attempts</h2>'
        f"<p>{sampled:.0f} sample(s) ran in the sandbox.</p>{table}<ul class='note'>{notes}</ul>"
        "</section>"
    )


MISMATCH_METRICS = {
    "mismatch/abs_log_ratio": "mean |log pi_train - log pi_sampler| per token (0: they agree)",
    "mismatch/kl_k3": "KL(pi_sampler || pi_train) per token, k3 estimate",
    "mismatch/ratio_out_of_band_frac": "share of tokens with pi_train / pi_sampler outside "
    "[0.5, 2]",
    "rollout/is_weight_mean": "mean importance weight of the correction (TIS / MIS)",
    "rollout/tis_clipped_frac": "share of tokens whose weight TIS truncated at tis_cap",
    "rollout/mis_masked_frac": "share of tokens MIS dropped (ratio outside mis_band)",
}
"""The sampler/trainer mismatch metrics (token means per step, docs/algorithms.md) and what
they mean."""


def _mismatch(rows: list[dict[str, Any]]) -> str:
    """First, last and max over the run of the sampler/trainer mismatch metrics ("" when no
    step logged them)."""
    body = []
    for key, meaning in MISMATCH_METRICS.items():
        steps = [(r.get("step"), r[key]) for r in rows if _finite(r.get(key))]
        if not steps:
            continue
        top_step, top = max(steps, key=lambda sv: sv[1])
        body.append(
            f"<tr><td><code>{_e(key)}</code></td><td class='num'>{_fmt(_first(rows, key), 4)}</td>"
            f"<td class='num'>{_fmt(_last(rows, key), 4)}</td>"
            f"<td class='num'>{_fmt(float(top), 4)} (step {_e(top_step)})</td>"
            f"<td>{_e(meaning)}</td></tr>"
        )
    if not body:
        return ""
    return (
        '<section id="mismatch"><h2>Sampler-trainer mismatch</h2>'
        "<p class='note'>The rollout engine's log-probs of the sampled tokens against the "
        "trainer's before the update (pi_train / pi_sampler per token); corrected by "
        "<code>algorithm.correction.tis_cap</code> and <code>mis_band</code>.</p>"
        "<table><tr><th>metric</th><th>first</th><th>last</th><th>max</th><th>meaning</th></tr>"
        + "".join(body)
        + "</table></section>"
    )


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


def _value_text(value: Any) -> str:
    """A logged number as text: finite floats to 3 decimals; NaN/inf, whether JSON's NaN or
    the strings "nan"/"inf"/"-inf", shown as such; anything else as written."""
    if isinstance(value, str) and value in NONFINITE_TEXT:
        return value
    return _fmt(value)


def _terms_text(terms: Any) -> str:
    """A sample's reward breakdown, one ``term value`` per line ("-" when not logged)."""
    if not isinstance(terms, dict) or not terms:
        return "-"
    return "\n".join(f"{name} {_value_text(value)}" for name, value in terms.items())


def _completion_text(row: dict[str, Any]) -> str:
    """A logged sample's completion, or an agent episode's whole transcript."""
    if "transcript" in row:
        return _transcript_text(row["transcript"], row.get("turn_rewards"))
    return _clip(row.get("completion"))


def _transcript_text(transcript: Any, turn_rewards: Any) -> str:
    """An agent episode's chat, one block per message; each action (assistant message) is
    labelled with its turn and the environment's reward for it, and assistant messages of the
    prompt (a worked example the environment put in the chat) as such; clipped to 4 x
    MAX_TEXT."""
    if not isinstance(transcript, list):
        return "-"
    rewards = turn_rewards if isinstance(turn_rewards, list) else []
    start = first_action(transcript, turn_rewards if isinstance(turn_rewards, list) else None)
    blocks, turn = [], 0
    for i, message in enumerate(transcript):
        role = message.get("role", "?") if isinstance(message, dict) else "?"
        content = message.get("content", "") if isinstance(message, dict) else str(message)
        label = role
        if role == "assistant" and i < start:
            label = "assistant, in the prompt (a worked example, not the policy's)"
        elif role == "assistant":
            reward = _value_text(rewards[turn]) if turn < len(rewards) else "-"
            label, turn = f"assistant, turn {turn + 1}, reward {reward}", turn + 1
        blocks.append(f"[{label}]\n{content}")
    text = "\n\n".join(blocks)
    limit = 4 * MAX_TEXT
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more)"


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
    episodes = any("transcript" in r for r in shown)
    last = "episode (every turn; actions with their reward)" if episodes else "completion"
    header = ("step", "reward", "reward terms", "answer", "prompt", last)
    head = "".join(f"<th>{h}</th>" for h in header)
    body = []
    for r in shown:
        body.append(
            "<tr>"
            f'<td class="num">{_e(r.get("step", "-"))}</td>'
            f'<td class="num">{_e(_value_text(r.get("reward")))}</td>'
            f"<td><pre>{_e(_terms_text(r.get('terms')))}</pre></td>"
            f"<td><pre>{_e(_clip(r.get('answer')))}</pre></td>"
            f"<td><pre>{_e(_clip(r.get('prompt')))}</pre></td>"
            f"<td><pre>{_e(_completion_text(r))}</pre></td>"
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
    rows, bad, nonfinite = read_metric_rows(run_dir / "metrics.jsonl")
    marks = sorted(  # steps where some metric was NaN/inf
        {float(s) for where in nonfinite.values() for s, _ in where if isinstance(s, int | float)}
    )
    events = run_events(run_dir)
    evals = find_eval_dirs(run_dir) if eval_dirs is None else list(eval_dirs)
    created = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    sections = [
        _alerts(rows, nonfinite),
        _before_after(rows, config),
        _overview(run_dir, config, rows),
        _training(rows, bad, _eval_n(rows, config)[0], marks, events),
        _reward_terms(rows, config, marks, events),
        _sandbox(rows),
        _mismatch(rows),
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
