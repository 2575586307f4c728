"""Held-out accuracy of a policy on a task: greedy and sampled."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlvr.data import Problem, Task
from rlvr.rollout import RolloutEngine, SamplingParams


def evaluate_accuracy(
    engine: RolloutEngine,
    task: Task,
    problems: list[Problem],
    encode: Callable[[Problem], list[int]],
    decode: Callable[[list[int]], str],
    sampling: SamplingParams,
    seed: int = 1234,
) -> dict[str, float]:
    """Fraction of ``problems`` whose single completion the task scores as correct.

    Args:
        encode: problem -> prompt token ids (chat template applied).
        decode: completion token ids -> text.
        sampling: temperature 0 for greedy accuracy, > 0 for sampled accuracy.
        seed: seeds a private generator, so evaluation never moves the training RNG.
    Returns:
        ``{"accuracy", "length_mean", "truncated_frac", "n"}`` (``n``: problems scored, for
        confidence intervals), plus ``"accuracy/<category>"`` for each
        category when the problems have one (a task with ``task.levels``).
    """
    generator = torch.Generator().manual_seed(seed)
    rollout = engine.generate([encode(p) for p in problems], 1, sampling, generator)
    scores = [
        task.score(decode(ids), problem)
        for ids, problem in zip(rollout.completion_ids, problems, strict=True)
    ]
    n = max(len(problems), 1)
    out = {
        "accuracy": sum(s >= 1.0 for s in scores) / n,
        "length_mean": sum(len(c) for c in rollout.completion_ids) / n,
        "truncated_frac": sum(not f for f in rollout.finished) / n,
        "n": float(len(problems)),
    }
    by_category: dict[str, list[float]] = {}
    for problem, s in zip(problems, scores, strict=True):
        if problem.category:
            by_category.setdefault(problem.category, []).append(s >= 1.0)
    for category, correct in by_category.items():
        out[f"accuracy/{category}"] = sum(correct) / len(correct)
    return out
