"""The task protocol: a deterministic stream of training problems, a fixed held-out split, a scorer.

A :class:`Problem` carries the user message (or, for a chat-format data row, the whole chat); the
trainer renders it with the tokenizer's chat template later (:meth:`Problem.messages`). Tasks
build the user message as ``prompt_template.format(question=...)``.

Every task asks for its final answer the same way: on the last line, as ``Answer: <answer>``
(the text :func:`rlvr.answers.extract_answer` reads).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

DEFAULT_PROMPT_TEMPLATE = (
    "{question}\nThink step by step if needed, then give the final answer on the last line as "
    "'Answer: <number>'."
)
# The default of file and dataset tasks, whose answers need not be numbers.
FILE_PROMPT_TEMPLATE = (
    "{question}\nThink step by step if needed, then give the final answer on the last line as "
    "'Answer: <answer>'."
)

Chat = tuple[tuple[str, str], ...]  # ((role, content), ...): system?, then turns ending in user


@dataclass(frozen=True)
class Demonstration:
    """A completion the data gives for a problem: the chat messages that continue its prompt
    (one assistant message for a prompt/completion row; the assistant turns, tool results and
    user turns after the prompt for a chat row), and its ``reward`` (1 for a demonstration or a
    chosen completion, 0 for a rejected one).

    ``messages`` are JSON texts of ``{"role", "content", ...}`` dicts (a message's other fields,
    such as ``tool_calls``, kept as written), so the problem stays hashable; :meth:`turns`
    gives the dicts."""

    messages: tuple[str, ...]
    reward: float = 1.0

    @staticmethod
    def of(messages: list[dict[str, Any]], reward: float = 1.0) -> Demonstration:
        return Demonstration(tuple(json.dumps(m, sort_keys=True) for m in messages), reward)

    def turns(self) -> list[dict[str, Any]]:
        """The messages as dicts."""
        return [json.loads(m) for m in self.messages]

    @property
    def text(self) -> str:
        """The last assistant message's content (what a verifier would read)."""
        turns = [t for t in self.turns() if t["role"] == "assistant"]
        return str(turns[-1].get("content") or "") if turns else ""


@dataclass(frozen=True)
class Problem:
    """One problem: a stable ``id`` (e.g. "arith-L2-train-17"), the user message ``prompt``, the
    reference ``answer`` as a string (e.g. "71"), the ``category`` it was drawn from in a
    :class:`CategorizedTask` ("" otherwise), for a chat-format data row the whole ``chat``
    it is prompted with (``prompt`` is then that chat's last user message), the
    completions the data gives for it (``demonstrations``: a demonstration, or a chosen and a
    rejected completion), and a ``response_prefix``: text that starts the reply, given rather
    than sampled (G2RPO-A's guidance): the policy continues from it, and the completion is its
    tokens, then the sampled ones ("" for none)."""

    id: str
    prompt: str
    answer: str
    category: str = ""
    chat: Chat | None = None
    demonstrations: tuple[Demonstration, ...] = ()
    response_prefix: str = ""

    def messages(self, system_prompt: str | None = None) -> list[dict[str, str]]:
        """The chat the policy is prompted with: the stored ``chat``, else the user message;
        ``system_prompt`` goes first unless the chat has its own system turn."""
        turns = self.chat if self.chat is not None else (("user", self.prompt),)
        chat = [{"role": role, "content": content} for role, content in turns]
        return with_system_prompt(chat, system_prompt)


def with_system_prompt(
    messages: list[dict[str, str]], system_prompt: str | None
) -> list[dict[str, str]]:
    """``messages`` with the run's ``model.system_prompt`` first, unless it is None or the
    messages begin with their own system turn (a problem's chat, an environment's first
    observation)."""
    if system_prompt is None or (messages and messages[0]["role"] == "system"):
        return messages
    return [{"role": "system", "content": system_prompt}, *messages]


class Task(Protocol):
    """What the trainer needs from a source of problems."""

    name: str

    def train_problem(self, index: int) -> Problem:
        """The training problem at sampler position ``index`` (0, 1, 2, ... unbounded); a pure
        function of the task's seed and ``index``."""

    def eval_problems(self) -> list[Problem]:
        """The held-out split: fixed, deterministic, disjoint from every training problem."""

    def score(self, completion: str, problem: Problem) -> float:
        """Reward of ``completion`` for ``problem``: 1.0 if correct, 0.0 otherwise.

        A task may also define ``extract_answer(completion, problem) -> str | None``: the string
        ``score`` reads (evaluation shows exactly it); without one, evaluation shows the numeric
        :func:`rlvr.answers.extract_answer`.
        """


class CategorizedTask(Task, Protocol):
    """A task whose training problems come in named categories (difficulty levels, sources): the
    arms a distribution-level curriculum (:mod:`rlvr.curriculum`) chooses between."""

    categories: tuple[str, ...]

    def category_problem(self, category: int, index: int) -> Problem:
        """The ``index``-th training problem of category ``category`` (0, 1, ... unbounded): a pure
        function of the task's seed, ``category`` and ``index``, with ``Problem.category`` set."""
