"""Rewards: verifiers, a registry of named rewards and their weighted sum, and a code sandbox.

- :mod:`rlvr.rewards.registry`: the reward protocol (per sample or per group),
  ``@register_reward``, ``get_reward``, ``CombinedReward`` (weights, per-component logging,
  timeouts, ``on_error``);
- built-in rewards: ``math``, ``numeric``, ``exact_match``, ``multiple_choice``
  (:mod:`.answers`), ``format``, ``json_schema`` (:mod:`.structure`), ``bleu``, ``chrf``
  (:mod:`.similarity`), ``overlong``, ``length_truncation`` (:mod:`.length`),
  ``python_unit_tests`` (:mod:`.code`), ``majority_vote`` (TTRL, label-free, :mod:`.label_free`);
- :mod:`rlvr.rewards.sandbox`: ``run_python`` for model-written code.
"""

from rlvr.rewards.registry import (
    CombinedReward,
    RewardBreakdown,
    RewardError,
    RewardSpec,
    Score,
    available_rewards,
    get_reward,
    register_reward,
)
from rlvr.rewards.verifiers import extract_answer, numeric_match, numeric_reward, parse_number

__all__ = [
    "CombinedReward",
    "RewardBreakdown",
    "RewardError",
    "RewardSpec",
    "Score",
    "available_rewards",
    "extract_answer",
    "get_reward",
    "numeric_match",
    "numeric_reward",
    "parse_number",
    "register_reward",
]
