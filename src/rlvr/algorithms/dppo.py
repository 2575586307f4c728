"""DPPO: a trust region on the probability, not the ratio (Qi et al. 2026, Sea AI Lab,
"Rethinking the Trust Region in LLM Reinforcement Learning", arXiv:2602.04879).

PPO's ratio clip bounds pi / mu, which says little about how far a token's probability
moved: a rare token (mu = 1e-4) leaves the region after a tiny change, a common one
(mu = 0.9) can move a lot before it does. DPPO keeps the policy-gradient update of a token
while its *probability* has not left a divergence region in the direction its advantage pushes,
and drops it (no gradient) once it has (the paper's L^DPPO and mask M^DPPO, section "Divergence
Proximal Policy Optimization"):

    L_{i,t} = -A_{i,t} * sg[min(r_{i,t}, C)] * log pi(y_t) * M_{i,t}

with r = pi / mu truncated at C (a truncated importance weight; the authors' code caps it at
C = 20), and M = 0 where (A > 0 and r > 1 and D > delta_high) or (A < 0 and r < 1 and
D > delta_low), 1 elsewhere:

* Binary-TV (``dppo_tv``): D = |pi - mu|, the total-variation distance of the two Bernoulli
  distributions (the sampled token or not), so M = (pi - mu <= delta_high) for A > 0,
  (pi - mu >= -delta_low) for A < 0;
* Binary-KL (``dppo_kl``): D = mu log(mu / pi) + (1 - mu) log((1 - mu) / (1 - pi)), the KL of
  those Bernoullis; M = (D <= delta_high or pi <= mu) for A > 0, (D <= delta_low or pi >= mu)
  for A < 0.

mu is the **sampler's** policy: the rollout engine's log-probs of the sampled tokens, not a
pi_old recomputed by the trainer. The paper finds the anchor decisive (section "The Correct
Anchor for the Trust Region", Takeaway 2: the trust region must be defined with respect to the
original behavior policy; a recomputed anchor lets the training-inference mismatch grow until
collapse), and its r and D are of pi against mu throughout, so both kinds are registered
``sampler_anchored``: the learner passes the sampler's log-probs as their second argument, and
on-policy (pi_old = pi) DPPO still masks the tokens the update would push further from mu.

``clip_low`` / ``clip_high`` are delta_low / delta_high (probability for ``dppo_tv``, nats for
``dppo_kl``; not ratio offsets). Unset in a config that switches a ratio-clipping preset to
DPPO, they are the functions' own defaults: 0.2 for ``dppo_tv``, 0.05 for ``dppo_kl``
(:func:`rlvr.algorithms.resolve`). ``ratio_cap`` (a key of ``algorithm.policy_loss``) is C.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.losses import LossOutput, _per_token, loss_info, register_policy_loss

RATIO_CAP = 20.0
"""C: the importance weight is truncated at this value."""


def _dppo(
    logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    advantages: torch.Tensor,
    valid_pos: torch.Tensor,
    valid_neg: torch.Tensor,
    ratio_cap: float,
) -> LossOutput:
    """The DPPO loss given the [B, T] region tests M for A > 0 and A < 0 (see the module)."""
    adv = _per_token(advantages)
    ratio = torch.exp((logp - sampler_logp).detach().clamp(-20.0, 20.0))  # r = pi / mu
    weight = ratio.clamp(max=ratio_cap)  # sg[min(r, C)]
    valid = torch.where(adv > 0, valid_pos, valid_neg)  # M
    loss = -adv * weight * logp * valid  # L = -A sg[min(r, C)] log pi M
    truncated = (ratio > ratio_cap) & valid  # reported as "dual-clipped": the weight was capped
    outside_low, outside_high = (adv < 0) & ~valid, (adv > 0) & ~valid
    return loss, loss_info(ratio, logp, sampler_logp, outside_low, outside_high, truncated)


def dppo_tv_policy_loss(
    logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    ratio_cap: float = RATIO_CAP,
) -> LossOutput:
    """DPPO-Binary-TV (arXiv:2602.04879, Eq. for D_TV^Bin).

    Args:
        logp: [B, T] log pi of the sampled tokens (with grad).
        sampler_logp: [B, T] log mu, the sampler's (rollout engine's) log-probs of the same
            tokens (no grad): the trust region's anchor.
        advantages: [B] or [B, T].
        clip_low, clip_high: delta_low, delta_high on pi - mu.
        ratio_cap: C, the truncation of r = pi / mu.
    Returns:
        loss [B, T] and metrics (``ratio``: r; ``is_clipped_*``: outside the region;
        ``is_dual_clipped``: weight truncated; ``approx_kl``: KL(mu || pi)).
    """
    moved = (logp.exp() - sampler_logp.exp()).detach()  # pi - mu
    valid_pos, valid_neg = moved <= clip_high, moved >= -clip_low
    return _dppo(logp, sampler_logp, advantages, valid_pos, valid_neg, ratio_cap)


def binary_kl(old_logp: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
    """[B, T] KL(Bernoulli(p_old) || Bernoulli(p)) of the sampled tokens, from their log-probs
    (DPPO's D_KL^Bin with p_old = mu, the sampler's, and p = pi)."""
    p_old, p = old_logp.exp(), logp.exp()
    rest = torch.log1p(-p_old.clamp(max=1 - 1e-7)) - torch.log1p(-p.clamp(max=1 - 1e-7))
    return p_old * (old_logp - logp) + (1 - p_old) * rest


def dppo_kl_policy_loss(
    logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.05,
    clip_high: float = 0.05,
    ratio_cap: float = RATIO_CAP,
) -> LossOutput:
    """DPPO-Binary-KL (arXiv:2602.04879, Eq. for D_KL^Bin). As :func:`dppo_tv_policy_loss`,
    with delta_low / delta_high (default 0.05 nats) bounding the binary KL(mu || pi) in the
    direction the advantage pushes."""
    kl = binary_kl(sampler_logp, logp).detach()  # D
    up = logp.detach() > sampler_logp  # r > 1
    valid_pos = (kl <= clip_high) | ~up  # A > 0: M = 0 iff r > 1 and D > delta_high
    valid_neg = (kl <= clip_low) | (logp.detach() >= sampler_logp)  # A < 0: r < 1 and D > delta
    return _dppo(logp, sampler_logp, advantages, valid_pos, valid_neg, ratio_cap)


_PAPER = 'Sea AI Lab 2026, "Rethinking the Trust Region in LLM RL", arXiv:2602.04879'
register_policy_loss(
    "dppo_tv",
    paper=_PAPER,
    clip_space="probability",
    sampler_anchored=True,
    summary="DPPO: trust region on pi - pi_sampler (TV)",
)(dppo_tv_policy_loss)
register_policy_loss(
    "dppo_kl",
    paper=_PAPER,
    clip_space="divergence",
    sampler_anchored=True,
    summary="DPPO: trust region on the binary KL to the sampler",
)(dppo_kl_policy_loss)
