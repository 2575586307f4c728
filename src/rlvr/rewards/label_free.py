"""Label-free rewards: the reference answer is never read.

- ``majority_vote`` (TTRL, Zuo et al. 2025, "TTRL: Test-Time Reinforcement Learning"): the most
  frequent final answer of a prompt's group is a pseudo-label; a sample scores 1 if its answer
  equals it, else 0. Answers are compared numerically when both parse as numbers, else as
  stripped strings; samples without an extractable answer score 0 and do not vote.
"""

from __future__ import annotations

from collections import Counter

from rlvr.data.base import Problem
from rlvr.rewards.registry import register_reward
from rlvr.rewards.verifiers import extract_answer, parse_number


def _answer_key(answer: str | None) -> str | None:
    """A canonical key for voting: the number's value if it parses, else the stripped text."""
    if answer is None or not answer.strip():
        return None
    value = parse_number(answer)
    return repr(float(value)) if value is not None else answer.strip()


def majority_answer(completions: list[str]) -> str | None:
    """The pseudo-label of a group: its most frequent answer key (ties: first seen)."""
    keys = [k for k in (_answer_key(extract_answer(c)) for c in completions) if k is not None]
    if not keys:
        return None
    return Counter(keys).most_common(1)[0][0]


@register_reward("majority_vote", kind="group")
def majority_vote(completions: list[str], problem: Problem, min_votes: int = 1) -> list[float]:
    """TTRL reward [G]: 1 for samples whose answer is the group's majority answer.

    Args:
        completions: the G completions of one prompt.
        problem: unused beyond grouping (no label is read).
        min_votes: the majority needs at least this many votes, else every sample scores 0
            (no confident pseudo-label).
    """
    keys = [_answer_key(extract_answer(c)) for c in completions]
    label = majority_answer(completions)
    if label is None or keys.count(label) < min_votes:
        return [0.0] * len(completions)
    return [float(k == label) for k in keys]
