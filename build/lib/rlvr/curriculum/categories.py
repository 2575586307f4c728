"""Distribution-level curricula: choose a category for every problem, then its next problem.

The machinery SEC and DUMP share. A subclass says how likely each category is
(:meth:`CategorySampler.probabilities`) and how it learns from the absolute advantages of the
samples of each category (:meth:`CategorySampler.learn`). Each category walks its own stream of
problems (``task.category_problem(c, 0), (c, 1), ...``), and each draw's random choices come
from a generator seeded by (seed, sampler name, draw number), so the state is a handful of
numbers and a resumed run draws exactly what an uninterrupted one would.
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from typing import Any

import torch

from rlvr.curriculum.base import absolute_advantage, per_category
from rlvr.data.base import CategorizedTask, Problem


def softmax(scores: list[float], temperature: float) -> list[float]:
    """softmax(scores / temperature); arms scored +inf share all the mass equally."""
    if any(math.isinf(s) and s > 0 for s in scores):
        top = [1.0 if math.isinf(s) and s > 0 else 0.0 for s in scores]
        return [t / sum(top) for t in top]
    peak = max(scores)
    weights = [math.exp((s - peak) / temperature) for s in scores]
    return [w / sum(weights) for w in weights]


class CategorySampler(ABC):
    """Base of the category bandits (see the module docstring).

    Args:
        task: a task with categories (:class:`~rlvr.data.MixtureTask`, e.g. ``task.levels``).
        seed: seeds the draws.
    """

    name = "categories"

    def __init__(self, task: CategorizedTask, seed: int = 0) -> None:
        categories = getattr(task, "categories", ())
        if len(categories) < 2:
            raise ValueError(
                f"curriculum {self.name!r} chooses between categories of problems, but task "
                f"{task.name!r} has {len(categories)}: give it several (task.levels: [1, 2, 3], "
                "or a file task's task.category_column)"
            )
        self.task = task
        self.categories: tuple[str, ...] = tuple(categories)
        self.seed = seed
        self.positions = [0] * len(categories)  # next problem of each category
        self.draws = 0

    @abstractmethod
    def probabilities(self) -> list[float]:
        """Probability of each category for the next draw."""

    @abstractmethod
    def values(self) -> list[float]:
        """Each category's learnability estimate (logged as curriculum/value/<category>)."""

    @abstractmethod
    def learn(self, advantages: dict[int, list[float]]) -> None:
        """Absorb the absolute advantages of a draw's samples, by category index."""

    def draw(self, n: int) -> list[Problem]:
        rng = random.Random(f"{self.seed}-{self.name}-{self.draws}")
        self.draws += 1
        chosen = rng.choices(range(len(self.categories)), weights=self.probabilities(), k=n)
        problems = []
        for c in chosen:
            problems.append(self.task.category_problem(c, self.positions[c]))
            self.positions[c] += 1
        return problems

    def update(
        self, problems: list[Problem], rewards: torch.Tensor, group_ids: torch.Tensor
    ) -> None:
        advantages = per_category(problems, absolute_advantage(rewards, group_ids), group_ids)
        self.learn({self.categories.index(c): a for c, a in advantages.items()})

    def metrics(self) -> dict[str, float]:
        """Each category's probability for the next draw and its learnability estimate."""
        out: dict[str, float] = {}
        for name, p, v in zip(self.categories, self.probabilities(), self.values(), strict=True):
            out[f"curriculum/prob/{name}"] = p
            out[f"curriculum/value/{name}"] = v
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"positions": list(self.positions), "draws": self.draws}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["positions"]) != len(self.categories):
            raise ValueError(
                f"checkpointed curriculum has {len(state['positions'])} categories, the task has "
                f"{len(self.categories)}"
            )
        self.positions = [int(p) for p in state["positions"]]
        self.draws = int(state["draws"])
