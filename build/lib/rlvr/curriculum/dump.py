"""DUMP: distribution-level curriculum by UCB on the expected absolute advantage (Wang et al.
2025, "DUMP: Automated Distribution-Level Curriculum Learning for RL-based LLM Post-training").

Each category (data distribution) d_j keeps a sliding window of the absolute advantages of its
most recent samples; its learnability estimate is their mean, L_j = mean |A| over the window
(the paper's expected absolute advantage E_x E_o |A(o)|). Categories are scored by UCB,

    UCB_j = L_j + c * sqrt(2 * ln(sum_i n_i) / n_j)

with n_j the samples drawn from d_j so far (exploitation of learnable distributions, exploration
of rarely drawn ones; a category never drawn scores +inf), and problems are drawn from
softmax(UCB / tau). ``window``, ``c`` and ``tau`` are parameters here (defaults 300 samples,
1, 0.1).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from rlvr.curriculum.base import register_curriculum
from rlvr.curriculum.categories import CategorySampler, softmax
from rlvr.data.base import CategorizedTask


def ucb_scores(means: list[float], counts: list[int], exploration: float = 1.0) -> list[float]:
    """UCB_j = means_j + exploration * sqrt(2 ln(sum counts) / counts_j); +inf where counts_j = 0.

    Args:
        means: [K] mean absolute advantage per arm; counts: [K] samples drawn per arm.
    Returns:
        [K] scores.
    """
    total = sum(counts)
    return [
        m + exploration * math.sqrt(2 * math.log(total) / n) if n > 0 else math.inf
        for m, n in zip(means, counts, strict=True)
    ]


@register_curriculum(
    "dump", "DUMP: UCB over each category's mean absolute advantage (Wang et al. 2025)"
)
class DUMP(CategorySampler):
    """DUMP over ``task.categories`` (see the module docstring).

    Args:
        window: most recent absolute advantages kept per category.
        exploration: UCB coefficient c.
        temperature: softmax temperature tau over the UCB scores.
    """

    name = "dump"

    def __init__(
        self,
        task: CategorizedTask,
        seed: int = 0,
        window: int = 300,
        exploration: float = 1.0,
        temperature: float = 0.1,
    ) -> None:
        super().__init__(task, seed)
        if window < 1 or exploration < 0 or temperature <= 0:
            raise ValueError(
                f"dump needs window >= 1, exploration >= 0 and temperature > 0, got {window}, "
                f"{exploration}, {temperature}"
            )
        self.exploration = exploration
        self.temperature = temperature
        self.windows: list[deque[float]] = [deque(maxlen=window) for _ in self.categories]
        self.counts = [0] * len(self.categories)

    def values(self) -> list[float]:
        """[K] learnability L_j: mean absolute advantage over each category's window (0 when
        empty)."""
        return [sum(w) / len(w) if w else 0.0 for w in self.windows]

    def probabilities(self) -> list[float]:
        return softmax(ucb_scores(self.values(), self.counts, self.exploration), self.temperature)

    def learn(self, advantages: dict[int, list[float]]) -> None:
        for c, values in advantages.items():
            self.windows[c].extend(values)
            self.counts[c] += len(values)

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "windows": [list(w) for w in self.windows],
            "counts": list(self.counts),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        for w, saved in zip(self.windows, state["windows"], strict=True):
            w.clear()
            w.extend(float(a) for a in saved)
        self.counts = [int(n) for n in state["counts"]]
