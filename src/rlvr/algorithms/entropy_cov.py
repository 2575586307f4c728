"""Clip-Cov and KL-Cov: hold policy entropy up by restraining the few tokens whose log-prob
covaries most with their advantage (Cui et al. 2025, "The Entropy Mechanism of Reinforcement
Learning for Reasoning Language Models", arXiv:2505.22617, Sec. 4).

Under a softmax policy, one update changes the entropy by about -Cov(log pi(y_t), A_t): tokens
that are both likely and well rewarded (or unlikely and penalised) drive the entropy collapse.
The paper measures each token's share of that covariance over the tokens of the batch,

    Cov_t = (A_t - mean A) (log pi(y_t) - mean log pi)        (means over the valid tokens),

and restrains the tokens of largest covariance:

    Clip-Cov: of the tokens with omega_low < Cov_t < omega_high that PPO's clip has not already
              cut, pick r N at random (N valid tokens, at least one) and take their gradient
              out of the loss (their loss is 0); the rest is PPO's clipped loss.
    KL-Cov:   L_t = -A_t rho_t (no clip) on every token, plus beta |log pi(y_t) - log pi_old(y_t)|
              on the top k N tokens by Cov_t.

Defaults are the paper's: r = 2e-4, (omega_low, omega_high) = (1, 5); k = 2e-4, beta = 1 (its
recipes also set PPO's clip wide: ``clip_low: 1``, ``clip_high`` large, for Clip-Cov). The means
are over the tokens the loss is given, as in the paper's implementation (verl): the micro-batch
(both kinds are registered with ``batch_statistics``, so ``train.micro_batch_size`` changes their
selection). Clip-Cov's random pick draws from its own generator seeded with ``seed``, the key of
the call's stream: the learner passes stream_key(train.seed, its minibatches so far, the
micro-batch's first row), a new stream at every minibatch, a skipped optimizer step's too (the
paper's code draws from one advancing global generator), that a resumed run draws again (the
count is checkpointed). Select with ``algorithm.policy_loss.name: clip_cov`` or ``kl_cov``
(``policy_loss: {name: clip_cov, ratio: ..., ...}``).
"""

from __future__ import annotations

import torch

from rlvr.algorithms.losses import (
    LossOutput,
    _clipped_surrogate,
    _per_token,
    loss_info,
    register_policy_loss,
)


def token_covariance(
    logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Cov_t = (A_t - mean A)(log pi_t - mean log pi) [B, T], means over the valid tokens of
    ``mask``; 0 on masked-out tokens. ``logp`` is detached."""
    m = mask.to(torch.bool)
    adv = _per_token(advantages).expand_as(logp).detach().to(logp.dtype)
    lp = logp.detach()
    count = m.sum().clamp_min(1)
    adv_mean = torch.where(m, adv, 0).sum() / count
    lp_mean = torch.where(m, lp, 0).sum() / count
    return torch.where(m, (adv - adv_mean) * (lp - lp_mean), 0)


def clip_cov_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    ratio: float = 2e-4,
    cov_low: float = 1.0,
    cov_high: float = 5.0,
    seed: int = 0,
) -> LossOutput:
    """Clip-Cov's per-token loss (see the module docstring).

    Args:
        logp: [B, T] log pi (with grad); old_logp: [B, T] log pi_old.
        advantages: [B] or [B, T]; mask: [B, T] the valid tokens.
        clip_low, clip_high: PPO's clip range.
        ratio: r, the fraction of valid tokens taken out (at least one when any qualifies).
        cov_low, cov_high: omega_low < Cov < omega_high picks the candidates.
        seed: the key of this call's random stream (the pick's generator seed; the learner
            passes a new one per minibatch and micro-batch).
    Returns:
        loss [B, T] and metrics; ``is_cov_detached`` [B, T] marks the tokens taken out.
    """
    adv = _per_token(advantages)
    rho = torch.exp(logp - old_logp)
    loss, flags = _clipped_surrogate(rho, adv, clip_low, clip_high, None)
    clipped_by_ppo = (-adv * rho.detach().clamp(1 - clip_low, 1 + clip_high)) > (
        -adv * rho.detach()
    )
    cov = token_covariance(logp, advantages, mask)
    valid = mask.to(torch.bool)
    candidates = valid & (cov > cov_low) & (cov < cov_high) & ~clipped_by_ppo
    n_pick = max(int(ratio * int(valid.sum())), 1)
    where = candidates.flatten().nonzero().squeeze(-1)
    generator = torch.Generator().manual_seed(seed)
    chosen = where[torch.randperm(where.numel(), generator=generator)[:n_pick].to(where.device)]
    detached = torch.zeros(loss.numel(), dtype=torch.bool, device=loss.device)
    detached[chosen] = True
    detached = detached.view_as(loss)
    loss = torch.where(detached, 0.0, loss)  # their gradient taken out
    info = loss_info(rho, logp, old_logp, flags["is_clipped_low"], flags["is_clipped_high"])
    info["is_cov_detached"] = detached
    return loss, info


def kl_cov_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ratio: float = 2e-4,
    coef: float = 1.0,
) -> LossOutput:
    """KL-Cov's per-token loss (see the module docstring).

    Args:
        logp: [B, T] log pi (with grad); old_logp: [B, T] log pi_old.
        advantages: [B] or [B, T]; mask: [B, T] the valid tokens.
        ratio: k, the fraction of valid tokens penalised (at least one).
        coef: beta, the weight of |log pi - log pi_old| on them.
    Returns:
        loss [B, T] and metrics; ``is_cov_penalised`` [B, T] marks the penalised tokens.
    """
    adv = _per_token(advantages)
    rho = torch.exp(logp - old_logp)
    loss = -adv * rho  # L = -A rho, unclipped
    cov = token_covariance(logp, advantages, mask)
    valid = mask.to(torch.bool)
    n_valid = int(valid.sum())
    penalised = torch.zeros_like(valid)
    if n_valid:
        k = max(int(ratio * n_valid), 1)
        ranked = torch.where(valid, cov, float("-inf")).flatten()
        penalised.view(-1)[torch.topk(ranked, k).indices] = True
    loss = loss + torch.where(penalised, coef * (logp - old_logp).abs(), 0.0)  # + beta |log rho|
    info = loss_info(rho, logp, old_logp)
    info["is_cov_penalised"] = penalised
    return loss, info


register_policy_loss(
    "clip_cov",
    paper='Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs", arXiv:2505.22617',
    batch_statistics=True,
    summary="Clip-Cov: high-covariance tokens' gradient out",
)(clip_cov_policy_loss)
register_policy_loss(
    "kl_cov",
    paper='Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs", arXiv:2505.22617',
    clip_space=None,
    batch_statistics=True,
    summary="KL-Cov: |log ratio| penalty on the top-covariance tokens",
)(kl_cov_policy_loss)
