"""Rewards: verifiers, a registry of named rewards and their weighted sum, and a code sandbox.

- :mod:`rlvr.rewards.base`: ``build_reward``, the run's reward from the task's verifier, a
  user function (``module:function`` or a callable) or weighted terms; the user reward
  signature; ``load_function`` (the current directory is importable);
- :mod:`rlvr.rewards.registry`: the reward protocol (per sample or per group),
  ``@register_reward``, ``get_reward``, ``CombinedReward`` (weights, per-component logging,
  timeouts, ``on_error``, checks of every reward value, the start-up probe ``check``), the
  reward ``task`` (alias ``verifier``): the task's own verifier;
- built-in rewards: ``math``, ``numeric``, ``exact_match``, ``multiple_choice``
  (:mod:`.answers`), ``format``, ``json_schema`` (:mod:`.structure`), ``bleu``, ``chrf``
  (:mod:`.similarity`), ``overlong``, ``length_truncation`` (:mod:`.length`),
  ``python_unit_tests`` (:mod:`.code`); label-free ``majority_vote`` (TTRL),
  ``self_certainty`` (Intuitor), ``negative_entropy`` (RENT) (:mod:`.label_free`) and
  ``evol_novelty`` (EVOL-RL, :mod:`.novelty`, embeddings in :mod:`.embeddings`);
  verifier-free ``rlpr``, ``verifree``, ``reference_probability``
  (:mod:`.reference_probability`); ``reward_model`` (Bradley-Terry, :mod:`.reward_model`);
- :mod:`rlvr.rewards.sandbox`: ``run_python`` for model-written code.

Rewards that need model scores declare them as fields (``token_entropy``,
``self_certainty``, ``reference_logprobs``, ``reference_logprobs_bare``); the trainer computes
only the fields some configured reward declares, from the rollout engine or the policy.
"""

from rlvr.rewards.base import build_reward, load_function
from rlvr.rewards.registry import (
    DEFAULT_MAX_ABS,
    SAMPLE_FIELDS,
    CombinedReward,
    RewardBreakdown,
    RewardConfigError,
    RewardError,
    RewardSpec,
    Score,
    available_rewards,
    get_reward,
    register_reward,
)
from rlvr.rewards.verifiers import extract_answer, numeric_match, numeric_reward, parse_number

__all__ = [
    "DEFAULT_MAX_ABS",
    "SAMPLE_FIELDS",
    "CombinedReward",
    "RewardBreakdown",
    "RewardConfigError",
    "RewardError",
    "RewardSpec",
    "Score",
    "available_rewards",
    "build_reward",
    "extract_answer",
    "get_reward",
    "load_function",
    "numeric_match",
    "numeric_reward",
    "parse_number",
    "register_reward",
]
