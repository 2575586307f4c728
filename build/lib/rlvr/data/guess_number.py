"""Problems of the ``guess_number`` environment (:mod:`rlvr.envs.guess_number`): a hidden whole
number in 1..``max_value``, deterministic by seed.

The game has only ``max_value`` problems, so its held-out split cannot be disjoint from training:
the eval split is every hidden number once (1..max_value, or ``n_eval`` of them spread evenly),
and what is measured is how well the policy plays, not generalisation to unseen problems.
"""

from __future__ import annotations

import random
import re

from rlvr.data.base import Problem

PROMPT = (
    "I am thinking of a whole number from 1 to {max_value}. Guess it: reply with one number. "
    "After each wrong guess I say whether the number is higher or lower."
)
_NUMBER_TAIL = re.compile(r"-?\d+")


class GuessNumberTask:
    """Hidden numbers for ``guess_number`` (see the module docstring)."""

    name = "guess_number"

    def __init__(self, max_value: int = 16, seed: int = 0, n_eval: int = 200) -> None:
        if max_value < 2:
            raise ValueError(f"guess_number max_value must be >= 2, got {max_value}")
        self.max_value, self.seed, self.n_eval = max_value, seed, n_eval

    def _problem(self, id_: str, hidden: int) -> Problem:
        return Problem(id_, PROMPT.format(max_value=self.max_value), str(hidden))

    def train_problem(self, index: int) -> Problem:
        hidden = random.Random(f"{self.seed}-guess-{index}").randint(1, self.max_value)
        return self._problem(f"guess-{self.max_value}-train-{index}", hidden)

    def eval_problems(self) -> list[Problem]:
        count = min(self.n_eval, self.max_value)
        hidden = sorted({1 + (i * self.max_value) // count for i in range(count)})
        return [self._problem(f"guess-{self.max_value}-eval-{h}", h) for h in hidden]

    def score(self, completion: str, problem: Problem) -> float:
        """1.0 if the last whole number of ``completion`` is the hidden number (one guess)."""
        numbers = _NUMBER_TAIL.findall(completion)
        return 1.0 if numbers and int(numbers[-1]) == int(problem.answer) else 0.0
