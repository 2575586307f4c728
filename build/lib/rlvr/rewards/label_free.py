"""Label-free rewards: the reference answer is never read.

- ``self_certainty`` (Intuitor) and ``negative_entropy`` (RENT) score the model's confidence
  from per-token statistics the rollout engine records while sampling (fields
  ``self_certainty`` and ``token_entropy``: the mean over the completion's tokens).

- ``majority_vote`` (TTRL, Zuo et al. 2025, "TTRL: Test-Time Reinforcement Learning"): the most
  frequent final answer of a prompt's group is a pseudo-label; a sample scores 1 if its answer
  equals it, else 0. Answers are compared numerically when both parse as numbers, else as
  stripped strings; samples without an extractable answer score 0 and do not vote.
"""

from __future__ import annotations

from collections import Counter

from rlvr.answers import extract_answer, parse_number
from rlvr.data.base import Problem
from rlvr.rewards.registry import register_reward


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


@register_reward("self_certainty")
def self_certainty(completion: str, problem: Problem, self_certainty: float) -> float:
    """Intuitor's reward (Zhao et al. 2025, "Learning to Reason without External Rewards"): the
    mean over the completion's tokens of KL(U || p), the model's confidence in its own
    next-token distributions. The ``self_certainty`` field comes from the rollout engine
    (``SamplingParams.token_stats``), so no model is reloaded to score."""
    return self_certainty


@register_reward("negative_entropy")
def negative_entropy(completion: str, problem: Problem, token_entropy: float) -> float:
    """Entropy minimisation as a reward (RENT, Prabhudesai et al. 2025, "Maximizing Confidence
    Alone Improves Reasoning"): minus the mean token entropy of the completion (nats), from the
    rollout engine's ``token_entropy`` field."""
    return -token_entropy
