"""Hints: a prefix of a problem's reference solution placed in its prompt (QuestA, Li et al.
2025, "QuestA: Expanding Reasoning Capacity in LLMs via Question Augmentation",
arXiv:2507.13266; GHPO, Liu et al. 2025, "GHPO: Adaptive Guidance for Stable and Efficient LLM
Reinforcement Learning", arXiv:2507.10628).

A group the policy fails entirely teaches GRPO nothing. GHPO plays such a group again with the
first 25% of the reference solution in the prompt, then 50%, then 75% while it still fails, and
trains on the hinted group (the ``hints`` stage, :mod:`rlvr.trainer.stages.hints`). The
solution is the problem's first demonstration (a procedural task's worked solution, e.g.
arithmetic's step-by-step evaluation; a data row's demonstration column); a problem without
one is not hinted. The prefix is counted in characters, as in both papers' code.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rlvr.data.base import Problem

HINT_INTRO = "\n\nHint: a worked solution begins as follows; you may continue from it.\n"
"""What goes between the question and the solution's prefix."""


def solution_prefix(solution: str, fraction: float) -> str:
    """The first round(len(solution) * fraction) characters of ``solution``."""
    if not 0 < fraction < 1:
        raise ValueError(f"a hint is a fraction of the solution in (0, 1), got {fraction}")
    return solution[: round(len(solution) * fraction)]


def token_prefix(tokenizer: Any, ids: list[int]) -> str:
    """The text of the tokens ``ids`` (a solution's first ones), ended before a character the
    cut split (decoded as U+FFFD)."""
    prefix = tokenizer.decode(ids)
    while ids and prefix.endswith("\ufffd"):
        ids = ids[:-1]
        prefix = tokenizer.decode(ids)
    return prefix


def reference_solution(problem: Problem) -> str | None:
    """The problem's reference solution: the text of its first demonstration that solves it
    (reward 1), or None (hints, G2RPO-A's guidance, EDGE-GRPO's solution correction)."""
    solutions = [d for d in problem.demonstrations if d.reward >= 1.0 and d.text]
    return solutions[0].text if solutions else None


def hinted(problem: Problem, fraction: float) -> Problem | None:
    """``problem`` with ``fraction`` of its reference solution after its question (in its last
    user turn for a chat), or None when it has no solution to give. The id gains
    ``#hint<percent>``, so a hinted prompt is never taken for the plain one."""
    solution = reference_solution(problem)
    if solution is None:
        return None
    hint = HINT_INTRO + solution_prefix(solution, fraction)
    chat = problem.chat
    if chat is not None:
        last = max(i for i, (role, _) in enumerate(chat) if role == "user")
        chat = tuple((r, c + hint if i == last else c) for i, (r, c) in enumerate(chat))
    return dataclasses.replace(
        problem,
        id=f"{problem.id}#hint{round(fraction * 100)}",
        prompt=problem.prompt + hint,
        chat=chat,
    )
