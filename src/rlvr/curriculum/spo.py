"""Single-stream policy optimisation's per-prompt value tracker (Xu and Ding 2025,
"Single-stream Policy Optimization", arXiv:2509.13232).

GRPO needs a group of G samples per prompt to form its baseline. SPO samples one (or a few)
and keeps, per prompt, a running Beta estimate of its success probability across visits:

    p^(x) = alpha(x) / (alpha(x) + beta(x)),
    after a visit with rewards r_1..r_n:  alpha <- rho alpha + sum_i r_i,
                                         beta  <- rho beta + sum_i (1 - r_i)

(n = 1 in the paper), starting from alpha = beta = ``prior`` (the paper's 0.5 without offline
samples) and forgetting old visits at rate rho. The advantage of a sample is r - p^(x), read
before the update, then normalised over the whole batch (:func:`rlvr.algorithms.spo`, the
``spo`` advantage). This sampler walks the task's stream like ``sequential`` and holds the
tracker; its state (the per-prompt alpha, beta) is checkpointed, so a resumed run continues
with the same baselines. rho is the paper's constant option (0.875); its KL-adaptive rho and its
prioritised prompt sampling are not built. Rewards are clamped to [0, 1].
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.curriculum.base import register_curriculum
from rlvr.data.base import Problem, Task


def beta_track(alpha: float, beta: float, rewards: list[float], rho: float) -> tuple[float, float]:
    """One visit's update: (rho alpha + sum r, rho beta + sum (1 - r)), r clamped to [0, 1]."""
    clamped = [min(max(r, 0.0), 1.0) for r in rewards]
    return rho * alpha + sum(clamped), rho * beta + sum(1 - r for r in clamped)


@register_curriculum("spo", "the task's stream, with SPO's per-prompt Beta value tracker")
class SPOTracker:
    """The task's stream with a persistent per-prompt baseline (see the module docstring).

    Args:
        task: the task whose ``train_problem(i)`` stream is walked.
        seed: unused.
        rho: the forgetting factor in (0, 1].
        prior: alpha = beta of a prompt never seen (> 0).
    """

    name = "spo"

    def __init__(self, task: Task, seed: int = 0, rho: float = 0.875, prior: float = 0.5) -> None:
        if not (0 < rho <= 1 and prior > 0):
            raise ValueError(f"spo needs 0 < rho <= 1 and prior > 0, got {rho}, {prior}")
        self.task, self.rho, self.prior = task, rho, prior
        self.position = 0
        self.values: dict[str, tuple[float, float]] = {}  # problem id -> (alpha, beta)

    def draw(self, n: int) -> list[Problem]:
        problems = [self.task.train_problem(self.position + i) for i in range(n)]
        self.position += n
        return problems

    def baselines(self, problems: list[Problem]) -> list[float]:
        """p^ = alpha / (alpha + beta) of each problem, before this visit's update."""
        out = []
        for problem in problems:
            alpha, beta = self.values.get(problem.id, (self.prior, self.prior))
            out.append(alpha / (alpha + beta))
        return out

    def update(
        self, problems: list[Problem], rewards: torch.Tensor, group_ids: torch.Tensor
    ) -> None:
        for g, problem in enumerate(problems):
            visit = rewards[group_ids == g].tolist()
            if visit:
                alpha, beta = self.values.get(problem.id, (self.prior, self.prior))
                self.values[problem.id] = beta_track(alpha, beta, visit, self.rho)

    def metrics(self) -> dict[str, float]:
        return {"curriculum/tracked_prompts": float(len(self.values))}

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "values": {k: list(v) for k, v in self.values.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])
        self.values = {k: (float(a), float(b)) for k, (a, b) in state["values"].items()}
