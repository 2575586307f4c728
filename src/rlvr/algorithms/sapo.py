"""SAPO: a soft, sign-dependent gate instead of the hard ratio clip (Qwen Team 2025, "Soft
Adaptive Policy Optimization", arXiv:2511.20347).

PPO's clip drops a token's gradient entirely once its ratio leaves [1 - eps, 1 + eps]. SAPO
multiplies the advantage by a smooth function of the ratio whose slope is 1 at rho = 1 and
decays away from it, so far-off-policy tokens are attenuated, not cut:

    L_{i,t} = -f_tau(rho_{i,t}) * A_{i,t},   f_tau(rho) = (4 / tau) * sigmoid(tau * (rho - 1)),

so d f / d log pi = 4 sigmoid(tau (rho - 1)) (1 - sigmoid(tau (rho - 1))) * rho, which is rho
(the vanilla gradient) at rho = 1. tau = tau_pos for A > 0 and tau_neg for A < 0: the paper
takes tau_neg > tau_pos (negative-advantage tokens are gated faster: their updates spread
probability over the whole vocabulary and destabilise more). ``tau_pos`` / ``tau_neg`` come
from the ``algorithm.policy_loss`` section; ``clip_low`` / ``clip_high`` are not used.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.losses import LossOutput, _per_token, loss_info, register_policy_loss


@register_policy_loss(
    "sapo",
    paper='Qwen Team 2025, "Soft Adaptive Policy Optimization", arXiv:2511.20347',
    clip_space=None,
    summary="SAPO: soft sigmoid gate on the ratio",
)
def sapo_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> LossOutput:
    """SAPO's soft-gated loss (see the module). Args: logp, old_logp [B, T] (logp with grad);
    advantages [B] or [B, T]; tau_pos, tau_neg > 0: the gate's temperature by the sign of A.
    Returns loss [B, T] and metrics (no clipping: the clip flags are all False)."""
    if not (tau_pos > 0 and tau_neg > 0):
        raise ValueError(f"SAPO needs tau_pos, tau_neg > 0, got {tau_pos}, {tau_neg}")
    adv = _per_token(advantages)
    ratio = torch.exp((logp - old_logp).clamp(-20.0, 20.0))
    tau = torch.where(adv > 0, tau_pos, tau_neg).to(logp.dtype)
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)  # f_tau(rho)
    loss = -gate * adv  # L = -f_tau(rho) A
    return loss, loss_info(ratio, logp, old_logp)
