"""Compare methods across seeds with the statistics of Agarwal et al. 2021 ("Deep Reinforcement
Learning at the Edge of the Statistical Precipice"): IQM, stratified bootstrap intervals,
probability of improvement and performance profiles (see :mod:`rlvr.evaluation.stats`).

A *source* is an eval directory (``summary.json``) or a run directory. A run contributes the
eval directories of its latest evaluated checkpoint (``RUN/eval-*`` made by ``rlvr eval RUN``),
one score per task, or, for a training-log metric such as ``eval/greedy_accuracy``, the last
value logged in its ``metrics.jsonl``. An evaluation outside a run (``rlvr eval BASE --like
RUN``: a base model) stands beside runs for their ``eval/greedy_*`` metrics when it is greedy
(temperature 0, ``rlvr eval``'s default): its summary's metric of that name, as the trainer's
greedy held-out evaluation computes it. Sources are grouped into *methods* explicitly
(``--method NAME=path1,path2``) or by their run config: the config's top-level ``name`` when
it has one, else configs that are identical up to ``train.seed`` (and the ``logging``,
``checkpoint`` and ``eval`` sections) form one method. Evaluations of a model outside any run
are grouped by model.

Methods whose evaluations kept their samples and share their problems (equal problem ids, as
``rlvr eval BASE --like RUN`` and ``rlvr eval RUN`` give) are also compared problem by problem
(:func:`paired_comparisons`, :mod:`rlvr.evaluation.paired`), with an interval resampling the
seeds, then the problems.

Every interval here is a bootstrap over a method's runs (seeds). Its stated level holds only
with enough seeds: an exact test over ``n`` seeds cannot reach a two-sided p below
``2^(1-n)`` (:func:`rlvr.evaluation.stats.seeds_needed`: 6 seeds for 95%), and a percentile
bootstrap of 3 seeds' mean is the range of the 3 values. :func:`compare` marks each method,
pair and paired comparison whose seeds cannot support ``confidence`` (``supports_level``);
``rlvr compare`` flags them in its tables.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlvr.evaluation.harness import EvalError, load_summary, per_problem_values, read_run_config
from rlvr.evaluation.paired import paired_comparison
from rlvr.evaluation.stats import (
    AGGREGATES,
    bootstrap_ci,
    performance_profile_ci,
    probability_of_improvement_ci,
    seeds_needed,
)

_IGNORED_SECTIONS = ("logging", "checkpoint", "eval")


@dataclass
class Source:
    """One run (seed) of a method: a score per task, and what identifies its method."""

    path: Path
    scores: dict[str, float]
    group_key: str
    label: str
    config: dict[str, Any] = field(default_factory=dict)
    per_problem: dict[str, dict[str, float]] = field(default_factory=dict)
    """task key -> {problem id: the metric on that problem}, for eval dirs with samples."""
    problem_hashes: dict[str, str] = field(default_factory=dict)
    """task key -> the summary's ``problems.sha256`` (ids, prompts as rendered, answers)."""
    budget: dict[str, float] = field(default_factory=dict)
    """A run's cost per step (:func:`run_budget`); empty for an evaluation outside a run."""


BUDGET = (
    "tokens/generated",
    "tokens/trained",
    "tokens/completions",
    "tree/leaves_per_prompt",
    "tree/branch_points",
    "time/step",
)
"""The metrics.jsonl keys a run's budget reports, each as its mean over the run's steps: the
tokens sampled (a tree's shared segments once), trained and in the completions, the leaves per
prompt and branch points of tree rollouts, and the seconds per step."""


def run_budget(run_dir: Path) -> dict[str, float]:
    """The mean per step of each :data:`BUDGET` key that ``run_dir``'s metrics.jsonl logs."""
    from rlvr.logging import read_metrics

    values: dict[str, list[float]] = {}
    for row in read_metrics(run_dir):
        if "policy/loss" not in row:
            continue  # an evaluation's row
        for key in BUDGET:
            v = row.get(key)
            if isinstance(v, int | float) and math.isfinite(v):
                values.setdefault(key, []).append(float(v))
    return {key: sum(v) / len(v) for key, v in values.items() if v}


def task_key(task: dict[str, Any]) -> str:
    """A readable identity of a task config: ``arithmetic-L2``, ``arithmetic-L1+L3`` (a mixture
    of levels), ``file:data/test.jsonl``, ``file:openai/gsm8k:main`` (a dataset's subset),
    ``reasoning_gym:chain_sum``, ``guess_number``."""
    name = task.get("name", "arithmetic")
    if name == "file":
        return f"file:{task.get('path')}" + (f":{task['subset']}" if task.get("subset") else "")
    if name not in ("arithmetic", "countdown"):  # tasks without levels
        return name
    levels = task.get("levels") or [task.get("level", 2)]
    return f"{name}-" + "+".join(f"L{level}" for level in levels)


def _is_run(path: Path) -> bool:
    return (path / "config.yaml").is_file() or (path / "checkpoints").is_dir()


def run_eval_dirs(run_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The eval directories of a run's latest evaluated checkpoint, with their summaries (eval
    directories of models that are not checkpoints of the run, e.g. a base model, are skipped)."""
    found = []
    for child in sorted(Path(run_dir).iterdir()):
        if child.is_dir() and (child / "summary.json").is_file():
            summary = load_summary(child)
            if summary.get("checkpoint"):
                found.append((child, summary))
    if not found:
        return []
    latest = max(s.get("step") if s.get("step") is not None else -1 for _, s in found)
    return [
        (p, s) for p, s in found if (s.get("step") if s.get("step") is not None else -1) == latest
    ]


def _last_logged(run_dir: Path, key: str) -> float | None:
    from rlvr.logging import read_metrics

    value = None
    for row in read_metrics(run_dir):
        v = row.get(key)
        if isinstance(v, int | float) and math.isfinite(v):
            value = float(v)
    return value


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _method_identity(config: dict[str, Any]) -> tuple[str, str]:
    """(group key, base label) of a run config."""
    if isinstance(config.get("name"), str) and config["name"]:
        return f"name:{config['name']}", config["name"]
    kept = {k: v for k, v in config.items() if k not in _IGNORED_SECTIONS}
    flat = _flatten(kept)
    flat.pop("train.seed", None)
    label = str(flat.get("algorithm.preset", "run"))
    return "config:" + json.dumps(flat, sort_keys=True, default=str), label


def _eval_scores(
    path: Path, evals: list[tuple[Path, dict[str, Any]]], metric: str
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """``(scores, per_problem)`` of a source's eval directories: the summary's ``metric`` per
    task, and its value per problem where the directory keeps its samples."""
    if not evals:
        raise EvalError(
            f"run {path} has no eval directory of a checkpoint: run `rlvr eval {path}` first, "
            "or use a training-log metric such as --metric eval/greedy_accuracy"
        )
    scores: dict[str, float] = {}
    per_problem: dict[str, dict[str, float]] = {}
    for eval_dir, summary in evals:
        if metric not in summary["metrics"]:
            available = ", ".join(sorted(summary["metrics"]))
            raise EvalError(
                f"--metric {metric}: not in {eval_dir}/summary.json (available: {available})"
            )
        key = task_key(summary.get("task", {}))
        if key in scores:
            raise EvalError(
                f"run {path} has several eval directories for task {key} at the same "
                "checkpoint; pass the one to use instead of the run directory"
            )
        scores[key] = float(summary["metrics"][metric])
        values = per_problem_values(eval_dir, metric)
        if values is not None:
            per_problem[key] = values
    return scores, per_problem


def _problem_hashes(evals: list[tuple[Path, dict[str, Any]]]) -> dict[str, str]:
    """task key -> ``problems.sha256`` of each eval summary that records it."""
    hashes = {}
    for _, summary in evals:
        digest = (summary.get("problems") or {}).get("sha256")
        if digest:
            hashes[task_key(summary.get("task", {}))] = digest
    return hashes


def _greedy_metric(path: Path, summary: dict[str, Any], metric: str) -> str:
    """The summary metric an evaluation outside a run gives for a run's training-log
    ``metric``: ``eval/greedy_<name>`` is ``<name>`` of a greedy evaluation (temperature 0),
    which scores the problems as the trainer's greedy held-out evaluation does."""
    name = metric.removeprefix("eval/greedy_")
    if name == metric or "/" in name:
        raise EvalError(
            f"--metric {metric}: {path} is an evaluation outside a run, which stands for a "
            "run's eval/greedy_* metrics only (eval/greedy_accuracy: its greedy accuracy)"
        )
    if (summary.get("sampling") or {}).get("temperature") != 0:
        raise EvalError(
            f"--metric {metric}: {path} was not sampled greedily (temperature 0), so it is not "
            "comparable with a run's greedy evaluation; evaluate it with rlvr eval's defaults "
            "(--n 1), or compare a summary metric such as pass@1"
        )
    return name


def load_source(path: Path, metric: str) -> Source:
    """Read one source's scores for ``metric`` (see the module docstring)."""
    path = Path(path)
    if not path.exists():
        raise EvalError(f"{path}: no such eval or run directory")
    if (path / "summary.json").is_file():
        summary = load_summary(path)
        evals = [(path, summary)]
        run_dir: Path | None = None
        if summary.get("checkpoint"):
            for candidate in (path.parent, Path(summary.get("run_dir") or "")):
                if (candidate / "config.yaml").is_file():
                    run_dir = candidate
                    break
    elif _is_run(path):
        run_dir = path
        evals = [] if "/" in metric else run_eval_dirs(path)
    else:
        raise EvalError(
            f"{path}: neither an eval directory (no summary.json) nor a run directory "
            "(no config.yaml)"
        )

    config = read_run_config(run_dir) if run_dir is not None else {}
    if "/" in metric and run_dir is None and evals:  # an evaluation outside a run, e.g. a base
        scores, per_problem = _eval_scores(path, evals, _greedy_metric(path, evals[0][1], metric))
    elif "/" in metric:
        if run_dir is None:
            raise EvalError(
                f"--metric {metric}: a training-log metric needs run directories ({path} is "
                "not part of a run)"
            )
        value = _last_logged(run_dir, metric)
        if value is None:
            raise EvalError(f"{run_dir}: metrics.jsonl has no value of {metric!r}")
        scores, per_problem = {task_key(config.get("task", {})): value}, {}
    else:
        scores, per_problem = _eval_scores(path, evals, metric)
    if config:
        group_key, label = _method_identity(config)
    elif not evals:
        group_key, label = f"path:{path.resolve()}", path.name
    else:
        summary = evals[0][1]
        model = str(summary.get("model") or summary.get("model_path"))
        group_key, label = f"model:{model}", str(summary.get("tag") or model)
    budget = run_budget(run_dir) if run_dir is not None else {}
    return Source(
        path, scores, group_key, label, config, per_problem, _problem_hashes(evals), budget
    )


def _disambiguate(groups: dict[str, list[Source]]) -> dict[str, list[Source]]:
    """Give auto-grouped methods distinct labels: colliding base labels get the config values
    that differ between them (e.g. ``grpo lr=1e-05``), then a counter if still equal."""
    by_label: dict[str, list[str]] = {}
    for key, sources in groups.items():
        by_label.setdefault(sources[0].label, []).append(key)
    names: dict[str, str] = {}
    for label, keys in by_label.items():
        if len(keys) == 1:
            names[keys[0]] = label
            continue
        flats = [_flatten(groups[k][0].config) for k in keys]
        common = set.intersection(*(set(f) for f in flats)) if flats else set()
        differ = sorted(
            k
            for k in set().union(*(set(f) for f in flats))
            if k != "train.seed"
            and not k.startswith(_IGNORED_SECTIONS)
            and (k not in common or len({json.dumps(f.get(k), default=str) for f in flats}) > 1)
        )
        for key, flat in zip(keys, flats, strict=True):
            parts = [f"{d.split('.')[-1]}={flat.get(d)}" for d in differ[:3]]
            names[key] = " ".join([label, *parts]) if parts else label
    seen: dict[str, int] = {}
    out: dict[str, list[Source]] = {}
    for key, sources in groups.items():
        name = names[key]
        seen[name] = seen.get(name, 0) + 1
        out[name if seen[name] == 1 else f"{name} #{seen[name]}"] = sources
    return out


def parse_method_option(text: str) -> tuple[str, list[Path]]:
    """``"grpo=runs/a,runs/b"`` -> ``("grpo", [Path("runs/a"), Path("runs/b")])``."""
    name, sep, paths = text.partition("=")
    items = [p.strip() for p in paths.split(",") if p.strip()]
    if not sep or not name.strip() or not items:
        raise EvalError(f"--method {text!r}: expected NAME=path1,path2,... (e.g. grpo=runs/a)")
    return name.strip(), [Path(p) for p in items]


def group_sources(
    paths: list[Path], methods: list[tuple[str, list[Path]]], metric: str
) -> dict[str, list[Source]]:
    """Load and group every source: explicit ``methods`` first, then ``paths`` by config."""
    seen: set[Path] = set()

    def once(p: Path) -> Path:
        resolved = p.resolve()
        if resolved in seen:
            raise EvalError(f"{p} is given more than once")
        seen.add(resolved)
        return p

    groups: dict[str, list[Source]] = {}
    for name, items in methods:
        if name in groups:
            raise EvalError(f"--method {name} is given more than once")
        groups[name] = [load_source(once(p), metric) for p in items]
    auto: dict[str, list[Source]] = {}
    for p in paths:
        source = load_source(once(p), metric)
        auto.setdefault(source.group_key, []).append(source)
    for name, sources in _disambiguate(auto).items():
        while name in groups:
            name += "'"
        groups[name] = sources
    if not groups:
        raise EvalError("nothing to compare: give eval or run directories, or --method")
    return groups


def default_taus(pooled: np.ndarray) -> np.ndarray:
    """101 thresholds spanning the scores, and [0, 1] whenever all scores lie in it."""
    lo, hi = float(pooled.min()), float(pooled.max())
    if lo >= 0 and hi <= 1:
        lo, hi = 0.0, 1.0
    if hi <= lo:
        hi = lo + 1.0
    return np.linspace(lo, hi, 101)


def _method_problems(sources: list[Source], task: str) -> tuple[dict[str, list[float]], str]:
    """``({problem id: its score in each of the method's runs}, "")`` on ``task``, or
    ``({}, why not)`` when a run kept no samples or the runs were evaluated on different
    problems."""
    maps: list[dict[str, float]] = []
    for source in sources:
        values = source.per_problem.get(task)
        if values is None:
            return {}, (
                f"{source.path} has no per-problem scores (no samples.parquet, or a metric not "
                "computed per problem)"
            )
        if maps and set(values) != set(maps[0]):
            return {}, f"{source.path} was evaluated on other problems than {sources[0].path}"
        if _differ(source, sources[0], task):
            return {}, f"{source.path} saw other prompts or answers than {sources[0].path}"
        maps.append(values)
    return {pid: [m[pid] for m in maps] for pid in maps[0]}, ""


def _differ(a: Source, b: Source, task: str) -> bool:
    """Whether two sources recorded different problem sets (prompts as rendered, answers) on
    ``task``; sources without a recorded hash are taken at their problem ids."""
    ha, hb = a.problem_hashes.get(task), b.problem_hashes.get(task)
    return bool(ha and hb and ha != hb)


def paired_comparisons(
    groups: dict[str, list[Source]], tasks: list[str], reps: int, confidence: float, seed: int
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Per task and pair of methods evaluated on the same problems (equal problem ids), the
    paired per-problem comparison of :func:`rlvr.evaluation.paired.paired_comparison` of the
    methods' ``[runs, problems]`` scores (its interval resamples runs, then problems).

    Returns:
        ``(paired, skipped)``: entries ``{"x", "y", "task", "n_problems", "seeds",
        "mean_diff", "wins", "ties", "losses", "p_value", "test", "supports_level"}``
        (``supports_level``: both methods have the :func:`seeds_needed` runs for
        ``confidence``), and ``{"x", "y", "task", "reason"}`` for pairs that could not be
        paired (none at all when no source kept per-problem scores).
    """
    if not any(s.per_problem for sources in groups.values() for s in sources):
        return [], []
    names = list(groups)
    needed = seeds_needed(confidence, two_sided=True)
    paired, skipped = [], []
    for t, task in enumerate(tasks):
        per_method = {name: _method_problems(groups[name], task) for name in names}
        for i, x in enumerate(names):
            for j in range(i + 1, len(names)):
                y = names[j]
                (xs, why_x), (ys, why_y) = per_method[x], per_method[y]
                reason = why_x or why_y
                if not reason and set(xs) != set(ys):
                    shared = len(set(xs) & set(ys))
                    reason = f"different problems ({len(xs)} and {len(ys)}, {shared} shared)"
                if not reason and _differ(groups[x][0], groups[y][0], task):
                    reason = "same problem ids, other prompts or answers (problem hashes differ)"
                if reason:
                    skipped.append({"x": x, "y": y, "task": task, "reason": reason})
                    continue
                entry = paired_comparison(
                    np.array(list(xs.values())).T,
                    np.array([ys[p] for p in xs]).T,
                    reps,
                    confidence,
                    seed + 1000 * (i + 1) + j + 100_000 * t,
                )
                supports = min(entry["seeds"]) >= needed
                paired.append({"x": x, "y": y, "task": task, **entry, "supports_level": supports})
    return paired, skipped


def compare(
    groups: dict[str, list[Source]],
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """Aggregate statistics per method and probability of improvement per pair.

    Returns a JSON-ready dict: ``tasks``, ``seeds_needed`` (the runs a method needs for a
    two-sided ``confidence`` over seeds: :func:`rlvr.evaluation.stats.seeds_needed`),
    ``methods`` (per method: ``runs``, ``sources``, ``scores`` [runs][tasks], and
    ``mean``/``median``/``iqm`` each as ``[estimate, low, high]``, ``profile`` with
    ``low``/``high`` bands, ``supports_level``: runs >= ``seeds_needed``, ``budget``: the
    mean over its runs of :func:`run_budget`, keys every run logged), ``taus``, and
    ``improvement`` (per pair i < j: ``x``, ``y``, ``p`` as ``[estimate, low, high]``,
    ``supports_level`` of both methods), and ``paired`` / ``paired_skipped``
    (:func:`paired_comparisons`) for methods evaluated on the same problems.
    """
    task_sets = {name: [sorted(s.scores) for s in sources] for name, sources in groups.items()}
    tasks = sorted(next(iter(groups.values()))[0].scores)
    for name, sets in task_sets.items():
        for source, keys in zip(groups[name], sets, strict=True):
            if keys != tasks:
                raise EvalError(
                    f"{source.path} (method {name}) has tasks {keys}, but {tasks} were expected: "
                    "every run must be evaluated on the same tasks"
                )
    matrices = {
        name: np.array([[s.scores[t] for t in tasks] for s in sources])
        for name, sources in groups.items()
    }
    pooled = np.concatenate([m.ravel() for m in matrices.values()])
    taus = default_taus(pooled)
    needed = seeds_needed(confidence, two_sided=True)
    methods = {}
    for i, (name, matrix) in enumerate(matrices.items()):
        entry: dict[str, Any] = {
            "runs": int(matrix.shape[0]),
            "sources": [str(s.path) for s in groups[name]],
            "scores": matrix.tolist(),
        }
        for stat_name, stat in AGGREGATES.items():
            entry[stat_name] = list(bootstrap_ci(matrix, stat, reps, confidence, seed + i))
        profile, lo, hi = performance_profile_ci(matrix, taus, reps, confidence, seed + i)
        entry["profile"] = {"value": profile.tolist(), "low": lo.tolist(), "high": hi.tolist()}
        entry["supports_level"] = entry["runs"] >= needed
        budgets = [s.budget for s in groups[name] if s.budget]
        entry["budget"] = {
            key: sum(b[key] for b in budgets) / len(budgets)
            for key in BUDGET
            if budgets and all(key in b for b in budgets)
        }
        methods[name] = entry
    names = list(matrices)
    improvement = []
    for i, x in enumerate(names):
        for j in range(i + 1, len(names)):
            y = names[j]
            p = probability_of_improvement_ci(
                matrices[x], matrices[y], reps, confidence, seed + 1000 * (i + 1) + j
            )
            supports = methods[x]["supports_level"] and methods[y]["supports_level"]
            improvement.append({"x": x, "y": y, "p": list(p), "supports_level": supports})
    paired, skipped = paired_comparisons(groups, tasks, reps, confidence, seed)
    return {
        "tasks": tasks,
        "confidence": confidence,
        "seeds_needed": needed,
        "reps": reps,
        "taus": taus.tolist(),
        "methods": methods,
        "improvement": improvement,
        "paired": paired,
        "paired_skipped": skipped,
    }


def compare_figure(result: dict[str, Any], metric: str):
    """Three panels: IQM and mean with intervals per method, performance profiles with bands,
    and probability of improvement per pair."""
    methods = result["methods"]
    names = list(methods)
    level = round(100 * result["confidence"])
    from rlvr.evaluation.plots import new_figure  # matplotlib: only when a plot is asked for

    fig = new_figure(15, max(3.2, 0.6 * len(names) + 2))
    ax_agg, ax_prof, ax_poi = fig.subplots(1, 3, squeeze=True)
    ypos = np.arange(len(names))
    for offset, stat, color in ((-0.15, "iqm", "C0"), (0.15, "mean", "C1")):
        est = np.array([methods[n][stat][0] for n in names])
        lo = np.array([methods[n][stat][1] for n in names])
        hi = np.array([methods[n][stat][2] for n in names])
        err = np.clip(np.vstack([est - lo, hi - est]), 0, None)
        ax_agg.errorbar(est, ypos + offset, xerr=err, fmt="o", capsize=4, color=color, label=stat)
    ax_agg.set_yticks(ypos, names)
    ax_agg.invert_yaxis()
    ax_agg.set_xlabel(metric)
    ax_agg.set_title(f"aggregate {metric} ({level}% stratified bootstrap CI)", fontsize=10)
    ax_agg.legend(fontsize=8)
    ax_agg.grid(alpha=0.3)

    taus = np.array(result["taus"])
    for i, name in enumerate(names):
        prof = methods[name]["profile"]
        ax_prof.plot(taus, prof["value"], color=f"C{i}", label=name)
        ax_prof.fill_between(taus, prof["low"], prof["high"], color=f"C{i}", alpha=0.2)
    ax_prof.set_xlabel(f"threshold tau ({metric})")
    ax_prof.set_ylabel(f"fraction of runs with {metric} > tau")
    ax_prof.set_title("performance profile", fontsize=10)
    ax_prof.legend(fontsize=8)
    ax_prof.grid(alpha=0.3)

    pairs = result["improvement"]
    if pairs:
        labels = [f"P({p['x']} > {p['y']})" for p in pairs]
        est = np.array([p["p"][0] for p in pairs])
        err = np.clip(
            np.vstack([est - [p["p"][1] for p in pairs], [p["p"][2] for p in pairs] - est]),
            0,
            None,
        )
        yp = np.arange(len(pairs))
        ax_poi.errorbar(est, yp, xerr=err, fmt="o", capsize=4)
        ax_poi.axvline(0.5, color="grey", linestyle="--", linewidth=1)
        ax_poi.set_yticks(yp, labels)
        ax_poi.invert_yaxis()
        ax_poi.set_xlim(0, 1)
        ax_poi.grid(alpha=0.3)
    else:
        ax_poi.text(0.5, 0.5, "one method: no pairs", ha="center", va="center")
        ax_poi.set_axis_off()
    ax_poi.set_title("probability of improvement", fontsize=10)
    return fig
