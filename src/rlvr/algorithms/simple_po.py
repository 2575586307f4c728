"""SPO: a quadratic penalty on the ratio instead of PPO's clip (Xie et al. 2024, "Simple Policy
Optimization", arXiv:2401.16025, ICML 2025; the objective as in the authors' released code).

PPO's clip zeroes a token's gradient once its ratio leaves [1 - eps, 1 + eps], so nothing pulls
a ratio that has overshot back into the trust region. SPO maximises

    rho A - |A| / (2 eps) (rho - 1)^2,   i.e.   L_t = -[rho_t A_t - |A_t| / (2 eps) (rho_t - 1)^2]

whose gradient in log pi, -rho (A - |A| (rho - 1) / eps), vanishes exactly at rho = 1 + sign(A)
eps (the clip's boundary) and points back towards it beyond. ``eps`` is the run's
``clip_high`` for A > 0 and ``clip_low`` for A < 0: with the two equal (0.2, the paper's and
the default), it is the paper's single eps. Tokens past the boundary are logged as the clip's
(``is_clipped_high`` / ``is_clipped_low``), though their gradient is not zero: it is the pull
back.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.losses import LossOutput, _per_token, loss_info, register_policy_loss


@register_policy_loss(
    "simple_po",
    paper='Xie et al. 2024, "Simple Policy Optimization", arXiv:2401.16025',
    summary="SPO: quadratic penalty |A| / (2 eps) (rho - 1)^2 instead of the clip",
)
def simple_po_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> LossOutput:
    """SPO's per-token loss (see the module).

    Args:
        logp: [B, T] log pi of the sampled tokens (requires grad).
        old_logp: [B, T] log pi_old of the same tokens.
        advantages: [B] per-sequence or [B, T] per-token advantages.
        clip_low, clip_high: eps for A < 0 and A > 0 (> 0).
    Returns:
        loss [B, T] (unmasked) and the detached metrics of :func:`loss_info`.
    """
    if not (clip_low > 0 and clip_high > 0):
        raise ValueError(f"SPO needs eps > 0, got clip_low {clip_low}, clip_high {clip_high}")
    adv = _per_token(advantages)
    ratio = torch.exp(logp - old_logp)
    eps = torch.where(adv > 0, logp.new_tensor(clip_high), logp.new_tensor(clip_low))
    loss = -(ratio * adv - adv.abs() / (2 * eps) * (ratio - 1) ** 2)
    past_low = (adv < 0) & (ratio < 1 - clip_low)
    past_high = (adv > 0) & (ratio > 1 + clip_high)
    return loss, loss_info(ratio, logp, old_logp, past_low.detach(), past_high.detach())
