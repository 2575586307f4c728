"""HAPO's Token Level Group Average, TLGA (Liu et al. 2025, "From Uniform to Heterogeneous:
Tailoring Policy Optimization to Every Token's Nature", arXiv:2509.16591), as the authors' code
computes it (``starriver030515/HAPO``, ``compute_hapo_outcome_advantage``).

GRPO normalises a group's rewards over its responses, each counted once, while a token-mean
loss then weighs each response by its length. TLGA normalises over the group's tokens: every
completion token carries its response's reward, and the mean and std are over all of them,

    mu_g    = sum_i L_i r_i / sum_i L_i                         (L_i: response i's tokens)
    sigma_g = sqrt(sum_i L_i (r_i - mu_g)^2 / sum_i L_i)       (population std)
    A_i     = (r_i - mu_g) / (sigma_g + 1e-6)                  (every token of response i)

so the token-weighted advantages of a group sum to zero. Where a group's TLGA advantage
reaches |A| >= 5 (a rare outcome carried by few tokens) the group falls back to GRPO's
sequence-level advantage. A group of one gets GRPO's (its reward), as rlvr's GRPO does.

Differences from the authors' code: the fallback looks at the responses' advantages only
(theirs also at the padding positions, where the value is -mu / sigma, so a group with padding
and equal rewards falls back to GRPO's 0 too: the same result); the lengths are the completion
tokens the loss trains on (``mask``). HAPO's other parts are not built: Differential Advantage
Redistribution and Asymmetric Adaptive Clipping need the current policy's token entropy in the
loss, and Adaptive Temperature Sampling a per-token temperature in the engines; the authors'
entropy score h_hat = where(h > 0, h / max h, h / min h) is non-negative for every token (their
code's scale for h < 0 has the wrong sign), so as released those parts widen and amplify at
both entropy extremes instead of the paper's asymmetric treatment.
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


def token_level_group_average(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    lengths: torch.Tensor,
    eps: float = 1e-6,
    fallback: float = 5.0,
) -> torch.Tensor:
    """TLGA's advantages [N] (see the module).

    Args:
        rewards: [N] rewards.
        group_ids: [N] the group (prompt) of each sample.
        lengths: [N] the completion tokens of each sample (> 0; an empty completion counts 1).
        eps: added to the token-weighted std.
        fallback: a group with any |A| >= this takes GRPO's advantages (eps 1e-6).
    Returns:
        [N] advantages, the same for every token of a response.
    """
    if lengths.shape != rewards.shape:
        raise ValueError(
            f"lengths must be [N] like rewards, got {tuple(lengths.shape)} and "
            f"{tuple(rewards.shape)}"
        )
    r = rewards.to(torch.float64)
    w = lengths.to(r.dtype).clamp_min(1.0)
    _, inverse, count, tokens = _group_sums(w, group_ids)
    weighted = torch.zeros_like(tokens).index_add_(0, inverse, w * r)
    mean = weighted / tokens  # mu_g = sum L r / sum L
    sq_dev = torch.zeros_like(tokens).index_add_(0, inverse, w * (r - mean[inverse]) ** 2)
    std = (sq_dev / tokens).sqrt()  # sigma_g, population (unbiased=False)
    tlga = (r - mean[inverse]) / (std[inverse] + eps)
    extreme = torch.zeros_like(tokens).index_add_(0, inverse, (tlga.abs() >= fallback).to(r.dtype))
    use_grpo = (extreme[inverse] > 0) | (count[inverse] == 1)
    return torch.where(use_grpo, grpo(r, group_ids, 1e-6), tlga).to(rewards.dtype)


@register_advantage(
    "hapo",
    paper='Liu et al. 2025, "From Uniform to Heterogeneous: Tailoring Policy Optimization to '
    "Every Token's Nature\" (HAPO's Token Level Group Average), arXiv:2509.16591",
    requires=("mask",),
    group_relative=True,
)
def _hapo_estimator(
    inputs: AdvantageInputs, eps: float = 1e-6, fallback: float = 5.0
) -> AdvantageOutput:
    mask = _need("hapo", inputs, "mask")
    lengths = mask.sum(-1)
    return AdvantageOutput(
        token_level_group_average(inputs.rewards, inputs.group_ids, lengths, eps, fallback)
    )
