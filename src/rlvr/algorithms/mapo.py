"""MAPO: mixed advantage policy optimisation (Huang et al. 2025, "MAPO: Mixed Advantage Policy
Optimization", arXiv:2509.18849, eqs. 2-6), as the authors' code computes it
(``WenkeHuang/MAPO``, ``adv_estimator=grpomixpro``).

GRPO's (r - mean) / std gives a group whose answers nearly all agree (high certainty) the
largest advantages: a group with one wrong answer of 8 pushes it down by 2.5 std. MAPO mixes
in an advantage percent deviation, (r - mean) / mean, weighted by how certain the group is:

    p   = |{i: r_i = 1}| / G                          (the group's success rate)
    lam = 1 - 4 p (1 - p)                             (0 at p = 1/2, 1 at p = 0 or 1)
    A_i = (1 - lam) (r_i - mean) / (std + eps) + lam (r_i - mean) / (mean + eps)

with the unbiased std (the code's ``torch.std``; the paper's eq. 2 writes the population one)
and eps 1e-6. A group whose rewards are equal gets 0. Only rewards of exactly
``success_reward`` count as successes (the authors' ``scores == 1.0``: a correct answer
without the format bonus does not). The percent deviation divides by the group's mean reward,
so rewards must be >= 0 (theirs are 0 .. 1).
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    _group_std,
    _group_sums,
    register_advantage,
)


def mapo_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    success_reward: float = 1.0,
    eps: float = 1e-6,
) -> torch.Tensor:
    """MAPO's advantages [N] (see the module).

    Args:
        rewards: [N] rewards, >= 0.
        group_ids: [N] long group id of every sample.
        success_reward: the reward that counts as a success in the certainty p.
        eps: added to the std and to the mean.
    Returns:
        [N] advantages; a group of one gets 0 (its reward is its mean).
    """
    if bool((rewards < 0).any()):
        raise ValueError(
            "mapo's percent deviation divides by the group's mean reward: rewards must be >= 0, "
            f"got {float(rewards.min()):g}"
        )
    r, inverse, count, total = _group_sums(rewards.to(torch.float64), group_ids)
    mean = total / count
    centred = r - mean[inverse]
    std = _group_std(r, inverse, count, total)
    wins = torch.zeros_like(total).index_add_(0, inverse, (r == success_reward).to(r.dtype))
    p = wins / count
    lam = (1.0 - 4.0 * p * (1.0 - p))[inverse]  # the trajectory-certainty weight
    deviation = centred / (std[inverse] + eps)  # GRPO's
    percent = centred / (mean[inverse] + eps)  # the advantage percent deviation
    return ((1.0 - lam) * deviation + lam * percent).to(rewards.dtype)


@register_advantage(
    "mapo",
    paper='Huang et al. 2025, "MAPO: Mixed Advantage Policy Optimization", arXiv:2509.18849',
    group_relative=True,
)
def _mapo_estimator(
    inputs: AdvantageInputs, success_reward: float = 1.0, eps: float = 1e-6
) -> AdvantageOutput:
    return AdvantageOutput(mapo_advantages(inputs.rewards, inputs.group_ids, success_reward, eps))
