"""Pass@k training: advantages that reward a group for solving a problem in k tries, not each
sample for being right (Chen et al. 2025, "Pass@k Training for Adaptively Balancing Exploration
and Exploitation of Large Reasoning Models", arXiv:2508.10751, its analytical advantage).

This is not verl's ``grpo_passk``, which implements another paper (Tang et al. 2025,
"Optimizing Language Models for Inference Time Objectives using Reinforcement Learning",
arXiv:2503.19595): there only each group's best sample gets an advantage, r_max - r_second_max.

Training on pass@1 rewards sharpens the policy onto answers it already finds and lowers pass@k
at large k. Pass@k training scores every size-k subset of a group by max(reward) and gives each
sample its share of the subsets' group-normalised scores. The paper derives that share in
closed form: for a group of N samples of which N_neg are wrong (binary rewards),

    R = 1 - C(N_neg, k) / C(N, k)                 the group's mean pass@k,
    sigma = sqrt(R (1 - R)),
    A_pos = (1 - R) / sigma                        every correct sample,
    A_neg = (1 - R - C(N_neg - 1, k - 1) / C(N - 1, k - 1)) / sigma   every wrong one

(0 where sigma = 0: a group all right, or one with too few right samples for any k-subset to
differ). k = 1 gives GRPO with the population standard deviation: A = (r - p) / sqrt(p (1 - p)).
"""

from __future__ import annotations

from math import comb, sqrt

import torch

from rlvr.algorithms.advantages import AdvantageInputs, AdvantageOutput, register_advantage


def passk_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, k: int, threshold: float = 1.0
) -> torch.Tensor:
    """Pass@k advantages [N] (see the module docstring).

    Args:
        rewards: [N] rewards; a sample is correct where its reward >= ``threshold``.
        group_ids: [N] the group (prompt) of each sample.
        k: the k of pass@k (1 <= k <= every group's size).
        threshold: the reward that counts as correct.
    Returns:
        [N] advantages, in ``rewards``' dtype.
    """
    correct = rewards >= threshold
    out = torch.zeros_like(rewards, dtype=torch.float64)
    for gid in torch.unique(group_ids):
        members = group_ids == gid
        n, n_neg = int(members.sum()), int((members & ~correct).sum())
        if not 1 <= k <= n:
            raise ValueError(f"pass@k advantages need 1 <= k <= the group size, got k={k}, n={n}")
        mean = 1 - comb(n_neg, k) / comb(n, k)  # R
        sigma = sqrt(mean * (1 - mean))
        if sigma == 0:
            continue
        a_pos = (1 - mean) / sigma
        a_neg = (1 - mean - comb(n_neg - 1, k - 1) / comb(n - 1, k - 1)) / sigma if n_neg else 0.0
        out[members & correct] = a_pos
        out[members & ~correct] = a_neg
    return out.to(rewards.dtype)


@register_advantage(
    "passk", paper='Chen et al. 2025, "Pass@k Training", arXiv:2508.10751', group_relative=True
)
def _passk_estimator(
    inputs: AdvantageInputs, k: int = 2, threshold: float = 1.0
) -> AdvantageOutput:
    return AdvantageOutput(passk_advantages(inputs.rewards, inputs.group_ids, k, threshold))
