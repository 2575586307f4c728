"""The task's own stream, in order: problem i, i+1, ... (no curriculum; the default)."""

from __future__ import annotations

from typing import Any

import torch

from rlvr.curriculum.base import register_curriculum
from rlvr.data.base import Problem, Task


class Sequential:
    """Walks ``task.train_problem(0), (1), ...``; its state is the position of the next one."""

    name = "sequential"

    def __init__(self, task: Task) -> None:
        self.task = task
        self.position = 0

    def draw(self, n: int) -> list[Problem]:
        problems = [self.task.train_problem(self.position + i) for i in range(n)]
        self.position += n
        return problems

    def update(
        self, problems: list[Problem], rewards: torch.Tensor, group_ids: torch.Tensor
    ) -> None:
        """Nothing to learn: the order is fixed."""

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])


@register_curriculum("sequential", "the task's problems in order (no curriculum)")
def sequential(task: Task, seed: int = 0) -> Sequential:
    """The task's stream in order; ``seed`` is unused (the task's order is already seeded)."""
    return Sequential(task)
