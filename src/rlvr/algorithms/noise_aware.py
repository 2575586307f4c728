"""Noise-aware advantage reweighting (Shen, Shen, Zhao and Zhu 2025, "Mitigating Think-Answer
Mismatch in LLM Reasoning Through Noise-Aware Advantage Reweighting", arXiv:2508.05928; the
paper's S-GRPO), as the authors' code computes it (``shenpeijun0212/S-GRPO``,
``train/train_S-GRPO.py``: ``group_weight`` and ``compute_monte_carlo_advantages``; the paper's
text could not be read here).

An outcome reward judges the answer, not the thinking: a right answer after wrong reasoning, or
a wrong one after right reasoning (think-answer mismatch), flips the reward the reasoning
deserved. With each 0/1 reward flipped with probability p < 1/2, a group's observed success rate
r_bar = k / n (k: its rewards above 0) is p + (1 - 2p) t of its true rate t, and the group's
advantages are scaled by how much of their spread is signal rather than noise:

    t   = clip((r_bar - p) / (1 - 2p), 0, 1)
    w*  = (1 - 2p) t (1 - t) / (sqrt(r_bar (1 - r_bar) + e) sqrt(t (1 - t) + e))     e = 1e-8
    A_i = w* (r_i - mean_g r) / (std_g r + 1e-8)                           (std unbiased, / (n - 1))

w* is 0 where the observed rate is within p of 0 or 1 (the group's few right, or wrong, answers
may be noise) and 1 - 2p at r_bar = 1/2; n = 8, p = 0.1, k = 0..8: 0, 0.42, 0.72, 0.78, 0.80,
0.78, 0.72, 0.42, 0. The authors use p = 0.1 for Qwen-Math-7B and 0.15 for smaller models. A
group of one gets A = r (baseline 0, scale 1), as rlvr's GRPO.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    _group_sums,
    register_advantage,
)


def noise_weights(success_rate: torch.Tensor, p: float, eps: float = 1e-8) -> torch.Tensor:
    """w* of groups with observed success rates ``success_rate`` [K] under the reward flip
    probability ``p`` (see the module)."""
    if not 0.0 <= p < 0.5:
        raise ValueError(f"noise_aware: the flip probability p must be in [0, 0.5), got {p}")
    r = success_rate.to(torch.float64)
    t = ((r - p) / (1 - 2 * p)).clamp(0.0, 1.0)
    return (1 - 2 * p) * t * (1 - t) / ((r * (1 - r) + eps).sqrt() * (t * (1 - t) + eps).sqrt())


def noise_aware_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, p: float = 0.1, eps: float = 1e-8
) -> torch.Tensor:
    """Noise-aware GRPO advantages [N]: each group's GRPO advantages (unbiased std) times w*.

    Args:
        rewards: [N] rewards (0/1 from a verifier; k counts those above 0).
        group_ids: [N] long group id of every sample.
        p: the probability that a reward is flipped (0.1 in the authors' 7B runs).
        eps: added to the std.
    Returns:
        [N] advantages.
    """
    r, inverse, count, total = _group_sums(rewards.to(torch.float64), group_ids)
    right = torch.zeros_like(total).index_add_(0, inverse, (r > 0).to(torch.float64))
    mean = total / count
    squares = torch.zeros_like(total).index_add_(0, inverse, (r - mean[inverse]) ** 2)
    std = (squares / (count - 1).clamp_min(1)).sqrt()
    weight = noise_weights(right / count, p)
    advantages = weight[inverse] * (r - mean[inverse]) / (std[inverse] + eps)
    return torch.where(count[inverse] > 1, advantages, r).to(rewards.dtype)


@register_advantage(
    "noise_aware",
    paper='Shen et al. 2025, "Mitigating Think-Answer Mismatch in LLM Reasoning Through '
    'Noise-Aware Advantage Reweighting", arXiv:2508.05928',
    group_relative=True,
)
def _noise_aware_estimator(
    inputs: AdvantageInputs, p: float = 0.1, eps: float = 1e-8
) -> AdvantageOutput:
    return AdvantageOutput(noise_aware_advantages(inputs.rewards, inputs.group_ids, p, eps))
