"""Curricula: which training problems each step sees (the prompt sampler of the loop in docs/design.md).

* ``sequential``: the task's own stream in order (default).
* ``sec``: Self-Evolving Curriculum (Chen et al. 2025), a TD(0) bandit over categories with
  Boltzmann sampling (:mod:`rlvr.curriculum.sec`).
* ``dump``: DUMP (Wang et al. 2025), UCB over each category's expected absolute advantage in a
  sliding window (:mod:`rlvr.curriculum.dump`).
* ``saturation``: the stream without the problems already solved (:mod:`rlvr.curriculum.saturation`).
* ``vcrl``: the stream refilled from a bank of high reward-variance prompts (VCRL,
  :mod:`rlvr.curriculum.vcrl`).
* ``knapsack``: the stream, each prompt's group size from its last pass rate (Knapsack RL,
  :mod:`rlvr.curriculum.knapsack`).
* ``spo``: the stream with SPO's per-prompt Beta value tracker, the baseline of the ``spo``
  advantage (:mod:`rlvr.curriculum.spo`).

The category curricula need a task with categories: ``task.levels: [1, 2, 3, 4]`` makes one
category per difficulty level (:class:`rlvr.data.MixtureTask`).
"""

from __future__ import annotations

from typing import Any

from rlvr.curriculum.base import (
    CURRICULA,
    Curriculum,
    PromptSampler,
    absolute_advantage,
    per_category,
    register_curriculum,
)
from rlvr.curriculum.categories import CategorySampler, softmax
from rlvr.curriculum.dump import DUMP, ucb_scores
from rlvr.curriculum.knapsack import KnapsackBudget, knapsack_sizes
from rlvr.curriculum.saturation import SaturationMemory
from rlvr.curriculum.sec import SEC, td0_update
from rlvr.curriculum.sequential import Sequential
from rlvr.curriculum.spo import SPOTracker
from rlvr.curriculum.vcrl import VarianceBank
from rlvr.data.base import Task


def make_sampler(name: str, task: Task, seed: int = 0, **params: Any) -> PromptSampler:
    """The sampler registered as ``name`` (:data:`CURRICULA`) over ``task``; ``params`` go to
    its factory (sec: alpha, temperature; dump: window, exploration, temperature)."""
    return CURRICULA.get_or_raise(name).make(task, seed, **params)


__all__ = [
    "CURRICULA",
    "DUMP",
    "KnapsackBudget",
    "SEC",
    "CategorySampler",
    "Curriculum",
    "PromptSampler",
    "SPOTracker",
    "SaturationMemory",
    "Sequential",
    "VarianceBank",
    "absolute_advantage",
    "knapsack_sizes",
    "make_sampler",
    "per_category",
    "register_curriculum",
    "softmax",
    "td0_update",
    "ucb_scores",
]
