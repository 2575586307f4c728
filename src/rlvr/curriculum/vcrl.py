"""VCRL's memory bank: replay the prompts whose samples disagreed most (Jiang et al. 2025,
"VCRL: Variance-based Curriculum Reinforcement Learning for Large Language Models",
arXiv:2509.19803).

VCRL reads a prompt's difficulty for the current policy off the variance of its group's
rewards: p = s^2 / s_max^2 (:func:`rlvr.algorithms.normalized_variance`) is 1 at pass rate 1/2
and 0 for a prompt always or never solved. It trains on the high-variance groups (the
``variance`` group selector drops groups with p < kappa from the batch) and keeps the
high-variance prompts in a memory bank, from which it refills later batches instead of drawing
fresh prompts of unknown difficulty.

This sampler is the bank: after each draw, every prompt with p >= ``kappa`` enters it (at most
``bank_size``, the lowest p leaving first); each draw takes ``replay_frac`` of its prompts from
the bank, highest p first (then the oldest), and the rest from the task's stream. A replayed
prompt leaves the bank and enters it again if it still scores p >= kappa. The bank holds the
prompts' stream positions, so the state is JSON and a resume draws what the uninterrupted run
would. Use it with ``group_selector: variance`` (and ``max_draws`` > 1 to refill).
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.algorithms.filters import normalized_variance
from rlvr.curriculum.base import register_curriculum
from rlvr.data.base import Problem, Task


@register_curriculum(
    "vcrl", "the task's stream, refilled from a bank of high reward-variance prompts (VCRL)"
)
class VarianceBank:
    """VCRL's memory bank over the task's stream (see the module docstring).

    Args:
        task: the task whose ``train_problem(i)`` stream is walked.
        seed: unused (the stream is already seeded).
        kappa: the normalised variance from which a prompt enters the bank (0 < kappa <= 1).
        replay_frac: the share of each draw taken from the bank, in [0, 1].
        bank_size: the most prompts the bank holds.
    """

    name = "vcrl"

    def __init__(
        self,
        task: Task,
        seed: int = 0,
        kappa: float = 0.5,
        replay_frac: float = 0.5,
        bank_size: int = 256,
    ) -> None:
        if not (0 < kappa <= 1 and 0 <= replay_frac <= 1 and bank_size >= 1):
            raise ValueError(
                f"vcrl needs 0 < kappa <= 1, 0 <= replay_frac <= 1, bank_size >= 1; got {kappa}, "
                f"{replay_frac}, {bank_size}"
            )
        self.task, self.kappa, self.replay_frac, self.bank_size = (
            task,
            kappa,
            replay_frac,
            bank_size,
        )
        self.position = 0
        self.clock = 0  # draws so far: a bank entry's age
        self.bank: list[tuple[int, float, int]] = []  # (stream position, p, draw it entered)
        self.drawn: list[int] = []  # the stream positions of the last draw's problems
        self.replayed = 0

    def draw(self, n: int) -> list[Problem]:
        self.bank.sort(key=lambda entry: (-entry[1], entry[2], entry[0]))  # highest p, oldest
        take = min(len(self.bank), round(self.replay_frac * n))
        replays, self.bank = self.bank[:take], self.bank[take:]
        fresh = list(range(self.position, self.position + n - take))
        self.position += n - take
        self.drawn = [entry[0] for entry in replays] + fresh
        self.replayed = take
        self.clock += 1
        return [self.task.train_problem(i) for i in self.drawn]

    def update(
        self, problems: list[Problem], rewards: torch.Tensor, group_ids: torch.Tensor
    ) -> None:
        if len(problems) != len(self.drawn):
            raise ValueError("vcrl: update() must follow the draw() of its problems")
        present = torch.unique(group_ids).tolist()  # the groups scored, ascending
        scores = normalized_variance(rewards.float(), group_ids).tolist()
        held = {entry[0] for entry in self.bank}
        for group, p in zip(present, scores, strict=True):
            index = self.drawn[group]
            if p >= self.kappa and index not in held:
                self.bank.append((index, p, self.clock))
                held.add(index)
        self.bank.sort(key=lambda entry: (-entry[1], entry[2], entry[0]))
        del self.bank[self.bank_size :]  # the lowest p leave a full bank

    def metrics(self) -> dict[str, float]:
        return {
            "curriculum/bank": float(len(self.bank)),
            "curriculum/replayed": float(self.replayed),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "clock": self.clock,
            "bank": [list(entry) for entry in self.bank],
            "drawn": list(self.drawn),
            "replayed": self.replayed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position, self.clock = int(state["position"]), int(state["clock"])
        self.bank = [(int(i), float(p), int(t)) for i, p, t in state["bank"]]
        self.drawn = [int(i) for i in state["drawn"]]
        self.replayed = int(state["replayed"])
