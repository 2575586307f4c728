"""GVPO: group variance policy optimisation (Zhang et al. 2025, "GVPO: Group Variance Policy
Optimization for Large Language Model Post-Training", arXiv:2504.19599), as the authors' code
computes it (``jszkc/GVPO``, ``compute_policy_loss_gvpo``).

The KL-constrained reward maximisation has the closed-form optimum pi* ∝ pi_old exp(R / beta),
so under pi* the implicit reward beta log(pi / pi_old) equals R up to a per-prompt constant.
GVPO regresses one on the other within each group, both centred (the constant cancels):

    r_i = beta sum_t [log pi(o_i,t) - log pi_old(o_i,t)]          (a sequence's implicit reward)
    L_q = 1 / (2 (G - 1)) sum_i [(r_i - mean_j r_j) - (R_i - mean_j R_j)]^2

with the group mean of r detached, as in the authors' code (it changes no gradient: the
residuals sum to 0). Its gradient is beta / (G - 1) [(r_i - r̄) - (R_i - R̄)] grad log pi(o_i):
on-policy (r = 0) that is -beta / (G - 1) (R_i - R̄) grad log pi(o_i), Dr. GRPO's direction,
and off-policy the implicit-reward term pulls each sample back to where its reward puts it
instead of a clip. Rewards are centred, not divided by their spread (the authors' runs set
``norm_adv_by_std_in_grpo=False``); any real reward works.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.objectives import register_objective


@register_objective(
    "gvpo",
    kind="groups",
    citation=(
        "Zhang et al. 2025, GVPO: Group Variance Policy Optimization for Large Language Model "
        "Post-Training, arXiv:2504.19599 (the authors' compute_policy_loss_gvpo)"
    ),
    summary="per group, the centred implicit rewards beta log(pi / pi_old) (sequence sums) "
    "regressed on the centred rewards: (1 / (2 (G - 1))) sum_i [(r_i - r̄) - (R_i - R̄)]^2",
)
def gvpo_loss(
    groups: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    beta: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """GVPO on one micro-batch of whole questions (the ``groups`` objective kind).

    Args:
        groups: ``(logp, old_logp, mask, rewards)``: [g, G, T] log pi (with gradient) and
            log pi_old of the completion tokens, the [g, G, T] mask, the [g, G] rewards.
        beta: the KL constraint's strength (0.1 in the authors' runs), > 0.
    Returns:
        J_q = -L_q [g] (the kind maximises J), a zero penalty, and the micro-batch's mean
        ``implicit_reward`` (r, detached) and ``residual`` (the root mean square of the
        bracket over the samples).
    """
    if beta <= 0:
        raise ValueError(f"gvpo: beta must be > 0, got {beta}")
    logp, old_logp, mask, rewards = groups
    g, n, _ = logp.shape
    if n < 2:
        raise ValueError("gvpo: a group needs at least 2 samples (it divides by G - 1)")
    implicit = beta * ((logp - old_logp) * mask).sum(-1)  # r_i = beta log(pi / pi_old) [g, G]
    centred = implicit - implicit.detach().mean(-1, keepdim=True)
    advantage = rewards.to(implicit.dtype) - rewards.to(implicit.dtype).mean(-1, keepdim=True)
    residual = centred - advantage
    losses = 0.5 * (residual**2).sum(-1) / (n - 1)  # L_q [g]
    info = {
        "implicit_reward": implicit.detach().mean(),
        "residual": residual.detach().pow(2).mean().sqrt(),
    }
    return -losses, torch.zeros((), dtype=losses.dtype, device=losses.device), info
