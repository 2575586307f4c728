"""SPO's advantage: the reward against a persistent per-prompt baseline, normalised over the
batch (Xu and Ding 2025, "Single-stream Policy Optimization", arXiv:2509.13232).

    A_i = r_i - p^(x_i),   then   A <- (A - mean_batch A) / (std_batch A + eps)

with p^(x) the prompt's tracked success probability before this visit (the ``spo``
curriculum's Beta tracker, :mod:`rlvr.curriculum.spo`) and the unbiased std over the batch.
Unlike a group baseline it needs no second sample of the prompt: group size 1 works. Select
with ``algorithm.advantage.name: spo`` and ``curriculum.name: spo``.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    _need,
    register_advantage,
)


def spo(rewards: torch.Tensor, baselines: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """SPO's advantages [N] from rewards [N] and each sample's prompt baseline p^ [N]."""
    if rewards.shape != baselines.shape or rewards.dim() != 1:
        raise ValueError(
            f"rewards and baselines must be [N], got {tuple(rewards.shape)} and "
            f"{tuple(baselines.shape)}"
        )
    r = rewards if rewards.is_floating_point() else rewards.float()
    centred = r - baselines.to(r.dtype)  # r_i - p^(x_i)
    if centred.numel() < 2:
        return centred
    return (centred - centred.mean()) / (centred.std() + eps)  # normalised over the batch


@register_advantage(
    "spo",
    requires=("baselines",),
    paper='Xu and Ding 2025, "Single-stream Policy Optimization", arXiv:2509.13232',
)
def _spo_estimator(inputs: AdvantageInputs, eps: float = 1e-8) -> AdvantageOutput:
    return AdvantageOutput(spo(inputs.rewards, _need("spo", inputs, "baselines"), eps))
