"""PrefixRL's prefixed problems (Setlur, Wang, Cohen, Rashidinejad and Xie 2026, "Reuse your
FLOPs: Scaling RL on Hard Problems by Conditioning on Very Off-Policy Prefixes",
arXiv:2601.18795).

On a hard problem x the policy's own samples are rarely right and GRPO's gradient vanishes.
PrefixRL takes one correct off-policy trace y' of x (rejection-sampled from the base model in
the paper; a worked solution from another model works too) and adds the prefixed problems
x_pre = concat(x, y'_{1:h}), on which the policy continues the trace on-policy. On-policy RL
runs on the union of the original problems D and the prefixed ones D_pre (Eq. 3.1):

    max_pi  sum_{x_pre in D_pre} E_{y ~ pi(.|x_pre)} r(x_pre, y)  +  sum_{x in D} E_{y ~ pi(.|x)} r(x, y)

The prefix is context, not a target: no gradient is taken on its tokens and no importance
weight is applied (off-policy targets are what destabilise the baselines the paper compares
with); the reward checks the final answer. Each problem's prefixed variants are cut once, when
the data is built: 3 per problem at cut points h = floor(u L), u uniform between 40% and 80% of
the trace's L tokens, so the prefix length sets how hard the rest is.

Source: the paper's method section could not be read here. The equation and the recipe above
(one correct trace per problem, 3 variants cut uniformly at 40-80% of the tokens, 3K prefixed +
1K original problems, gradients masked on the prefix, GRPO-style group advantages) are from its
abstract and from a third-party summary that cites the paper's Eq. 3.1 and setup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def cut_fractions(key: int, variants: int, low: float = 0.4, high: float = 0.8) -> list[float]:
    """u_1 .. u_V, the cut fractions of one problem's ``variants`` prefixed variants: uniform in
    [low, high), drawn from the stream ``key`` (the problem's: the same cuts whenever it is
    drawn, as cuts made once when the data is built)."""
    if not 0.0 <= low <= high <= 1.0:
        raise ValueError(f"cut fractions need 0 <= low <= high <= 1, got {low} and {high}")
    generator = torch.Generator().manual_seed(key % 2**63)
    u = torch.rand(variants, generator=generator, dtype=torch.float64)
    return (low + (high - low) * u).tolist()


def cut_points(length: int, fractions: Sequence[float]) -> list[int]:
    """h_v = floor(u_v L): the prefix lengths in tokens of a trace of ``length`` tokens at the
    cut ``fractions`` u_v, each kept within 1 .. L - 1 (a prefix gives something and leaves
    something to sample); 0 (no prefix) for a trace of fewer than 2 tokens."""
    if length < 2:
        return [0] * len(fractions)
    return [min(max(math.floor(u * length), 1), length - 1) for u in fractions]
