"""Expert traces inside the groups: LUFFY's mixed-policy GRPO (Yan et al. 2025, "Learning to
Reason under Off-Policy Guidance", arXiv:2504.14945; read in the authors' code,
``luffy/verl/verl/mix_src/mix_core_alg.py``, ``compute_token_on_off_policy_loss``).

Each group holds the policy's N_on samples and N_off off-policy traces (a problem's worked
solutions, ``algorithm.expert.traces``), all scored by the run's reward. The advantages are
the group's over the union (``A = (R - mean(R_on u R_off)) / std(...)`` for GRPO), so an expert
trace that solves a problem the policy fails gets a large positive advantage. The objective
(the paper's eq. 6, token mean over all tokens of the batch)::

    J(theta) = 1/Z [ sum_{j in off} sum_t f(pi_theta(tau_{j,t}) / pi_phi(tau_{j,t})) A_j
                     + sum_{i in on} sum_t CLIP(r_{i,t}(theta), A_i, eps) ]

With the expert's probabilities unknown the authors set pi_phi = 1, so the off-policy ratio is
pi_theta itself, not clipped; ``f`` is the *policy shaping* that re-weights its gradient toward
the expert's low-probability tokens: ``f(p) = p / (p + gamma)``, gamma = 0.1 (the code's
``off_policy_reshape: p_div_p_0.1``). Its gradient is ``gamma / (p + gamma)^2 * dp``, which does
not vanish as p -> 0 the way the plain ratio's (``dp``) does.

A shaping is a registered function of the policy's per-token log-probs (:data:`EXPERT_SHAPINGS`,
selected by ``algorithm.expert.shaping``); :func:`expert_loss` is the per-token loss of the
off-policy rows. The on-policy rows keep the run's own policy loss.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlvr.registry import Registry

Shaping = Callable[..., torch.Tensor]

EXPERT_SHAPINGS: Registry[Shaping] = Registry("expert-trace shaping")
"""``f(logp, **params) -> [n, T]``: the off-policy rows' shaped ratio pi_theta / pi_phi with
pi_phi = 1 (``algorithm.expert.shaping``), users' included."""


def register_expert_shaping(name: str, description: str = "") -> Callable[[Shaping], Shaping]:
    """Decorator: add a shaping ``f(logp [n, T], **params) -> [n, T]`` under ``name``."""

    def decorator(fn: Shaping) -> Shaping:
        EXPERT_SHAPINGS.add(name, fn, description)
        return fn

    return decorator


@register_expert_shaping("luffy", "LUFFY's policy shaping f(p) = p / (p + gamma), gamma = 0.1")
def policy_shaping(logp: torch.Tensor, gamma: float = 0.1) -> torch.Tensor:
    """LUFFY's policy shaping of the off-policy ratio: ``f(p) = p / (p + gamma)`` with
    ``p = pi_theta(tau_t) = exp(logp)`` [n, T] (the paper's Sec. 3.3; its code's
    ``p_div_p_0.1`` for gamma = 0.1)."""
    if gamma <= 0:
        raise ValueError(f"expert shaping luffy: gamma must be > 0, got {gamma}")
    p = logp.exp()
    return p / (p + gamma)


@register_expert_shaping("ratio", "the plain ratio pi_theta / pi_phi with pi_phi = 1, unshaped")
def plain_ratio(logp: torch.Tensor) -> torch.Tensor:
    """The unshaped off-policy ratio ``pi_theta(tau_t) / 1 = exp(logp)`` [n, T] (LUFFY's
    ``no_reshape`` ablation, which the paper finds collapses entropy)."""
    return logp.exp()


def expert_loss(
    shaping: str, logp: torch.Tensor, advantages: torch.Tensor, **params: float
) -> torch.Tensor:
    """Per-token loss of the off-policy rows, ``l_{j,t} = -A_j f(pi_theta(tau_{j,t}))`` [n, T].

    Args:
        shaping: a name in :data:`EXPERT_SHAPINGS`.
        logp: [n, T] the policy's log-probs of the traces' tokens (with gradient).
        advantages: [n] or [n, T].
        params: the shaping's keyword arguments (e.g. gamma).
    Returns:
        [n, T]; the caller masks and aggregates with the on-policy rows' loss.
    """
    adv = advantages if advantages.dim() == 2 else advantages[:, None]
    return -adv * EXPERT_SHAPINGS[shaping](logp, **params)
