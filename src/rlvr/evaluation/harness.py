"""Sample-based evaluation of a model on a task's held-out split, saved for later re-scoring.

An evaluation directory holds

* ``samples.parquet`` -- one row per sample: ``problem_index, problem_id, prompt, answer,
  sample_index, completion, extracted_answer, score, correct, num_tokens, finished, category``
  (``category`` is "" unless the task has categories, e.g. ``task.levels``);
* ``summary.json`` -- what was evaluated (model, checkpoint, task config, sampling parameters),
  who judged correctness (``judge``: :meth:`rlvr.grading.grader.Grader.describe`) and the
  metrics of :mod:`rlvr.evaluation.passk` with percentile-bootstrap intervals over problems
  (the uncertainty due to the finite held-out set), overall and, for a task with categories,
  per category (``by_category``).

:func:`rescore` recomputes everything from ``samples.parquet`` (re-judging the stored
completions with the summary's ``judge``: the task's verifier or the run's reward, see
:mod:`rlvr.grading.grader`) without generating.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import yaml

from rlvr.data import Problem, Task, answer_extractor
from rlvr.errors import DataError, RlvrError
from rlvr.evaluation.passk import problem_metrics
from rlvr.evaluation.stats import bootstrap_mean_ci
from rlvr.grading.grader import Grader, build_grader, grade_samples
from rlvr.rollout import RolloutEngine, SamplingParams
from rlvr.rollout.streams import sample_keys, stream_key

SAMPLES_FILE = "samples.parquet"
SUMMARY_FILE = "summary.json"

SCHEMA = pa.schema(
    [
        ("problem_index", pa.int32()),
        ("problem_id", pa.string()),
        ("prompt", pa.string()),
        ("answer", pa.string()),
        ("sample_index", pa.int32()),
        ("completion", pa.string()),
        ("extracted_answer", pa.string()),
        ("score", pa.float64()),
        ("correct", pa.bool_()),
        ("num_tokens", pa.int32()),
        ("finished", pa.bool_()),
        ("category", pa.string()),
    ]
)
EPISODE_SCHEMA = pa.schema(
    [
        *SCHEMA,
        ("reward", pa.float64()),
        ("turns", pa.int32()),
        ("tool_calls", pa.int32()),
        ("tool_errors", pa.int32()),
        ("invalid_actions", pa.int32()),
        ("transcript", pa.string()),
        ("step_infos", pa.string()),
    ]
)
"""The columns of an agent evaluation: a record per episode (``completion`` is its last action,
``correct`` its success, ``score`` its return; ``transcript`` the whole chat and ``step_infos``
each step's info, as JSON; eval dirs written before ``step_infos`` existed load without it)."""


class EvalError(RlvrError, ValueError):
    """A bad evaluation input (model argument, eval directory, k list); the message names it."""


@dataclass(frozen=True)
class EvalTarget:
    """What ``rlvr eval MODEL`` evaluates.

    Attributes:
        spec: a model spec :func:`rlvr.models.load_model` accepts (a checkpoint dir for runs).
        tag: a short file-system safe name (``step_000030``, ``smollm2-135m-instruct``).
        run_dir: the run the model belongs to (a run dir or one of its checkpoints), else None.
        checkpoint: the checkpoint directory's name, if any.
        step: the checkpoint's training step, if known.
    """

    spec: str
    tag: str
    run_dir: Path | None = None
    checkpoint: str | None = None
    step: int | None = None


def _safe_tag(text: str) -> str:
    tag = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")
    return tag or "model"


def _checkpoint_step(path: Path) -> int | None:
    state = path / "state.json"
    if state.is_file():
        try:
            return int(json.loads(state.read_text())["step"])
        except (ValueError, KeyError, TypeError):
            return None
    return None


def resolve_target(model: str) -> EvalTarget:
    """Interpret ``rlvr eval``'s MODEL argument: a run directory (its latest complete checkpoint),
    a checkpoint directory (of a run or standalone), or any model spec (alias, HF directory,
    ``.gguf`` file, hub id), which is passed through for :mod:`rlvr.models` to validate. A
    path that does not exist in an existing directory (``runs/typo``) is an :class:`EvalError`
    at once rather than a hub lookup."""
    from rlvr.checkpoint import latest_checkpoint

    path = Path(model).expanduser()
    if path.is_dir() and ((path / "checkpoints").is_dir() or (path / "config.yaml").is_file()):
        found = latest_checkpoint(path)
        if found is None:
            raise EvalError(f"run {model} has no complete checkpoint")
        return EvalTarget(str(found), found.name, path, found.name, _checkpoint_step(found))
    if path.is_dir() and path.parent.name == "checkpoints":
        run = path.parent.parent
        run_dir = run if (run / "config.yaml").is_file() else None
        return EvalTarget(str(path), path.name, run_dir, path.name, _checkpoint_step(path))
    if path.exists():
        return EvalTarget(model, _safe_tag(path.stem if path.is_file() else path.name))
    if path.parent != Path(".") and path.parent.is_dir():  # a path, not a hub id: say so now
        raise EvalError(
            f"{model}: no such run, checkpoint or model directory (nothing named "
            f"{path.name!r} in {path.parent})"
        )
    return EvalTarget(model, _safe_tag(model.replace("/", "--")))


def default_out_dir(target: EvalTarget) -> Path:
    """``RUN/eval-<tag>`` for a run's checkpoint, else ``evals/<tag>``."""
    if target.run_dir is not None:
        return target.run_dir / f"eval-{target.tag}"
    return Path("evals") / target.tag


def read_run_config(run_dir: Path) -> dict[str, Any]:
    """The raw (resolved) config dict saved in ``RUN/config.yaml``, or {} if there is none."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text())
    return data if isinstance(data, dict) else {}


def parse_ks(text: str | None, n: int) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``, validated against ``n``; None -> powers of two up to n, and n."""
    from rlvr.evaluation.passk import default_ks

    if text is None or not text.strip():
        return default_ks(n)
    ks: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            k = int(part)
        except ValueError:
            raise EvalError(f"--k: {part!r} is not an integer (expected e.g. 1,2,4,8)") from None
        if not 1 <= k <= n:
            raise EvalError(f"--k: k={k} must be between 1 and n={n} (the samples per prompt)")
        ks.append(k)
    return sorted(set(ks))


def chunk_plan(n_prompts: int, n: int, max_batch: int) -> list[tuple[int, int, int]]:
    """Generation calls ``(prompt_lo, prompt_hi, samples_per_prompt)`` that together draw ``n``
    samples for every prompt with at most ``max(max_batch, 1)`` samples per call (a prompt
    whose ``n`` exceeds ``max_batch`` is split over several calls)."""
    max_batch = max(1, max_batch)
    if n <= max_batch:
        per = max(1, max_batch // n)
        return [(lo, min(lo + per, n_prompts), n) for lo in range(0, n_prompts, per)]
    plan = []
    for p in range(n_prompts):
        for done in range(0, n, max_batch):
            plan.append((p, p + 1, min(max_batch, n - done)))
    return plan


def generate_samples(
    engine: RolloutEngine,
    prompts: Sequence[list[int]],
    n: int,
    sampling: SamplingParams,
    seed: int,
    max_batch: int = 256,
    on_chunk: Callable[[int, int], None] | None = None,
) -> tuple[list[list[list[int]]], list[list[bool]]]:
    """``n`` completions per prompt, in bounded chunks (:func:`chunk_plan`).

    Args:
        seed: sample j of prompt i draws from the stream ``stream_key(seed, i, j)``
            (:mod:`rlvr.rollout.streams`), however the samples are chunked.
        on_chunk: called after every chunk with ``(samples done in it, prompts completed so
            far)``, e.g. to advance a progress bar.
    Returns:
        completion ids and finished flags, both indexed ``[prompt][sample]``.
    """
    ids: list[list[list[int]]] = [[] for _ in prompts]
    finished: list[list[bool]] = [[] for _ in prompts]
    for lo, hi, m in chunk_plan(len(prompts), n, max_batch):
        owners = torch.arange(lo, hi).repeat_interleave(m)
        done = torch.tensor([len(ids[p]) for p in range(lo, hi)]).repeat_interleave(m)
        keys = sample_keys(stream_key(seed), owners, done + torch.arange(m).repeat(hi - lo))
        rollout = engine.generate(list(prompts[lo:hi]), m, sampling, keys)
        for j in range(hi - lo):
            ids[lo + j] += rollout.completion_ids[j * m : (j + 1) * m]
            finished[lo + j] += rollout.finished[j * m : (j + 1) * m]
        if on_chunk is not None:
            on_chunk((hi - lo) * m, sum(len(f) == n for f in finished))
    return ids, finished


def score_records(
    task: Task,
    problems: Sequence[Problem],
    completions: Sequence[Sequence[str]],
    num_tokens: Sequence[Sequence[int]],
    finished: Sequence[Sequence[bool]],
    judge: Grader | None = None,
) -> list[dict[str, Any]]:
    """One record per sample (the columns of :data:`SCHEMA`), with the answer the task's check
    reads (:func:`answer_extractor`), ``score`` and ``correct`` as ``judge`` decides
    (:func:`rlvr.grading.grader.grade_samples`; default the task's check; a problem's samples
    are one group). ``completions``, ``num_tokens`` and ``finished`` are indexed
    ``[problem][sample]``."""
    extract = answer_extractor(task)
    records = [
        _record(p, problem, s, text, extract(text, problem), num_tokens[p][s], finished[p][s])
        for p, problem in enumerate(problems)
        for s, text in enumerate(completions[p])
    ]
    owners = [problems[r["problem_index"]] for r in records]
    _judge_records(judge or Grader(), task, records, owners)
    return records


def episode_records(
    task: Task, problems: Sequence[Problem], episodes: Sequence[Sequence[Any]]
) -> list[dict]:
    """One record per episode (the columns of :data:`EPISODE_SCHEMA`); ``episodes[p][s]`` is
    sample s of problem p (an :class:`rlvr.envs.episodes.Episode`), judged by its success
    (:func:`rlvr.envs.agent.succeeded`); the extracted answer is the task's reading of its last
    action (maj@k votes on it)."""
    from rlvr.envs.agent import succeeded
    from rlvr.envs.base import plain

    extract = answer_extractor(task)
    records = []
    for p, problem in enumerate(problems):
        for s, e in enumerate(episodes[p]):
            text = e.last_action
            record = _record(
                p, problem, s, text, extract(text, problem), len(e.completion_ids), not e.truncated
            )
            record.update(
                score=e.reward,
                correct=succeeded(e),
                reward=e.reward,
                turns=e.num_turns,
                tool_calls=e.tool_calls,
                tool_errors=e.tool_errors,
                invalid_actions=e.invalid_actions,
                transcript=json.dumps(e.messages, ensure_ascii=False),
                step_infos=json.dumps([plain(info) for info in e.infos], ensure_ascii=False),
            )
            records.append(record)
    return records


def _record(
    p: int,
    problem: Problem,
    s: int,
    completion: str,
    extracted: str | None,
    num_tokens: int,
    finished: bool,
) -> dict[str, Any]:
    """The :data:`SCHEMA` columns of sample ``s`` of problem ``p`` (before judging)."""
    return {
        "problem_index": p,
        "problem_id": problem.id,
        "prompt": problem.prompt,
        "answer": problem.answer,
        "sample_index": s,
        "completion": completion,
        "extracted_answer": extracted,
        "num_tokens": int(num_tokens),
        "finished": bool(finished),
        "category": problem.category,
    }


def _judge_records(
    judge: Grader, task: Task, records: list[dict[str, Any]], problems: Sequence[Problem]
) -> None:
    """Set each record's ``score`` and ``correct`` (``problems[i]``: record i's problem)."""
    scores, correct, parts = grade_samples(
        judge,
        task,
        [r["completion"] for r in records],
        problems,
        [r["num_tokens"] for r in records],
        [r["problem_index"] for r in records],
    )
    for i, (r, score, ok) in enumerate(zip(records, scores, correct, strict=True)):
        r["score"], r["correct"] = score, ok
        given = {name: values[i] for name, values in parts.items() if values[i] is not None}
        if given:  # a rubric's criteria, per sample
            r["parts"] = given


def problem_set(problems: Sequence[Problem], system_prompt: str | None) -> dict[str, Any]:
    """What identifies the evaluated problems: ``{"count", "ids", "sha256"}``, the hash taken
    over each problem's id, chat (system prompt included) and reference answer, in order. Two
    evaluations with equal ``sha256`` prompted the same problems in the same way."""
    digest = hashlib.sha256()
    for p in problems:
        item = [p.id, p.messages(system_prompt), p.answer]
        digest.update(json.dumps(item, sort_keys=True).encode() + b"\n")
    return {"count": len(problems), "ids": [p.id for p in problems], "sha256": digest.hexdigest()}


def records_to_arrays(
    records: Sequence[dict[str, Any]],
) -> tuple[np.ndarray, list[list[str | None]], np.ndarray, np.ndarray]:
    """``(correct [P, n], answers P x n, num_tokens [P, n], finished [P, n])`` from records;
    every problem must have the same number of samples."""
    by_problem: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        by_problem.setdefault(int(r["problem_index"]), []).append(r)
    if not by_problem:
        raise EvalError("no samples to score")
    rows = [sorted(by_problem[p], key=lambda r: r["sample_index"]) for p in sorted(by_problem)]
    n = len(rows[0])
    for p, row in zip(sorted(by_problem), rows, strict=True):
        if len(row) != n:
            raise EvalError(f"problem_index {p} has {len(row)} samples, expected {n}")
    correct = np.array([[bool(r["correct"]) for r in row] for row in rows])
    answers = [[r["extracted_answer"] for r in row] for row in rows]
    tokens = np.array([[int(r["num_tokens"]) for r in row] for row in rows])
    done = np.array([[bool(r["finished"]) for r in row] for row in rows])
    return correct, answers, tokens, done


def per_problem_values(out_dir: Path, metric: str) -> dict[str, float] | None:
    """``{problem_id: value}`` of a summary metric (``pass@4``, ``maj@8``, ``mean@16``,
    ``accuracy``, ``length_mean``, ...) on each problem of an eval directory, computed from its
    ``samples.parquet`` with the summary's estimator settings (so the mean over problems is the
    summary's value); None when the directory has no samples file or the metric is not one
    computed per problem (e.g. pass@k with k above the samples per problem)."""
    out_dir = Path(out_dir)
    if not (out_dir / SAMPLES_FILE).is_file():
        return None
    summary = load_summary(out_dir)
    records = load_records(out_dir)
    correct, answers, tokens, done = records_to_arrays(records)
    n = correct.shape[1]
    name = f"mean@{n}" if metric == "accuracy" else metric
    kind, _, k = name.partition("@")
    ks = [int(k)] if kind in ("pass", "maj") and k.isdigit() and 1 <= int(k) <= n else []
    estimators = summary.get("estimators", {})
    values = problem_metrics(
        correct,
        answers,
        tokens,
        done,
        ks,
        n_subsets=int(estimators.get("maj_subsets", 1000)),
        seed=int(estimators.get("seed", 0)),
    )
    if name not in values:
        return None
    ids = {int(r["problem_index"]): r["problem_id"] for r in records}
    return {ids[p]: float(v) for p, v in zip(sorted(ids), values[name], strict=True)}


def _episode_means(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Means over an agent evaluation's episodes: success is ``accuracy``; these add the return
    and :func:`rlvr.envs.agent.tool_means`."""
    from rlvr.envs.agent import tool_means

    keys = ("reward", "turns", "tool_calls", "tool_errors", "invalid_actions")
    total = {k: sum(float(r[k]) for r in records) for k in keys}
    means = tool_means(
        len(records),
        total["turns"],
        total["tool_calls"],
        total["tool_errors"],
        total["invalid_actions"],
    )
    return {"reward_mean": total["reward"] / len(records), **means}


def compute_summary_metrics(
    records: Sequence[dict[str, Any]],
    ks: Sequence[int],
    confidence: float = 0.95,
    bootstrap_reps: int = 1000,
    maj_subsets: int = 1000,
    seed: int = 0,
    by_category: bool = True,
) -> dict[str, Any]:
    """Metrics averaged over problems, with percentile-bootstrap intervals over problems.

    Returns:
        ``{"n", "ks", "n_prompts", "metrics": {name: value}, "ci": {name: [low, high]},
        "estimators": {...}}``; metric names as in :func:`rlvr.evaluation.passk.problem_metrics`,
        plus ``accuracy`` (= ``mean@n``, the accuracy of one sample). When the records carry
        categories (and ``by_category``), also ``"by_category": {category: {"n_prompts",
        "metrics", "ci"}}``, the same estimators on each category's problems.
    """
    correct, answers, tokens, done = records_to_arrays(records)
    n = correct.shape[1]
    bad = [k for k in ks if not 1 <= k <= n]
    if bad:
        raise EvalError(f"--k: {bad} outside 1..n={n} (the samples per prompt)")
    per_problem = problem_metrics(
        correct, answers, tokens, done, ks, n_subsets=maj_subsets, seed=seed
    )
    metrics = {name: float(v.mean()) for name, v in per_problem.items()}
    metrics["accuracy"] = metrics[f"mean@{n}"]
    if records and "turns" in records[0]:  # agent episodes
        metrics.update(_episode_means(records))
    ci = {
        name: list(bootstrap_mean_ci(v, reps=bootstrap_reps, confidence=confidence, seed=seed))
        for name, v in per_problem.items()
    }
    categories = list(dict.fromkeys(r.get("category") or "" for r in records))
    per_category = {}
    if by_category and categories != [""]:
        for category in categories:
            part = compute_summary_metrics(
                [r for r in records if (r.get("category") or "") == category],
                ks,
                confidence,
                bootstrap_reps,
                maj_subsets,
                seed,
                by_category=False,
            )
            per_category[category] = {k: part[k] for k in ("n_prompts", "metrics", "ci")}
    return {
        **({"by_category": per_category} if per_category else {}),
        "n": n,
        "ks": list(ks),
        "n_prompts": correct.shape[0],
        "n_samples": int(correct.size),
        "metrics": metrics,
        "ci": ci,
        "confidence": confidence,
        "estimators": {
            "seed": seed,
            "bootstrap_reps": bootstrap_reps,
            "maj_subsets": maj_subsets,
            "pass@k": "unbiased 1 - C(n-c,k)/C(n,k) (Chen et al. 2021), product form",
            "maj@k": f"majority vote over k-subsets: exact over all C(n,k) subsets if at most "
            f"{maj_subsets}, else {maj_subsets} seeded random subsets; ties split evenly",
            "ci": f"percentile bootstrap over problems, {bootstrap_reps} resamples",
            "answer_entropy": "nats, empirical distribution of normalised extracted answers",
        },
    }


def _write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def save_eval(out_dir: Path, records: Sequence[dict[str, Any]], summary: dict[str, Any]) -> None:
    """Write ``samples.parquet`` and ``summary.json`` into ``out_dir`` (created)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    episodes = bool(records) and "transcript" in records[0]
    table = pa.Table.from_pylist(list(records), schema=EPISODE_SCHEMA if episodes else SCHEMA)
    _write_atomically(out_dir / SAMPLES_FILE, lambda p: pq.write_table(table, p))
    text = json.dumps(summary, indent=2) + "\n"
    _write_atomically(out_dir / SUMMARY_FILE, lambda p: p.write_text(text))


def load_summary(out_dir: Path) -> dict[str, Any]:
    """``summary.json`` of an eval directory; an :class:`EvalError` naming it otherwise."""
    path = Path(out_dir) / SUMMARY_FILE
    if not path.is_file():
        raise EvalError(f"{out_dir} is not an eval directory (no {SUMMARY_FILE})")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise EvalError(f"{path}: invalid JSON ({err})") from None
    if not isinstance(data, dict) or "metrics" not in data:
        raise EvalError(f"{path}: not an rlvr eval summary (no 'metrics')")
    return data


def load_records(out_dir: Path) -> list[dict[str, Any]]:
    """The rows of ``samples.parquet``; an :class:`EvalError` naming a missing file/column."""
    path = Path(out_dir) / SAMPLES_FILE
    if not path.is_file():
        raise EvalError(f"{out_dir} is not an eval directory (no {SAMPLES_FILE})")
    table = pq.read_table(path)
    missing = [name for name in SCHEMA.names if name not in table.column_names]
    if missing:
        raise EvalError(f"{path}: missing columns {missing}")
    names = (EPISODE_SCHEMA if "transcript" in table.column_names else SCHEMA).names
    return table.select([n for n in names if n in table.column_names]).to_pylist()


def build_eval_task(section: Any) -> Task:
    """``rlvr.data.build_task(section)`` (``section`` a validated ``TaskConfig``), its plain
    errors (missing file, bad option, missing package) re-raised as a :class:`DataError` naming
    the task."""
    from rlvr.data import build_task

    try:
        return build_task(section)
    except RlvrError:
        raise
    except (ValueError, OSError, ImportError) as err:
        raise DataError(f"task {section.name}: {err}") from None


def rescore(
    out_dir: Path,
    task: Task | None = None,
    ks: Sequence[int] | None = None,
    confidence: float | None = None,
) -> tuple[dict[str, Any], int]:
    """Recompute an eval directory's scores and metrics from its stored completions.

    Every completion is re-judged with the judge the summary records (``"judge"``; the task's
    check for summaries without one, or the reward rebuilt from its recorded ``reward``
    section: :mod:`rlvr.grading.grader`), ``task`` defaulting to the one rebuilt from the
    summary's task section, and its answer re-extracted (:func:`answer_extractor`); both files
    are rewritten. The metrics are recomputed for the summary's ``ks`` and the new ``ks``
    together, so no earlier pass@k / maj@k is dropped or left stale; a metric this version does
    not compute (e.g. from another rlvr version) is kept and listed under ``"not_rescored"``.

    Returns:
        ``(summary, number of samples whose score changed)``.
    """
    from rlvr.config import build_config

    summary = load_summary(out_dir)
    records = load_records(out_dir)
    judged = summary.get("judge") or {"name": "task"}
    cfg = build_config(
        {
            **({} if task is not None else {"task": summary.get("task", {})}),
            "reward": judged.get("reward") or {},
            "eval": {"judge": judged["name"], "reward_threshold": judged.get("threshold", 1.0)},
        }
    )
    if task is None:
        task = build_eval_task(cfg.task)
    extract = answer_extractor(task)
    problems = [
        Problem(r["problem_id"], r["prompt"], r["answer"], r["category"] or "") for r in records
    ]
    before = [r["score"] for r in records]
    judge = build_grader(cfg, task)
    try:
        _judge_records(judge, task, records, problems)
    finally:
        judge.close()
    changed = sum(r["score"] != old for r, old in zip(records, before, strict=True))
    for r, problem in zip(records, problems, strict=True):
        r["extracted_answer"] = extract(r["completion"], problem)
    estimators = summary.get("estimators", {})
    old_ks = [int(k) for k in summary.get("ks", [1])]
    metrics = compute_summary_metrics(
        records,
        sorted(set(old_ks) | set(ks if ks is not None else [])),
        confidence=confidence if confidence is not None else summary.get("confidence", 0.95),
        bootstrap_reps=int(estimators.get("bootstrap_reps", 1000)),
        maj_subsets=int(estimators.get("maj_subsets", 1000)),
        seed=int(estimators.get("seed", 0)),
    )
    kept = sorted(set(summary["metrics"]) - set(metrics["metrics"]))
    for name in kept:
        metrics["metrics"][name] = summary["metrics"][name]
        if name in summary.get("ci", {}):
            metrics["ci"][name] = summary["ci"][name]
    summary.pop("by_category", None)  # recomputed from the records' categories, if any
    summary.pop("not_rescored", None)
    summary.update(metrics)
    if kept:
        summary["not_rescored"] = kept
    summary["rescored"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    save_eval(out_dir, records, summary)
    return summary, changed
