"""The task protocol: a deterministic stream of training problems, a fixed held-out split, a scorer.

A :class:`Problem` carries the user message only; the trainer applies the chat template later.
Tasks build that message as ``prompt_template.format(question=...)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

DEFAULT_PROMPT_TEMPLATE = (
    "{question}\nThink step by step if needed, then give the final answer on the last line as "
    "'Answer: <number>'."
)


@dataclass(frozen=True)
class Problem:
    """One problem: a stable ``id`` (e.g. "arith-L2-train-17"), the user message ``prompt``, the
    reference ``answer`` as a string (e.g. "71"), and the ``category`` it was drawn from in a
    :class:`CategorizedTask` ("" otherwise)."""

    id: str
    prompt: str
    answer: str
    category: str = ""

    def messages(self, system_prompt: str | None = None) -> list[dict[str, str]]:
        """The chat the policy is prompted with: an optional system turn, then the user
        message."""
        chat = [{"role": "user", "content": self.prompt}]
        if system_prompt is not None:
            chat.insert(0, {"role": "system", "content": system_prompt})
        return chat


class Task(Protocol):
    """What the trainer needs from a source of problems."""

    name: str

    def train_problem(self, index: int) -> Problem:
        """The training problem at sampler position ``index`` (0, 1, 2, ... unbounded); a pure
        function of the task's seed and ``index``."""

    def eval_problems(self) -> list[Problem]:
        """The held-out split: fixed, deterministic, disjoint from every training problem."""

    def score(self, completion: str, problem: Problem) -> float:
        """Reward of ``completion`` for ``problem``: 1.0 if correct, 0.0 otherwise."""


class CategorizedTask(Task, Protocol):
    """A task whose training problems come in named categories (difficulty levels, sources): the
    arms a distribution-level curriculum (:mod:`rlvr.curriculum`) chooses between."""

    categories: tuple[str, ...]

    def category_problem(self, category: int, index: int) -> Problem:
        """The ``index``-th training problem of category ``category`` (0, 1, ... unbounded): a pure
        function of the task's seed, ``category`` and ``index``, with ``Problem.category`` set."""
