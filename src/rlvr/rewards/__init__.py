"""Rewards: the reward protocol, a registry of named rewards, their weighted sum, and the built-in
rewards.

- :mod:`rlvr.rewards.base`: ``build_reward``, the run's reward from the task's verifier, a
  user function (``module:function`` or a callable) or weighted terms;
- :mod:`rlvr.rewards.protocol`: the reward protocol (per sample or per group), the fields a run
  passes (``SAMPLE_FIELDS``), ``Score`` (a value with a reason), ``RewardError`` and
  ``RewardConfigError``;
- :mod:`rlvr.rewards.registry`: ``@register_reward``, ``get_reward``, ``available_rewards``,
  ``load_function`` (``module:function``; the current directory is importable); the names
  ``task`` (alias ``verifier``), the task's own verifier, are reserved;
- :mod:`rlvr.rewards.combined`: ``CombinedReward`` (weights, per-component logging, ``on_error``,
  checks of every reward value, the start-up probe ``check``), ``RewardSpec``,
  ``RewardBreakdown``;
- :mod:`rlvr.rewards.executor`: where reward calls run (threads or processes) under timeouts;
- built-in rewards: ``math``, ``numeric``, ``exact_match``, ``multiple_choice``
  (:mod:`.answers`), ``format``, ``json_schema`` (:mod:`.structure`), ``bleu``, ``chrf``
  (:mod:`.similarity`), ``overlong``, ``length_truncation`` (:mod:`.length`),
  ``rlsp_exploration`` (RLSP, :mod:`.exploration`), ``python_unit_tests`` (:mod:`.code`, run in :mod:`rlvr.sandbox`); label-free
  ``majority_vote`` (TTRL), ``self_certainty`` (Intuitor), ``negative_entropy`` (RENT)
  (:mod:`.label_free`) and ``evol_novelty`` (EVOL-RL, :mod:`.novelty`, embeddings in
  :mod:`.embeddings`); verifier-free ``rlpr``, ``verifree``, ``reference_probability``
  (:mod:`.reference_probability`); ``reward_model`` (a Bradley-Terry reward model trained by
  :mod:`rlvr.reward_models`, :mod:`.reward_model`).

Answer extraction (``extract_answer``, ``parse_number``, ``numeric_match``,
``numeric_reward``) lives in :mod:`rlvr.answers` and is re-exported here.

Rewards that need model scores declare them as fields (``token_entropy``,
``self_certainty``, ``reference_logprobs``, ``reference_logprobs_bare``); the trainer computes
only the fields some configured reward declares, from the rollout engine or the policy.
"""

from rlvr.answers import extract_answer, numeric_match, numeric_reward, parse_number
from rlvr.rewards.base import build_reward
from rlvr.rewards.combined import CombinedReward, RewardBreakdown, RewardSpec
from rlvr.rewards.protocol import (
    DEFAULT_MAX_ABS,
    SAMPLE_FIELDS,
    RewardConfigError,
    RewardError,
    Score,
)
from rlvr.rewards.registry import available_rewards, get_reward, load_function, register_reward

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
