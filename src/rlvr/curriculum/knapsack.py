"""Knapsack allocation of the rollout budget: each prompt's group size from its past pass rate
(Li et al. 2025, "Knapsack RL: Unlocking Exploration of LLMs via Optimizing Budget
Allocation", arXiv:2509.25849).

A uniform G per prompt wastes rollouts on prompts the policy always or never solves (their
groups train nothing) and gives too few to the prompts at the edge of its ability, whose
groups need many samples to contain both a success and a failure. Knapsack RL treats each
prompt as an item whose value grows with its budget N,

    v(N, p) = (1 - p^N - (1 - p)^N) p (1 - p)^2

(the probability that N samples are not all alike, times the information of a prompt of pass
rate p), and solves the knapsack of the step's total budget P G exactly. This sampler walks the
task's stream, remembers each prompt's pass rate at its last visit, and sizes each draw's
groups (``group_sizes``):

- a prompt never seen gets G;
- a prompt last seen at p = 0 or 1 gets ``min_size`` (its value is 0);
- the others start at ``min_size`` and share the rest of the budget by the exact knapsack
  (dynamic programming over the extra samples, at most ``max_size`` each; ties: fewer);
- budget left when every such prompt is at ``max_size`` goes to the p = 0 prompts first (the
  hardest: exploration, as in the paper's code), then to any prompt below ``max_size``.

The collector plays each size's prompts together (:meth:`rlvr.trainer.collect.Collector`);
group-baseline advantages handle groups of different sizes. The pass rates are the sampler's
checkpointed state. They matter where the stream revisits prompts (a dataset over epochs).
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.curriculum.base import register_curriculum
from rlvr.curriculum.saturation import group_pass_rates
from rlvr.data.base import Problem, Task


def knapsack_value(size: int, p: float) -> float:
    """v(N, p) = (1 - p^N - (1 - p)^N) p (1 - p)^2."""
    return (1 - p**size - (1 - p) ** size) * p * (1 - p) ** 2


def knapsack_sizes(
    rates: list[float | None], n: int, min_size: int = 2, max_size: int | None = None
) -> list[int]:
    """Each prompt's group size for a total budget of ``len(rates) * n`` (see the module
    docstring).

    Args:
        rates: each prompt's pass rate at its last visit, None for a prompt never seen.
        n: the uniform group size G; the budget is len(rates) * n.
        min_size: the least group size of a seen prompt (<= n).
        max_size: the largest group size (>= n; None: 2 n).
    Returns:
        [len(rates)] group sizes summing to at most the budget.
    """
    top = 2 * n if max_size is None else max_size
    if not 1 <= min_size <= n <= top:
        raise ValueError(
            f"knapsack needs 1 <= min_size <= n <= max_size, got {min_size}, {n}, {top}"
        )
    sizes = [n if p is None else min_size for p in rates]
    budget = len(rates) * n - sum(sizes)
    items = [i for i, p in enumerate(rates) if p is not None and 0 < p < 1]
    extra = top - min_size
    # best[b]: the largest summed gain with budget b over the items so far; picks[j][b]: item j's k
    best = [0.0] * (budget + 1)
    picks: list[list[int]] = []
    for i in items:
        p = rates[i]
        assert p is not None
        gains = [
            knapsack_value(min_size + k, p) - knapsack_value(min_size, p) for k in range(extra + 1)
        ]
        new, choice = [0.0] * (budget + 1), [0] * (budget + 1)
        for b in range(budget + 1):
            new[b], choice[b] = max((best[b - k] + gains[k], -k) for k in range(min(extra, b) + 1))
            choice[b] = -choice[b]
        best = new
        picks.append(choice)
    b = budget
    for j in reversed(range(len(items))):  # backtrack the chosen extras
        k = picks[j][b]
        sizes[items[j]] += k
        b -= k
    left = b
    order = [i for i, p in enumerate(rates) if p == 0.0] + list(range(len(rates)))
    while left > 0:
        grew = False
        for i in order:
            if left > 0 and sizes[i] < top:
                sizes[i] += 1
                left -= 1
                grew = True
            if left == 0:
                break
        if not grew:
            break
    return sizes


@register_curriculum(
    "knapsack", "the task's stream, each prompt's group size by Knapsack RL's allocation"
)
class KnapsackBudget:
    """The task's stream with Knapsack RL's group sizes (see the module docstring).

    Args:
        task: the task whose ``train_problem(i)`` stream is walked.
        seed: unused.
        min_size: the least group size of a seen prompt.
        max_size: the largest group size (None: twice ``rollout.group_size``).
        threshold: the least reward that counts as a pass.
    """

    name = "knapsack"

    def __init__(
        self,
        task: Task,
        seed: int = 0,
        min_size: int = 2,
        max_size: int | None = None,
        threshold: float = 1.0,
    ) -> None:
        self.task, self.min_size, self.max_size, self.threshold = (
            task,
            min_size,
            max_size,
            threshold,
        )
        self.position = 0
        self.rates: dict[str, float] = {}  # pass rate at the last visit, per problem id
        self.sizes: list[int] = []

    def draw(self, n: int) -> list[Problem]:
        problems = [self.task.train_problem(self.position + i) for i in range(n)]
        self.position += n
        return problems

    def group_sizes(self, problems: list[Problem], n: int) -> list[int]:
        """Each problem's group size for a budget of ``len(problems) * n`` samples."""
        rates = [self.rates.get(p.id) for p in problems]
        self.sizes = knapsack_sizes(rates, n, self.min_size, self.max_size)
        return self.sizes

    def update(
        self, problems: list[Problem], rewards: torch.Tensor, group_ids: torch.Tensor
    ) -> None:
        rates = group_pass_rates(rewards, group_ids, self.threshold, len(problems))
        for problem, rate in zip(problems, rates, strict=True):
            self.rates[problem.id] = rate

    def metrics(self) -> dict[str, float]:
        if not self.sizes:
            return {}
        return {
            "curriculum/group_size_min": float(min(self.sizes)),
            "curriculum/group_size_max": float(max(self.sizes)),
        }

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "rates": dict(self.rates), "sizes": list(self.sizes)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])
        self.rates = {str(k): float(v) for k, v in state["rates"].items()}
        self.sizes = [int(s) for s in state["sizes"]]
