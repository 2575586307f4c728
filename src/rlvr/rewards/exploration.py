"""``rlsp_exploration``: RLSP's exploration reward (Ye et al. 2025, "On the Emergence of Thinking
in LLMs I: Searching for the Right Intuition", arXiv:2502.06773), as the authors' reward server
computes it (``GuanghaoYe/Emergence-of-Thinking``, ``openrlhf/cli/orm_server_efficient.py``, the
server their README runs).

RLSP decouples exploration from correctness: beside the outcome verifier, every response gets
a reward for the length of its reasoning, the text before its first ``\\boxed{`` (all of it
without one), whether the answer is right or not:

    r_explore = -C / L,   L = the reasoning's characters / 4 (their estimate of its tokens)

bounded above by 0 and rising toward it as the reasoning grows (C = 1000 in their runs). Their
total reward, ``outcome - C / L``, is clipped to [-10, 10] by OpenRLHF; here the term is floored
at -10 (a reasoning under 100 tokens), the level the clip set. The recipe in rlvr is a weighted
sum: ``reward.terms: [{name: math}, {name: rlsp_exploration}]``, plus, for their Qwen runs, a
judge of the reasoning's effort at weight 0.2 against 0.8 for the two (``judge_score`` with a
rubric prompt). An empty reasoning gets the floor (their server's exception gave the whole
reward 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlvr.rewards.registry import register_reward

if TYPE_CHECKING:
    from rlvr.data.base import Problem

BOX = "\\boxed{"


def reasoning_length(completion: str) -> float:
    """L: the characters before the first ``\\boxed{`` (the whole text without one) / 4."""
    end = completion.find(BOX)
    return len(completion if end < 0 else completion[:end]) / 4


@register_reward("rlsp_exploration")
def rlsp_exploration(
    completion: str, problem: Problem, c: float = 1000.0, floor: float = -10.0
) -> float:
    """RLSP's exploration reward ``max(-c / L, floor)`` (see the module); ``c`` >= 0 (0: off)."""
    if c < 0 or floor > 0:
        raise ValueError(f"rlsp_exploration: c must be >= 0 and floor <= 0, got {c}, {floor}")
    length = reasoning_length(completion)
    if c == 0:
        return 0.0
    return floor if length == 0 else max(-c / length, floor)
