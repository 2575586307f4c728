"""Imitation: supervised fine-tuning on demonstrations, and rejection-sampling fine-tuning on the
policy's own verified samples (the ``imitation`` objective of
:mod:`rlvr.algorithms.objectives`).

The loss of both is the negative log-likelihood of the kept completions' trained tokens,
``L = - sum_{i: w_i > 0} sum_t w_i m_{i,t} log pi_theta(y_{i,t} | x_i, y_{i,<t}) /
sum_{i: w_i > 0} sum_t m_{i,t}`` (token mean over the kept samples), where m is the loss mask
(a chat's assistant tokens) and w_i the sample's weight, the preset's advantage: 1 for every
demonstration (SFT), 1[r_i >= threshold] for a sampled completion (:func:`verified`: RFT,
Yuan et al. 2023; STaR, Zelikman et al. 2022; expert iteration, Anthony et al. 2017).
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import AdvantageInputs, AdvantageOutput, register_advantage
from rlvr.algorithms.objectives import add_objective

add_objective(
    "imitation",
    "imitation",
    citation=(
        "SFT: Ouyang et al. 2022, InstructGPT, arXiv:2203.02155; RFT: Yuan et al. 2023, Scaling "
        "Relationship on Learning Mathematical Reasoning with LLMs, arXiv:2308.01825; STaR: "
        "Zelikman et al. 2022, arXiv:2203.14465"
    ),
    summary="negative log-likelihood of the kept samples' trained tokens, token mean",
)


def nll_loss(logp: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per-token imitation loss ``l_{i,t} = -w_i log pi(y_{i,t})`` [N, T] from log-probs [N, T]
    and per-sample weights [N] (or per-token [N, T]); the caller masks and aggregates."""
    w = weights if weights.dim() == 2 else weights[:, None]
    return -w * logp


def verified(rewards: torch.Tensor, threshold: float = 1.0) -> torch.Tensor:
    """Rejection sampling's weights: ``w_i = 1[r_i >= threshold]`` [N] (float), 1 for the kept
    (verified) samples and 0 for the others (Yuan et al. 2023; Zelikman et al. 2022). With the
    verifier's 0/1 rewards and threshold 1, exactly the correct completions are kept."""
    return (rewards >= threshold).to(rewards.dtype if rewards.is_floating_point() else torch.float)


@register_advantage("verified")
def _verified_estimator(inputs: AdvantageInputs, threshold: float = 1.0) -> AdvantageOutput:
    return AdvantageOutput(verified(inputs.rewards, threshold))
