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
tokens the loss trains on (``mask``).

HAPO's Differential Advantage Redistribution (DAR) and Asymmetric Adaptive Clipping (AAC) are
the policy loss ``hapo`` (:func:`hapo_policy_loss`), as the authors' code computes them
(``compute_entropy_h``, ``ada_clip``, ``ada_advantage`` in ``verl/trainer/ppo/core_algos.py``).
Each token's entropy under the current policy (no gradient) is scored against the micro-batch's
tokens:

    x     = log max(H, 1e-8),   m = the 0.8-quantile of x over the completion tokens
    h_hat = (x - m) / max_{x > m} (x - m)        above the pivot, in (0, 1]
          = (x - m) / |min_{x < m} (x - m)|      below it, in [-1, 0]

(their extra division by a spread about m cancels here). AAC widens the clip on the side that
suits the token: eps_high' = eps_high (1 + alpha h_hat) for high-entropy tokens (room to
explore), eps_low' = eps_low (1 - alpha h_hat) for low-entropy ones (room to push a noisy
confident token down). DAR then rescales A to A (1 + beta h_hat): a high-entropy token's once its
ratio has left N = (1 - eps_low' / 2, 1 + eps_high' / 2), a low-entropy token's (attenuated)
while its ratio is inside N. The loss is PPO's clipped surrogate with the per-token bounds, and
verl's dual clip for A < 0.

The authors' code scales h <= 0 by 1 / min h, which is negative, so their h_hat is >= 0 for every
token: as released, eps_low never adapts and both entropy extremes are treated as high-entropy
tokens. ``as_released: true`` reproduces that; the default is the asymmetric treatment the
paper describes ("aggressive probability reduction for noisy low-entropy tokens while enabling
exploration for high-entropy tokens"). HAPO's Adaptive Temperature Sampling is the rollout's
``temperature_tau`` (:class:`rlvr.rollout.base.AdaptiveTemperature`, the torch engine's sampler).
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
from rlvr.algorithms.losses import clipped_policy_loss, register_policy_loss


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


def entropy_scores(
    entropy: torch.Tensor, mask: torch.Tensor, pivot: float = 0.8, as_released: bool = False
) -> torch.Tensor:
    """HAPO's h_hat [B, T] (see the module): each token's log-entropy against the ``pivot``
    quantile of the ``mask`` [B, T] tokens' (the loss's mask: the micro-batch's completion
    tokens, as the authors' response mask), scaled into [-1, 1] (``as_released``: the authors'
    code's [0, 1]); 0 outside ``mask``."""
    if not 0 <= pivot <= 1:
        raise ValueError(f"hapo: pivot must be in [0, 1], got {pivot}")
    valid = mask.bool()
    if not bool(valid.any()):
        return torch.zeros_like(entropy)
    x = entropy.detach().clamp_min(1e-8).log()
    h = x - torch.quantile(x[valid], pivot, interpolation="nearest")
    top = h[valid & (h > 0)].max() if bool((valid & (h > 0)).any()) else h.new_tensor(1e-8)
    bottom = h[valid & (h < 0)].min() if bool((valid & (h < 0)).any()) else h.new_tensor(-1e-8)
    below = h / bottom if as_released else h / bottom.abs()
    return torch.where(h > 0, h / top, below) * valid


@register_policy_loss(
    "hapo",
    dual_clip=True,
    batch_statistics=True,
    paper='Liu et al. 2025, "From Uniform to Heterogeneous: Tailoring Policy Optimization to '
    "Every Token's Nature\" (HAPO), arXiv:2509.16591",
    summary="HAPO's DAR and AAC: each token's clip bounds widened (eps_high for high-entropy, "
    "eps_low for low-entropy tokens) and its advantage rescaled by (1 + beta h_hat), h_hat its "
    "current entropy against the micro-batch's 0.8-quantile",
)
def hapo_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    entropy: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    adv_beta: float = 1.0,
    clip_alpha: float = 1.0,
    pivot: float = 0.8,
    as_released: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """HAPO's policy loss [B, T] (see the module).

    Args:
        logp, old_logp: [B, T] log pi (with gradient) and log pi_old of the sampled tokens.
        advantages: [B] or [B, T] (HAPO's own: the ``hapo`` advantage, TLGA).
        mask: [B, T] the trained tokens (the entropy quantile is over them).
        entropy: [B, T] the current policy's token entropy (filled by the learner; detached).
        clip_low, clip_high: eps_low and eps_high before adaptation (0.2 in their runs).
        dual_clip: the bound c for A < 0 (10 in their runs), or None.
        adv_beta: DAR's beta (1 in their runs), >= 0.
        clip_alpha: AAC's alpha (1 in their runs), >= 0.
        pivot: the entropy quantile h_hat is measured from (0.8 in their runs).
        as_released: the authors' code's h_hat >= 0 (see the module).
    Returns:
        the loss and :func:`~rlvr.algorithms.losses.clipped_policy_loss`'s metrics, plus
        ``entropy_score`` (h_hat).
    """
    if adv_beta < 0 or clip_alpha < 0:
        raise ValueError(
            f"hapo: adv_beta and clip_alpha must be >= 0, got {adv_beta}, {clip_alpha}"
        )
    with torch.no_grad():
        h_hat = entropy_scores(entropy, mask, pivot, as_released)
        low = torch.where(h_hat <= 0, clip_low * (1 - clip_alpha * h_hat), clip_low)  # AAC
        high = torch.where(h_hat > 0, clip_high * (1 + clip_alpha * h_hat), clip_high)
        ratio = torch.exp(logp.detach() - old_logp)
        inside = (ratio > 1 - low / 2) & (ratio < 1 + high / 2)  # DAR's neutral zone N
        adv = advantages if advantages.dim() == 2 else advantages[:, None].expand_as(logp)
        scaled = adv * (1 + adv_beta * h_hat)
        adv = torch.where(
            h_hat > 0, torch.where(inside, adv, scaled), torch.where(inside, scaled, adv)
        )
    loss, info = clipped_policy_loss(logp, old_logp, adv, low, high, dual_clip)
    return loss, {**info, "entropy_score": h_hat}
