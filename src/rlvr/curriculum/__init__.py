"""Curricula: which training problems each step sees (the prompt sampler of the loop in docs/design.md).

* ``sequential``: the task's own stream in order (default).
* ``sec``: Self-Evolving Curriculum (Chen et al. 2025), a TD(0) bandit over categories with
  Boltzmann sampling (:mod:`rlvr.curriculum.sec`).
* ``dump``: DUMP (Wang et al. 2025), UCB over each category's expected absolute advantage in a
  sliding window (:mod:`rlvr.curriculum.dump`).

The category curricula need a task with categories: ``task.levels: [1, 2, 3, 4]`` makes one
category per difficulty level (:class:`rlvr.data.MixtureTask`).
"""

from __future__ import annotations

from typing import Any

from rlvr.curriculum.base import PromptSampler, absolute_advantage, per_category
from rlvr.curriculum.categories import CategorySampler, softmax
from rlvr.curriculum.dump import DUMP, ucb_scores
from rlvr.curriculum.sec import SEC, td0_update
from rlvr.curriculum.sequential import Sequential
from rlvr.data.base import Task

SAMPLERS: dict[str, str] = {
    "sequential": "the task's problems in order (no curriculum)",
    "sec": "Self-Evolving Curriculum: TD(0) bandit over categories, Boltzmann sampling "
    "(Chen et al. 2025)",
    "dump": "DUMP: UCB over each category's mean absolute advantage (Wang et al. 2025)",
}


def make_sampler(name: str, task: Task, seed: int = 0, **params: Any) -> PromptSampler:
    """The sampler ``name`` (a key of :data:`SAMPLERS`) over ``task``; ``params`` go to its
    constructor (sec: alpha, temperature; dump: window, exploration, temperature)."""
    if name == "sequential":
        return Sequential(task)
    if name == "sec":
        return SEC(task, seed, **params)
    if name == "dump":
        return DUMP(task, seed, **params)
    raise ValueError(f"unknown curriculum {name!r}; accepted: {', '.join(SAMPLERS)}")


__all__ = [
    "DUMP",
    "SAMPLERS",
    "SEC",
    "CategorySampler",
    "PromptSampler",
    "Sequential",
    "absolute_advantage",
    "make_sampler",
    "per_category",
    "softmax",
    "td0_update",
    "ucb_scores",
]
