"""PVPO's advantage against a reference anchor ("PVPO: Pre-Estimated Value-Based Policy
Optimization for Agentic Reasoning", 2025, arXiv:2508.21104; its Eqs. 5-11).

GRPO's baseline is the group's own mean, so a group whose samples all score alike teaches
nothing and the baseline moves with the policy. PVPO anchors the advantage to a static value:
the mean reward of M rollouts of the prompt by a fixed reference policy (the initial one),

    Q_dyn(tau_i) = r_i,    V_sta(s_0) = (1 / M) sum_j r^ref_j,    A_i = r_i - V_sta(s_0)    (Eq. 11)

with no std normalisation, in GRPO's clipped surrogate with a KL penalty (Eq. 5). Here the M
reference rollouts are the G completions of the prompt that the frozen initial policy plays
beside the policy's each draw (``reference_rewards``, as AAPO's): the same V_sta estimated
afresh every draw, where the paper estimates it once and refreshes it every 500 steps. The
paper's pre-filtering of prompts by the reference's accuracy and its injected ground-truth
trajectories for prompts the reference never solves are not built.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    _group_sums,
    _need,
    register_advantage,
)


def pvpo_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, reference_rewards: torch.Tensor
) -> torch.Tensor:
    """A_i = r_i - V_sta [N], V_sta the mean of ``reference_rewards`` [N] over the sample's
    group (the reference's M = G rollouts of its prompt)."""
    if reference_rewards.shape != rewards.shape:
        raise ValueError(
            f"reference_rewards must be [N] like rewards, got {tuple(reference_rewards.shape)}"
        )
    r = rewards if rewards.is_floating_point() else rewards.float()
    _, inverse, count, total = _group_sums(reference_rewards.to(r.dtype), group_ids)
    return r - (total / count)[inverse]


@register_advantage(
    "pvpo",
    requires=("reference_rewards",),
    paper='"PVPO: Pre-Estimated Value-Based Policy Optimization for Agentic Reasoning", 2025, '
    "arXiv:2508.21104",
)
def _pvpo_estimator(inputs: AdvantageInputs) -> AdvantageOutput:
    return AdvantageOutput(
        pvpo_advantages(
            inputs.rewards, inputs.group_ids, _need("pvpo", inputs, "reference_rewards")
        )
    )
