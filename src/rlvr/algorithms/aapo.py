"""AAPO: GRPO's advantage plus a margin over the reference model on the same prompt (Xiong et
al. 2025, "AAPO: Enhancing the Reasoning Capabilities of LLMs with Advantage Momentum",
arXiv:2505.14264; the authors' code).

A group whose samples all score alike gets GRPO advantage 0 and teaches nothing, even when the
policy has already overtaken (or fallen behind) its starting point. AAPO samples G completions
of the prompt from the frozen reference model too, pairs them with the policy's by index, and
adds the clipped reward difference:

    A_i = (r_i - mean_g r) / (std_g r + eps) + clip(r_i - r^ref_i, low, high)

with low = -0.2, high = 0.28 (the code's bounds). The paper trains it with a plain
-A log pi loss (no ratio, no clip, no KL): the ``aapo`` preset. ``algorithm.advantage.name: aapo``
makes the rollouts keep an engine over the initial policy and sample the reference's groups
(``Rollouts.run_reference``).
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    _need,
    grpo,
    register_advantage,
)


def aapo(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    reference_rewards: torch.Tensor,
    low: float = -0.2,
    high: float = 0.28,
    eps: float = 1e-6,
) -> torch.Tensor:
    """AAPO's advantages [N] (see the module docstring).

    Args:
        rewards: [N] the policy's rewards; group_ids: [N] their groups.
        reference_rewards: [N] the reward of the reference model's completion paired with each
            sample (same prompt, same index in the group).
        low, high: the clip of the margin r_i - r^ref_i.
        eps: GRPO's eps.
    Returns:
        [N] advantages.
    """
    if reference_rewards.shape != rewards.shape:
        raise ValueError(
            f"reference_rewards must be [N] like rewards, got {tuple(reference_rewards.shape)}"
        )
    r = rewards if rewards.is_floating_point() else rewards.float()
    margin = (r - reference_rewards.to(r.dtype)).clamp(low, high)  # clip(r_i - r^ref_i)
    return grpo(r, group_ids, eps) + margin


@register_advantage(
    "aapo",
    requires=("reference_rewards",),
    paper='Xiong et al. 2025, "AAPO: Enhancing the Reasoning Capabilities of LLMs with '
    'Advantage Momentum", arXiv:2505.14264',
)
def _aapo_estimator(
    inputs: AdvantageInputs, low: float = -0.2, high: float = 0.28, eps: float = 1e-6
) -> AdvantageOutput:
    reference = _need("aapo", inputs, "reference_rewards")
    return AdvantageOutput(aapo(inputs.rewards, inputs.group_ids, reference, low, high, eps))
