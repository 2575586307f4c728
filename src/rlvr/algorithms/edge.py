"""EDGE-GRPO's entropy-driven advantage, EDA (Zhang et al. 2025, "EDGE-GRPO: Entropy-Driven
GRPO with Guided Error Correction for Advantage Diversity", arXiv:2507.21848), as the authors'
code computes it (``ZhangXJ199/EDGE-GRPO``, ``GRPOAhaTrainer``).

GRPO gives every correct answer of a group the same advantage and every wrong one the same
penalty. EDA divides each response's advantage by its entropy relative to the group's:

    A_i = (r_i - mean_g r) / (std_g r + eps)          (GRPO, unbiased std, eps 1e-4)
    P_i = mean_t H_{i,t}                               (the response's mean token entropy)
    Â_i = A_i / (P_i / mean_{j in g} P_j)

so a confident (low-entropy) correct answer is reinforced more and a confident wrong one
penalised more, and a group whose rewards are equal stays at 0. Differences from the authors'
code, which computes P_i in the loss's forward under pi_theta:
- the entropies here are the trainer's no-grad pass before the update (pi_old's; equal to
  pi_theta's on the first minibatch), so P_i carries no gradient (theirs does, a side effect
  of not detaching it);
- P_i is the mean over the response's own tokens (theirs includes padding, which their one
  sample per device never had), and is floored at 1e-6 (theirs divides unguarded);
- mean_j P_j is over the group (theirs over the gathered batch, which was one group: 8
  processes x 1 sample, G = 8).
GEC, the paper's other half (wrong answers continued after "Wait! Something is wrong here",
or given the correct answer or the reference solution in the response), is the
``error_correction`` draw stage (:mod:`rlvr.trainer.stages.error_correction`).
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    _group_sums,
    _need,
    grpo,
    register_advantage,
)

ENTROPY_FLOOR = 1e-6
"""The least mean entropy a response is divided by."""


def entropy_driven_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    entropy: torch.Tensor,
    mask: torch.Tensor,
    eps: float = 1e-4,
) -> torch.Tensor:
    """EDA's advantages [N] (see the module).

    Args:
        rewards: [N] rewards.
        group_ids: [N] the group (prompt) of each sample.
        entropy: [N, T] the policy's entropy at each completion token (no grad).
        mask: [N, T] 1 on completion tokens.
        eps: GRPO's, added to the group's std (the authors' 1e-4).
    Returns:
        [N] advantages; a group of one keeps GRPO's (its own P_i is its group's mean).
    """
    if entropy.shape != mask.shape or mask.dim() != 2 or mask.shape[0] != rewards.shape[0]:
        raise ValueError(
            f"entropy and mask must both be [N, T] with N = {rewards.shape[0]}, got "
            f"{tuple(entropy.shape)} and {tuple(mask.shape)}"
        )
    r = rewards.to(torch.float64)
    m = mask.to(r.dtype)
    per_response = (entropy.detach().to(r.dtype) * m).sum(-1) / m.sum(-1).clamp_min(1.0)
    per_response = per_response.clamp_min(ENTROPY_FLOOR)  # P_i
    _, inverse, count, total = _group_sums(per_response, group_ids)
    group_mean = total / count  # mean_{j in g} P_j
    advantages = grpo(r, group_ids, eps) * group_mean[inverse] / per_response
    return advantages.to(rewards.dtype)


@register_advantage(
    "edge_grpo",
    paper='Zhang et al. 2025, "EDGE-GRPO: Entropy-Driven GRPO with Guided Error Correction '
    'for Advantage Diversity", arXiv:2507.21848',
    requires=("mask", "token_entropy"),
    group_relative=True,
)
def _edge_grpo_estimator(inputs: AdvantageInputs, eps: float = 1e-4) -> AdvantageOutput:
    mask = _need("edge_grpo", inputs, "mask")
    entropy = _need("edge_grpo", inputs, "token_entropy")
    return AdvantageOutput(
        entropy_driven_advantages(inputs.rewards, inputs.group_ids, entropy, mask, eps)
    )
