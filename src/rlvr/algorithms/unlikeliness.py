"""Unlikeliness reward: lift correct samples the policy found unlikely (He, Fried and Welleck
2025, "Rewarding the Unlikely: Lifting GRPO Beyond Distribution Sharpening", arXiv:2506.02355).

GRPO's update favours the correct samples the policy already finds likely (its "rank bias"), so
it sharpens the distribution onto known solutions and pass@N at large N stalls. The paper ranks
the G samples of a group by their likelihood under the sampling policy and scales each reward
down the more likely its sample is, before GRPO's group normalisation:

    rank_i = position of y_i when the group is sorted by increasing mean token log-prob
             (0 = least likely, G - 1 = most likely),
    r'_i = r_i (1 - beta_rank * rank_i / G),          A_i = GRPO(r')_i.

A wrong sample (r = 0) keeps 0; among correct ones the least likely keeps its full reward and
the most likely is scaled by 1 - beta_rank (G - 1) / G. The paper's beta_rank is 0.25. The
ranks are taken over the whole group, wrong samples included, as in the authors' code; ties
keep the samples' order. Select with ``algorithm.advantage.name: unlikeliness``.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    _group_sums,
    _need,
    grpo,
    register_advantage,
)


def unlikeliness_rewards(
    rewards: torch.Tensor, seq_logp: torch.Tensor, group_ids: torch.Tensor, beta_rank: float = 0.25
) -> torch.Tensor:
    """Rewards scaled by their sample's likelihood rank in its group (see the module docstring).

    Args:
        rewards: [N] rewards.
        seq_logp: [N] each sample's mean token log-prob under the sampling policy.
        group_ids: [N] the group (prompt) of each sample.
        beta_rank: the rank penalty beta_rank (0 gives the rewards back).
    Returns:
        [N] r'_i = r_i (1 - beta_rank rank_i / G), in ``rewards``' floating dtype.
    """
    r, inverse, count, _ = _group_sums(rewards, group_ids)
    if seq_logp.shape != r.shape:
        raise ValueError(f"seq_logp must be [{r.numel()}], got {tuple(seq_logp.shape)}")
    # sort by group, then by log-prob (stable): a sample's rank is its place within its group
    by_logp = torch.sort(seq_logp.double(), stable=True).indices
    order = by_logp[torch.sort(inverse[by_logp], stable=True).indices]
    starts = torch.cumsum(count, 0) - count  # [K] first position of each group in ``order``
    rank = torch.empty_like(r)
    positions = torch.arange(r.numel(), dtype=r.dtype, device=r.device)
    rank[order] = positions - starts[inverse[order]]  # 0 = least likely in its group
    return r * (1 - beta_rank * rank / count[inverse])  # r_i (1 - beta rank_i / G)


@register_advantage(
    "unlikeliness",
    paper='He et al. 2025, "Rewarding the Unlikely", arXiv:2506.02355',
    requires=("mask", "student_logp"),
    group_relative=True,
)
def _unlikeliness_estimator(
    inputs: AdvantageInputs, beta_rank: float = 0.25, eps: float = 1e-6
) -> AdvantageOutput:
    mask = _need("unlikeliness", inputs, "mask").to(torch.float64)
    logp = _need("unlikeliness", inputs, "student_logp").to(torch.float64)
    seq_logp = (logp * mask).sum(-1) / mask.sum(-1).clamp_min(1)  # mean token log-prob
    scaled = unlikeliness_rewards(inputs.rewards, seq_logp, inputs.group_ids, beta_rank)
    return AdvantageOutput(grpo(scaled, inputs.group_ids, eps))
