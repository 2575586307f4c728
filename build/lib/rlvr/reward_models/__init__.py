"""Bradley-Terry reward models: the model and its directory, and training it on preference pairs.

- :mod:`rlvr.reward_models.model`: :class:`RewardModel` (a causal LM backbone with a scalar
  head on the last real token), :func:`new_reward_model`, :func:`load_reward_model` and the
  saved directory's format;
- :mod:`rlvr.reward_models.train`: :func:`train_reward_model` (``rlvr rm train``) and
  :func:`evaluate_pairs` (``rlvr rm eval``) on preference pairs (:func:`load_pairs`), the
  Bradley-Terry loss.

A trained model is used as a reward by the ``reward_model`` reward
(:mod:`rlvr.rewards.reward_model`).
"""

from rlvr.reward_models.model import (
    FORMAT_VERSION,
    HEAD_FILE,
    METADATA_FILE,
    RewardModel,
    join_tokens,
    last_token_index,
    load_reward_model,
    new_reward_model,
    read_metadata,
    right_pad,
)
from rlvr.reward_models.train import (
    PreferencePair,
    RewardModelConfig,
    RewardModelReport,
    bradley_terry_loss,
    evaluate_pairs,
    load_pairs,
    pairwise_metrics,
    split_indices,
    train_reward_model,
)

__all__ = [
    "FORMAT_VERSION",
    "HEAD_FILE",
    "METADATA_FILE",
    "PreferencePair",
    "RewardModel",
    "RewardModelConfig",
    "RewardModelReport",
    "bradley_terry_loss",
    "evaluate_pairs",
    "join_tokens",
    "last_token_index",
    "load_pairs",
    "load_reward_model",
    "new_reward_model",
    "pairwise_metrics",
    "read_metadata",
    "right_pad",
    "split_indices",
    "train_reward_model",
]
