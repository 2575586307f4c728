"""Held-out accuracy of a policy on a task (greedy and sampled), as ``eval.judge`` decides."""

from __future__ import annotations

from collections.abc import Callable

from rlvr.data import Problem, Task
from rlvr.evaluation.judge import Judge, judge_samples
from rlvr.rollout import RolloutEngine, SamplingParams
from rlvr.rollout.streams import group_keys, stream_key


def evaluate_accuracy(
    engine: RolloutEngine,
    task: Task,
    problems: list[Problem],
    encode: Callable[[Problem], list[int]],
    decode: Callable[[list[int]], str],
    sampling: SamplingParams,
    seed: int = 1234,
    judge: Judge | None = None,
) -> dict[str, float]:
    """Fraction of ``problems`` whose single completion ``judge`` calls correct.

    Args:
        encode: problem -> prompt token ids (chat template applied).
        decode: completion token ids -> text.
        sampling: temperature 0 for greedy accuracy, > 0 for sampled accuracy.
        seed: names the samples' random streams (:mod:`rlvr.rollout.streams`), so evaluation
            never moves the training RNG and samples the same wherever it runs.
        judge: who decides correctness (:mod:`rlvr.evaluation.judge`); default the task's
            own answer check. Each problem's completion is its own group.
    Returns:
        ``{"accuracy", "length_mean", "truncated_frac", "n"}`` (``n``: problems scored, for
        confidence intervals), plus ``"accuracy/<category>"`` for each
        category when the problems have one (a task with ``task.levels``), and with the
        reward judge ``"reward_mean"``, the mean reward of the completions.
    """
    judge = judge or Judge()
    keys = group_keys(stream_key(seed), len(problems), 1)
    rollout = engine.generate([encode(p) for p in problems], 1, sampling, keys)
    scores, correct = judge_samples(
        judge,
        task,
        [decode(ids) for ids in rollout.completion_ids],
        problems,
        [len(ids) for ids in rollout.completion_ids],
        range(len(problems)),
    )
    n = max(len(problems), 1)
    out = {
        "accuracy": sum(correct) / n,
        "length_mean": sum(len(c) for c in rollout.completion_ids) / n,
        "truncated_frac": sum(not f for f in rollout.finished) / n,
        "n": float(len(problems)),
    }
    if judge.name == "reward":
        out["reward_mean"] = sum(scores) / n
    by_category: dict[str, list[bool]] = {}
    for problem, ok in zip(problems, correct, strict=True):
        if problem.category:
            by_category.setdefault(problem.category, []).append(ok)
    for category, flags in by_category.items():
        out[f"accuracy/{category}"] = sum(flags) / len(flags)
    return out
