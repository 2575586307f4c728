"""SEC: Self-Evolving Curriculum (Chen et al. 2025, "Self-Evolving Curriculum for LLM Reasoning").

Curriculum selection as a non-stationary multi-armed bandit whose arms are problem categories
(difficulty levels, problem types). The reward of arm c at a step is the mean absolute
advantage of the step's samples of category c (the proxy for immediate learning gain), its
value is updated by TD(0),

    Q_{t+1}(c) = alpha * r_t(c) + (1 - alpha) * Q_t(c)      (arms drawn at step t only)

and every problem's category is drawn from the Boltzmann distribution

    p(c) = exp(Q(c) / tau) / sum_c' exp(Q(c') / tau).

Q starts at 0 (uniform). With 0/1 rewards and GRPO advantages a category whose groups are all
solved or all failed earns r = 0, one at pass rate ~1/2 earns ~0.9 (G = 8): SEC moves the
batch towards categories at the edge of the policy's ability as that edge moves.
"""

from __future__ import annotations

from typing import Any

from rlvr.curriculum.base import register_curriculum
from rlvr.curriculum.categories import CategorySampler, softmax
from rlvr.data.base import CategorizedTask


def td0_update(values: list[float], rewards: dict[int, float], alpha: float) -> list[float]:
    """Q(c) <- alpha * r(c) + (1 - alpha) * Q(c) for each arm c in ``rewards``; others unchanged.

    Args:
        values: [K] current Q; rewards: arm index -> this step's reward; alpha: step size.
    Returns:
        [K] updated Q (a new list).
    """
    return [
        alpha * rewards[c] + (1 - alpha) * q if c in rewards else q for c, q in enumerate(values)
    ]


@register_curriculum(
    "sec",
    "Self-Evolving Curriculum: TD(0) bandit over categories, Boltzmann sampling (Chen et al. 2025)",
)
class SEC(CategorySampler):
    """SEC over ``task.categories`` (see the module docstring).

    Args:
        alpha: TD(0) step size in (0, 1].
        temperature: Boltzmann temperature tau > 0 (smaller: greedier).
    """

    name = "sec"

    def __init__(
        self, task: CategorizedTask, seed: int = 0, alpha: float = 0.5, temperature: float = 1.0
    ) -> None:
        super().__init__(task, seed)
        if not 0 < alpha <= 1 or temperature <= 0:
            raise ValueError(
                f"sec needs 0 < alpha <= 1 and temperature > 0, got {alpha}, {temperature}"
            )
        self.alpha = alpha
        self.temperature = temperature
        self.q = [0.0] * len(self.categories)

    def probabilities(self) -> list[float]:
        return softmax(self.q, self.temperature)

    def values(self) -> list[float]:
        return list(self.q)

    def learn(self, advantages: dict[int, list[float]]) -> None:
        rewards = {c: sum(a) / len(a) for c, a in advantages.items() if a}
        self.q = td0_update(self.q, rewards, self.alpha)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "q": list(self.q)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.q = [float(q) for q in state["q"]]
