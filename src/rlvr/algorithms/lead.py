"""GRPO-LEAD's difficulty-aware advantage reweighting (Zhang & Zuo 2025, "GRPO-LEAD: A
Difficulty-Aware Reinforcement Learning Approach for Concise Mathematical Reasoning in Language
Models", arXiv:2504.09696, Sec. 3.3; read in the paper and in the authors' verl fork,
``compute_grpo_outcome_advantage`` and ``logistic_reweight``).

A group's difficulty is its share of correct completions rho_q (a reward > 0: the length-dependent
accuracy reward, ``reward.terms: lead_accuracy``, scores correct completions above 0 and wrong
ones -1). GRPO's normalised advantage A~_i is scaled by a logistic weight of rho_q,

    w(rho) = A + (B - A) / (1 + exp(k (rho - rho_0)))        (A 0.4, B 1.5, k 10, rho_0 0.75)
    A_i = A~_i w(rho_q)       if A~_i > 0
    A_i = A~_i w(1 - rho_q)   otherwise

so a right answer to a hard question (low rho) and a wrong answer to an easy one (high rho)
weigh up to B / A = 3.75 times as much as the opposite cases.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    _group_sums,
    grpo,
    register_advantage,
)


def difficulty_weight(
    rho: torch.Tensor, low: float = 0.4, high: float = 1.5, k: float = 10.0, rho0: float = 0.75
) -> torch.Tensor:
    """w(rho) = A + (B - A) / (1 + exp(k (rho - rho_0))) elementwise (A = ``low``, B = ``high``):
    B for rho far below rho_0, A far above, (A + B) / 2 at rho_0."""
    return low + (high - low) / (1 + torch.exp(k * (rho - rho0)))


def lead_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    eps: float = 1e-6,
    low: float = 0.4,
    high: float = 1.5,
    k: float = 10.0,
    rho0: float = 0.75,
) -> torch.Tensor:
    """GRPO-LEAD's advantages [N] (module docstring) of ``rewards`` [N] in groups ``group_ids``
    [N]: GRPO's (``eps`` added to the group's unbiased std; a group of one keeps its reward)
    times w(rho) where positive, w(1 - rho) elsewhere, rho the group's share of rewards > 0."""
    r, inverse, count, _ = _group_sums(rewards, group_ids)
    correct = torch.zeros_like(count).index_add_(0, inverse, (r > 0).to(r.dtype))
    rho = (correct / count)[inverse]
    normalised = grpo(rewards, group_ids, eps)
    weight = torch.where(
        normalised > 0,
        difficulty_weight(rho, low, high, k, rho0),
        difficulty_weight(1 - rho, low, high, k, rho0),
    )
    return normalised * weight


@register_advantage(
    "grpo_lead",
    paper='Zhang & Zuo 2025, "GRPO-LEAD" (Sec. 3.3), arXiv:2504.09696',
    group_relative=True,
)
def _grpo_lead_estimator(
    inputs: AdvantageInputs,
    eps: float = 1e-6,
    low: float = 0.4,
    high: float = 1.5,
    k: float = 10.0,
    rho0: float = 0.75,
) -> AdvantageOutput:
    return AdvantageOutput(
        lead_advantages(inputs.rewards, inputs.group_ids, eps, low, high, k, rho0)
    )
