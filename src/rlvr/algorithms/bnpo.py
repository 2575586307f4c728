"""BNPO: advantages normalised by a Beta density fitted to the batch's pass rates (Xiao, Zhang
and Cao 2025, "BNPO: Beta Normalization Policy Optimization", arXiv:2506.02864).

With binary rewards, a prompt's pass rate p is Bernoulli's mean, and across the prompts of a
batch p follows roughly a Beta(a, b). BNPO divides the centred reward by a Beta density of p
whose parameters track that distribution:

    A_i = (r_i - p_g) / f(p_g; alpha, beta),   f(p; alpha, beta) = p^(alpha-1) (1-p)^(beta-1) / B(alpha, beta)

with p_g the mean reward of sample i's group g and (alpha, beta) = (1 + a/3, 1 + b/3), the
paper's variance-minimising choice for p ~ Beta(a, b), at least 1. (a, b) are fitted to the
batch's group pass rates by the method of moments (mean mu, unbiased variance s^2), as in the
authors' code (github.com/changyi7231/BNPO, ``compute_bnpo_outcome_advantage``):

    c = mu (1 - mu) / s^2 - 1,   a = mu c,   b = (1 - mu) c      (alpha = beta = 1 where s^2 = 0)

and the weight 1 / f is capped at 1e6 (``max_weight``), as there.

alpha = beta = 1 gives f = 1 (REINFORCE with the group mean as baseline); alpha = beta = 3/2
gives f proportional to sqrt(p (1 - p)), Bernoulli's std (GRPO): BNPO moves between the two as
the pass rates spread. A group whose rewards are all equal has A = 0; a group of one keeps
A = r (the package convention). Rewards must lie in [0, 1]. Select with ``algorithm.advantage.name:
bnpo``. The paper's decomposition for several reward terms is not built here: ``gdpo``
normalises each term separately.
"""

from __future__ import annotations

import math

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    _group_sums,
    register_advantage,
)


def beta_parameters(pass_rates: torch.Tensor) -> tuple[float, float]:
    """BNPO's normalisation parameters (alpha, beta) = (1 + a/3, 1 + b/3) from the method-of-moments
    fit Beta(a, b) to ``pass_rates`` [K] (see the module docstring)."""
    p = pass_rates.double()
    if p.numel() == 0:
        return 1.0, 1.0
    mu = p.mean().item()
    var = p.var().item() if p.numel() > 1 else 0.0  # unbiased, as torch.var in the paper's code
    c = mu * (1 - mu) / var - 1 if var > 0 else 0.0
    return max(1 + mu * c / 3, 1.0), max(1 + (1 - mu) * c / 3, 1.0)  # clamped at 1, as there


def beta_density(p: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """f(p; alpha, beta) = p^(alpha-1) (1-p)^(beta-1) / B(alpha, beta), elementwise."""
    log_b = math.lgamma(alpha) + math.lgamma(beta) - math.lgamma(alpha + beta)  # log B(alpha, beta)
    # in log space (alpha, beta grow large when the pass rates concentrate); xlogy: 0 log 0 = 0
    alpha_t, beta_t = torch.tensor(alpha - 1, dtype=p.dtype), torch.tensor(beta - 1, dtype=p.dtype)
    return torch.exp(torch.xlogy(alpha_t, p) + torch.xlogy(beta_t, 1 - p) - log_b)


def bnpo(rewards: torch.Tensor, group_ids: torch.Tensor, max_weight: float = 1e6) -> torch.Tensor:
    """BNPO advantages [N] (see the module docstring).

    Args:
        rewards: [N] rewards in [0, 1] (binary in the paper).
        group_ids: [N] the group (prompt) of each sample.
        max_weight: the cap of 1 / f(p) (a pass rate where the density is ~0).
    Returns:
        [N] advantages.
    """
    r, inverse, count, total = _group_sums(rewards, group_ids)
    if r.numel() and (r.min() < 0 or r.max() > 1):
        raise ValueError(
            f"bnpo needs rewards in [0, 1] (pass rates), got values in [{r.min().item():g}, "
            f"{r.max().item():g}]"
        )
    p = total / count  # [K] each group's pass rate
    alpha, beta = beta_parameters(p[count > 1])
    weight = (1 / beta_density(p.double(), alpha, beta)).clamp(max=max_weight).to(r.dtype)
    normalised = (r - p[inverse]) * weight[inverse]  # (r_i - p_g) / f(p_g)
    return torch.where(count[inverse] > 1, normalised, r)


@register_advantage(
    "bnpo",
    paper='Xiao et al. 2025, "BNPO: Beta Normalization Policy Optimization", arXiv:2506.02864',
    group_relative=True,
)
def _bnpo_estimator(inputs: AdvantageInputs, max_weight: float = 1e6) -> AdvantageOutput:
    return AdvantageOutput(bnpo(inputs.rewards, inputs.group_ids, max_weight))
