"""SPINE's entropy band (Wu et al. 2025, "SPINE: Token-Selective Test-Time Reinforcement Learning
with Entropy-Band Regularization", arXiv:2511.17938).

SPINE trains only the forking tokens, the high-entropy ones (``algorithm.entropy.top_rho``, 0.2
in the paper), on majority-vote rewards (``reward.terms: majority_vote``, TTRL's), and keeps
their entropy within a band: for sample i, with S_i its forking tokens and H_t the policy's
token entropy,

    H_low_i  = the 10% quantile of {H_t : t in S_i},   H_high_i = their 50% quantile (median)
    l_t      = max(0, H_t - H_high_i) + max(0, H_low_i - H_t)      (t in S_i)

added to the per-token loss with weight ``algorithm.entropy.band``: a forking token whose entropy
is above the band is made less uncertain (noisy supervision suppressed), one below it more
(exploration kept). The bounds are recomputed for each sample, no gradient through them.

Source: the paper's v1 abstract and a survey's reading of its method (the quantiles and the
hinge terms, as quoted above); the paper's own text and the authors' code
(``JianghaoWu/SPINE``) could not be read from here, so the band's weight, which neither states,
is a setting without a paper default, and the hinge terms are averaged with the run's
aggregation over the trained tokens. A later version of the abstract speaks of a "robust"
band and "distribution-aware" token selection, which may differ.
"""

from __future__ import annotations

import torch


def entropy_band(
    entropy: torch.Tensor, mask: torch.Tensor, low: float = 0.1, high: float = 0.5
) -> torch.Tensor:
    """SPINE's band penalty per token.

    Args:
        entropy: [B, T] the policy's token entropy H_t (with gradient).
        mask: [B, T] 1 on each row's tokens the band applies to (its forking tokens).
        low, high: the quantiles of a row's masked entropies that bound its band.
    Returns:
        [B, T] max(0, H_t - H_high_i) + max(0, H_low_i - H_t) on the masked tokens, 0 elsewhere
        (bounds detached; a row without masked tokens is all 0).
    """
    if not 0 <= low < high <= 1:
        raise ValueError(
            f"the band's quantiles must satisfy 0 <= low < high <= 1; got {low}, {high}"
        )
    on = mask > 0
    h_low = torch.zeros(entropy.shape[0], 1, device=entropy.device)
    h_high = torch.zeros_like(h_low)
    detached = entropy.detach().float()
    for i in range(entropy.shape[0]):
        values = detached[i][on[i]]
        if values.numel():
            bounds = torch.quantile(values, torch.tensor([low, high], device=values.device))
            h_low[i, 0], h_high[i, 0] = bounds[0], bounds[1]
    above = torch.relu(entropy - h_high)  # max(0, H_t - H_high_i); no push at the bound itself
    below = torch.relu(h_low - entropy)  # max(0, H_low_i - H_t)
    return (above + below) * on
