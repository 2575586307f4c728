"""Lp-Reg: low-probability regularisation (Huang et al. 2025, "Low-probability Tokens Sustain
Exploration in Reinforcement Learning with Verifiable Reward", arXiv:2510.03222), as the
authors' code computes it (``CarlanLark/Lp-Reg-dev``: ``apply_min_p`` and
``compute_policy_loss_lp_reg``).

RLVR's entropy collapse removes the low-probability "reasoning sparks" (wait, however, ...)
that exploration needs, and a plain entropy bonus amplifies noise tokens instead. Lp-Reg
regularises towards a proxy that keeps the plausible low-probability tokens and drops the noise:

1. The proxy ``pi_proxy`` is pi_old filtered by min-p, then renormalised: the tokens with
   ``pi_old(v) >= kappa * max_u pi_old(u)`` keep their relative probabilities, the others get
   none (kappa 0.02 in the authors' runs). :func:`min_p_proxy_logprobs`.
2. Among the micro-batch's tokens with a negative advantage, the ``rho`` fraction of lowest
   current probability (k = max(1, int(n rho)), only when k > 1; rho 0.01 in their runs) that
   the proxy rates above the policy (``log pi < log pi_proxy``, so never a filtered one) are
   regularised.
3. Their loss is the unclipped ``-A rho_t + beta k3(pi_proxy / pi)`` with the low-variance
   k3 ``exp(d) - d - 1``, ``d = clamp(log pi_proxy - log pi, -10, 10)`` (beta 1); every other
   token keeps the clipped surrogate. k3 on tokens sampled from pi estimates KL(pi || pi_proxy);
   its gradient ``(1 - pi_proxy / pi) grad log pi`` lifts a token the proxy rates above pi.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.losses import clipped_policy_loss, register_policy_loss

#: Where the filtered tokens' proxy log-probs stand (they are never regularised).
FILTERED = float("-inf")


def min_p_proxy_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, kappa: float, temperature: float = 1.0
) -> torch.Tensor:
    """log pi_proxy(y_k) [K] of the min-p filtered, renormalised distribution.

    Args:
        logits: [K, V] the logits that predict the K tokens ``targets`` [K].
        kappa: the relative threshold: a token is kept when its probability is at least kappa
            times the largest (``apply_min_p``'s dynamic threshold), in [0, 1].
        temperature: the logits are divided by it first (the sampling temperature).
    Returns:
        [K] ``log pi(y) - log sum_{kept v} pi(v)`` for a kept target, :data:`FILTERED` (-inf)
        for a filtered one.
    """
    if not 0.0 <= kappa <= 1.0:
        raise ValueError(f"lp_reg: kappa must be in [0, 1], got {kappa}")
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # [K, V]
    kept = logp >= logp.amax(-1, keepdim=True) + torch.log(torch.tensor(kappa))  # p >= kappa max
    log_kept_mass = torch.logsumexp(logp.masked_fill(~kept, FILTERED), dim=-1)  # [K]
    target = logp.gather(-1, targets[:, None])[:, 0]
    target_kept = kept.gather(-1, targets[:, None])[:, 0]
    return torch.where(target_kept, target - log_kept_mass, FILTERED)


def lp_reg_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    proxy_logp: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    kappa: float = 0.02,
    rho: float = 0.01,
    beta: float = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Lp-Reg's per-token loss [B, T] (see the module docstring).

    Args:
        logp: [B, T] log pi (requires grad); old_logp: [B, T] log pi_old.
        advantages: [B] or [B, T].
        mask: [B, T] the tokens the loss sees (the selection counts only these).
        proxy_logp: [B, T] log pi_proxy of the sampled tokens (-inf where min-p filtered them),
            the learner's min-p pass of pi_old with this ``kappa``.
        clip_low, clip_high, dual_clip: the clipped surrogate's, for the other tokens.
        kappa: the min-p threshold of the proxy (read by the learner's pass).
        rho: the fraction of the negative-advantage tokens, lowest probability first, that may
            be regularised (``logp_neg_k_percent``).
        beta: the regulariser's weight (``ppo_kl_coef``).
    Returns:
        the loss and :func:`clipped_policy_loss`'s metrics (clip flags cleared on the
        regularised tokens), plus ``is_lp_regularised``.
    """
    if not 0.0 <= rho <= 1.0 or beta < 0:
        raise ValueError(f"lp_reg: rho must be in [0, 1] and beta >= 0, got {rho} and {beta}")
    clipped, info = clipped_policy_loss(logp, old_logp, advantages, clip_low, clip_high, dual_clip)
    adv = advantages.unsqueeze(-1).expand_as(logp) if advantages.dim() == 1 else advantages
    with torch.no_grad():
        negative = (mask > 0) & (adv < 0)
        n = int(negative.sum())
        k = max(1, int(n * rho))
        chosen = torch.zeros_like(negative)
        if k > 1:
            scores = logp.detach().masked_fill(~negative, float("inf")).flatten()
            chosen.view(-1)[scores.topk(k, largest=False).indices] = True
        chosen &= logp.detach() < proxy_logp
    d = torch.where(chosen, proxy_logp, logp.detach()) - logp  # 0 off the chosen tokens
    d = d.clamp(-10.0, 10.0)
    k3 = torch.exp(d) - d - 1.0
    regularised = -adv * torch.exp(logp - old_logp) + beta * k3  # unclipped
    loss = torch.where(chosen, regularised, clipped)
    for flag in ("is_clipped_low", "is_clipped_high", "is_dual_clipped"):
        info[flag] = info[flag] & ~chosen
    return loss, {**info, "is_lp_regularised": chosen}


register_policy_loss(
    "lp_reg",
    paper='Huang et al. 2025, "Low-probability Tokens Sustain Exploration in Reinforcement '
    'Learning with Verifiable Reward", arXiv:2510.03222',
    dual_clip=True,
    batch_statistics=True,
    min_p_proxy=True,
    summary="Lp-Reg: the clipped surrogate, and on the lowest-probability negative-advantage "
    "tokens -A rho + beta k3 towards pi_old's min-p filtered proxy",
)(lp_reg_policy_loss)
