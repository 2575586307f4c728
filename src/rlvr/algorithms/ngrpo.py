"""NGRPO: negative-enhanced GRPO (Nan et al. 2025, "NGRPO: Negative-enhanced Group Relative
Policy Optimization", arXiv:2509.18851), as the authors' code computes it
(``nangongrui-ngr/NGRPO``, ``compute_ngrpo_outcome_advantage``).

A group whose answers are all wrong has GRPO advantages of 0: the errors teach nothing. NGRPO
calibrates each group's statistics with a virtual sample of the largest reward, never trained:

    mu'  = mean(r_1..r_G, r_max),   sigma' = std(r_1..r_G, r_max)   (unbiased: / G)
    A_i  = (r_i - mu') / (sigma' + eps)

so an all-wrong group of 0/1 rewards gets A = -1 / sqrt(G + 1) (-1/3 for G = 8: mean 1/9, std
1/3), an all-correct one 0, and a mixed group's correct answers a smaller advantage and its
wrong ones a larger penalty than GRPO's (1 of 8 correct: 1.76 / -0.50 against 2.47 / -0.35).
Every group is calibrated the same way. The authors' runs pair it with DAPO's decoupled clip
at 0.16 / 0.24 and drop all-correct groups (``filter_groups: all_correct``; the
``not_all_correct`` selector), refilling the batch.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    _group_sums,
    register_advantage,
)
from rlvr.algorithms.filters import register_group_selector


def ngrpo(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    max_reward: float = 1.0,
    virtual: int = 1,
    eps: float = 1e-6,
) -> torch.Tensor:
    """NGRPO's calibrated advantages [N] (see the module).

    Args:
        rewards: [N] rewards.
        group_ids: [N] long group id of every sample.
        max_reward: r_max, the reward of the virtual samples (1 for a 0/1 verifier).
        virtual: how many virtual samples join each group's statistics (the authors' 1).
        eps: added to the std.
    Returns:
        [N] advantages; a group of one gets A = r (baseline 0, scale 1), as GRPO's.
    """
    if virtual < 1:
        raise ValueError(f"ngrpo: virtual must be >= 1 (0 is GRPO), got {virtual}")
    r, inverse, count, total = _group_sums(rewards.to(torch.float64), group_ids)
    squares = torch.zeros_like(total).index_add_(0, inverse, r * r)
    n = count + virtual  # G + v values
    mean = (total + virtual * max_reward) / n
    sum_sq = squares + virtual * max_reward**2 - n * mean**2  # sum over the G + v of (x - mean)^2
    std = (sum_sq.clamp_min(0.0) / (n - 1)).sqrt()
    advantages = (r - mean[inverse]) / (std[inverse] + eps)
    return torch.where(count[inverse] > 1, advantages, r).to(rewards.dtype)


@register_advantage(
    "ngrpo",
    paper='Nan et al. 2025, "NGRPO: Negative-enhanced Group Relative Policy Optimization", '
    "arXiv:2509.18851",
    group_relative=True,
)
def _ngrpo_estimator(
    inputs: AdvantageInputs, max_reward: float = 1.0, virtual: int = 1, eps: float = 1e-6
) -> AdvantageOutput:
    return AdvantageOutput(ngrpo(inputs.rewards, inputs.group_ids, max_reward, virtual, eps))


@register_group_selector("not_all_correct")
def not_all_correct(
    rewards: torch.Tensor, group_ids: torch.Tensor, max_reward: float = 1.0
) -> torch.Tensor:
    """[number of groups] bool: the groups that have an answer below ``max_reward`` (NGRPO's
    ``filter_groups: all_correct``: all-correct groups are dropped, all-wrong ones kept)."""
    _, inverse = torch.unique(group_ids, return_inverse=True)
    below = (rewards < max_reward).to(torch.long)
    return torch.zeros(int(inverse.max()) + 1, dtype=torch.long).index_add_(0, inverse, below) > 0
