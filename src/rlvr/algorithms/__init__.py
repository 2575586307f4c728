"""RL objectives as pure functions on tensors: advantages, KL estimators, losses, presets."""

from rlvr.algorithms.advantages import (
    ADVANTAGES,
    compute_advantages,
    dr_grpo,
    group_stats,
    grpo,
    register_advantage,
    rloo,
)
from rlvr.algorithms.kl import KL_ESTIMATORS, kl_k1, kl_k2, kl_k3, kl_penalty, register_kl
from rlvr.algorithms.losses import (
    AGGREGATIONS,
    POLICY_METRICS,
    aggregate,
    clipped_policy_loss,
    masked_mean,
    policy_metrics,
    register_aggregation,
)
from rlvr.algorithms.presets import PRESETS, Preset, get_preset

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "POLICY_METRICS",
    "PRESETS",
    "Preset",
    "aggregate",
    "clipped_policy_loss",
    "compute_advantages",
    "dr_grpo",
    "get_preset",
    "group_stats",
    "grpo",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "kl_penalty",
    "masked_mean",
    "policy_metrics",
    "register_advantage",
    "register_aggregation",
    "register_kl",
    "rloo",
]
