"""DPPO: a trust region on the probability, not the ratio (Sea AI Lab 2026, "Rethinking the
Trust Region in LLM Reinforcement Learning", arXiv:2602.04879).

PPO's ratio clip bounds pi / pi_old, which says little about how far a token's probability
moved: a rare token (pi_old = 1e-4) leaves the region after a tiny change, a common one
(pi_old = 0.9) can move a lot before it does. DPPO keeps the policy-gradient update of a token
while its *probability* has not left a divergence region in the direction its advantage pushes,
and drops it (no gradient) once it has:

    L_{i,t} = -A_{i,t} * sg[min(rho_{i,t}, C)] * log pi(y_t) * valid_{i,t}

with rho = pi / pi_old truncated at C (a truncated importance weight), and

* Binary-TV (``dppo_tv``): valid = (pi - pi_old <= delta_high) for A > 0,
  (pi - pi_old >= -delta_low) for A < 0: the total-variation distance of the two Bernoulli
  distributions (the sampled token or not) is |pi - pi_old|;
* Binary-KL (``dppo_kl``): D = pi_old log(pi_old / pi) + (1 - pi_old) log((1 - pi_old) / (1 - pi)),
  the KL of those Bernoullis; valid = (D <= delta_high or pi <= pi_old) for A > 0,
  (D <= delta_low or pi >= pi_old) for A < 0.

``clip_low`` / ``clip_high`` are delta_low / delta_high (probability or nats, not ratio
offsets); ``ratio_cap`` (``algorithm.params.policy_loss``) is C.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.losses import LossOutput, _per_token, loss_info, register_policy_loss

RATIO_CAP = 20.0
"""C: the importance weight is truncated at this value."""


def _dppo(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    valid_pos: torch.Tensor,
    valid_neg: torch.Tensor,
    ratio_cap: float,
) -> LossOutput:
    """The DPPO loss given the [B, T] region tests for A > 0 and A < 0 (see the module)."""
    adv = _per_token(advantages)
    ratio = torch.exp((logp - old_logp).detach().clamp(-20.0, 20.0))
    weight = ratio.clamp(max=ratio_cap)  # sg[min(rho, C)]
    valid = torch.where(adv > 0, valid_pos, valid_neg)
    loss = -adv * weight * logp * valid  # L = -A sg[min(rho, C)] log pi 1[in the region]
    truncated = (ratio > ratio_cap) & valid  # reported as "dual-clipped": the weight was capped
    outside_low, outside_high = (adv < 0) & ~valid, (adv > 0) & ~valid
    return loss, loss_info(ratio, logp, old_logp, outside_low, outside_high, truncated)


def dppo_tv_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    ratio_cap: float = RATIO_CAP,
) -> LossOutput:
    """DPPO-Binary-TV. Args: logp, old_logp [B, T] (logp with grad); advantages [B] or [B, T];
    clip_low, clip_high: delta_low, delta_high on pi - pi_old; ratio_cap: C. Returns loss
    [B, T] and metrics (``is_clipped_*``: outside the region, ``is_dual_clipped``: weight
    truncated)."""
    moved = (logp.exp() - old_logp.exp()).detach()  # pi - pi_old
    return _dppo(logp, old_logp, advantages, moved <= clip_high, moved >= -clip_low, ratio_cap)


def binary_kl(old_logp: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
    """[B, T] KL(Bernoulli(pi_old) || Bernoulli(pi)) of the sampled tokens."""
    p_old, p = old_logp.exp(), logp.exp()
    rest = torch.log1p(-p_old.clamp(max=1 - 1e-7)) - torch.log1p(-p.clamp(max=1 - 1e-7))
    return p_old * (old_logp - logp) + (1 - p_old) * rest


def dppo_kl_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.05,
    clip_high: float = 0.05,
    ratio_cap: float = RATIO_CAP,
) -> LossOutput:
    """DPPO-Binary-KL. As :func:`dppo_tv_policy_loss`, with delta_low / delta_high bounding
    the binary KL (nats) in the direction the advantage pushes."""
    kl = binary_kl(old_logp, logp).detach()
    up = logp.detach() > old_logp
    valid_pos = (kl <= clip_high) | ~up
    valid_neg = (kl <= clip_low) | (logp.detach() >= old_logp)
    return _dppo(logp, old_logp, advantages, valid_pos, valid_neg, ratio_cap)


register_policy_loss(
    "dppo_tv",
    paper='Sea AI Lab 2026, "Rethinking the Trust Region in LLM RL", arXiv:2602.04879',
    clip_space="probability",
    summary="DPPO: trust region on pi - pi_old (TV)",
)(dppo_tv_policy_loss)
register_policy_loss(
    "dppo_kl",
    paper='Sea AI Lab 2026, "Rethinking the Trust Region in LLM RL", arXiv:2602.04879',
    clip_space="divergence",
    summary="DPPO: trust region on the binary KL",
)(dppo_kl_policy_loss)
