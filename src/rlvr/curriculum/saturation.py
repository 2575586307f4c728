"""A memory of saturated prompts: problems the policy has solved are not drawn again.

DAPO's dynamic sampling (Yu et al. 2025, arXiv:2503.14476) drops a group whose pass rate is 0
or 1 from the batch it was sampled for; the balanced pass-rate band (Bae et al. 2025,
arXiv:2504.03380; ``group_selector: pass_rate``) generalises it to any band [low, high]. Both
forget: a prompt solved every time is sampled again at its next epoch, costing a group of
rollouts that trains nothing. Polaris and Skywork-OR1 (He et al. 2025, arXiv:2505.22312, Sec.
3.2.2) remove such prompts from the pool for good. This sampler walks the task's stream and
remembers every problem whose group reached a pass rate >= ``high`` on ``patience`` visits in a
row; a remembered problem is skipped wherever the stream brings it back. Pair it with the
in-batch band (``group_selector: pass_rate``) for both halves.

The memory is the sampler's checkpointed state (JSON), so a resumed run skips what the
uninterrupted one would.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.curriculum.base import register_curriculum
from rlvr.data.base import Problem, Task


def group_pass_rates(
    rewards: torch.Tensor, group_ids: torch.Tensor, threshold: float, groups: int
) -> list[float]:
    """Pass rate of each of ``groups`` groups: |{i in g : r_i >= threshold}| / |g| (0 for a
    group with no sample)."""
    passed = torch.zeros(groups).index_add_(0, group_ids, (rewards >= threshold).float())
    count = torch.zeros(groups).index_add_(
        0, group_ids, torch.ones_like(rewards, dtype=torch.float)
    )
    return (passed / count.clamp_min(1)).tolist()


@register_curriculum(
    "saturation",
    "the task's stream, skipping problems solved at pass rate >= high (Polaris / Skywork-OR1)",
)
class SaturationMemory:
    """The task's stream without its saturated problems (see the module docstring).

    Args:
        task: the task whose ``train_problem(i)`` stream is walked.
        seed: unused (the stream is already seeded).
        high: the pass rate from which a group counts as saturated (1.0: every sample passed).
        threshold: the least reward that counts as a pass.
        patience: saturated visits in a row before a problem is remembered.
        max_skips: consecutive remembered problems after which the stream counts as used up (an
            error, not an endless loop).
    """

    name = "saturation"

    def __init__(
        self,
        task: Task,
        seed: int = 0,
        high: float = 1.0,
        threshold: float = 1.0,
        patience: int = 1,
        max_skips: int = 100_000,
    ) -> None:
        if not 0 < high <= 1 or patience < 1 or max_skips < 1:
            raise ValueError(
                f"saturation needs 0 < high <= 1, patience >= 1, max_skips >= 1; got {high}, "
                f"{patience}, {max_skips}"
            )
        self.task, self.high, self.threshold = task, high, threshold
        self.patience, self.max_skips = patience, max_skips
        self.position = 0
        self.streaks: dict[str, int] = {}  # saturated visits in a row, per problem id
        self.saturated: set[str] = set()
        self.skipped = 0  # remembered problems passed over by the last draw

    def draw(self, n: int) -> list[Problem]:
        problems: list[Problem] = []
        self.skipped, run = 0, 0
        while len(problems) < n:
            problem = self.task.train_problem(self.position)
            self.position += 1
            if problem.id in self.saturated:
                self.skipped, run = self.skipped + 1, run + 1
                if run >= self.max_skips:
                    raise RuntimeError(
                        f"curriculum saturation: {run} problems in a row were solved before "
                        f"({len(self.saturated)} remembered): the task's stream is used up; "
                        "raise curriculum.params.high or patience"
                    )
                continue
            run = 0
            problems.append(problem)
        return problems

    def update(
        self, problems: list[Problem], rewards: torch.Tensor, group_ids: torch.Tensor
    ) -> None:
        rates = group_pass_rates(rewards, group_ids, self.threshold, len(problems))
        for problem, rate in zip(problems, rates, strict=True):
            if rate >= self.high:
                self.streaks[problem.id] = self.streaks.get(problem.id, 0) + 1
                if self.streaks[problem.id] >= self.patience:
                    self.saturated.add(problem.id)
                    del self.streaks[problem.id]
            else:
                self.streaks.pop(problem.id, None)

    def metrics(self) -> dict[str, float]:
        return {
            "curriculum/saturated": float(len(self.saturated)),
            "curriculum/skipped": float(self.skipped),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "streaks": dict(self.streaks),
            "saturated": sorted(self.saturated),
            "skipped": self.skipped,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])
        self.streaks = {str(k): int(v) for k, v in state["streaks"].items()}
        self.saturated = set(state["saturated"])
        self.skipped = int(state["skipped"])
