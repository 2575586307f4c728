"""GDPO: normalise each reward term in its group before summing them (Liu et al. 2026, "GDPO:
Group reward-Decoupled Normalization Policy Optimization for Multi-reward RL Optimization",
arXiv:2601.05242).

GRPO normalises the weighted sum of a sample's reward terms. With several terms (correctness,
format, length) distinct combinations then collapse onto the same advantage: a group scoring
(1, 0) and (0, 1) on two terms of equal weight has equal sums, so neither sample is preferred,
and a term of large variance drowns the others. GDPO normalises each term within its group
first, sums the normalised terms with their weights, and whitens the sum over the batch:

    A_k,i = (r_k,i - mean_g r_k) / (std_g r_k + eps)        each term k, in sample i's group g
    A_i = sum_k w_k A_k,i,   then   A_i <- (A_i - mean_batch A) / (std_batch A + eps).

A term equal across a group contributes 0 to it. Select with ``algorithm.advantage.name: gdpo`` on a
run whose reward has ``reward.terms``.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    _need,
    grpo,
    register_advantage,
)


def gdpo(
    terms: torch.Tensor, weights: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """GDPO's advantages [N] (see the module docstring).

    Args:
        terms: [N, K] each sample's unweighted reward terms.
        weights: [K] the terms' weights.
        group_ids: [N] the group (prompt) of each sample.
        eps: added to each standard deviation.
    Returns:
        [N] advantages whitened over the batch (unbiased std, as :func:`grpo`).
    """
    per_term = torch.stack([grpo(terms[:, k], group_ids, eps) for k in range(terms.shape[1])], 1)
    summed = (per_term * weights.to(per_term.dtype)).sum(-1)  # sum_k w_k A_k
    if summed.numel() < 2:
        return summed
    return (summed - summed.mean()) / (summed.std() + eps)  # whitened over the batch


@register_advantage(
    "gdpo",
    paper='Liu et al. 2026, "GDPO", arXiv:2601.05242',
    requires=("reward_terms", "term_weights"),
    group_relative=True,
)
def _gdpo_estimator(inputs: AdvantageInputs, eps: float = 1e-6) -> AdvantageOutput:
    terms = _need("gdpo", inputs, "reward_terms")
    weights = _need("gdpo", inputs, "term_weights")
    return AdvantageOutput(gdpo(terms, weights, inputs.group_ids, eps))
