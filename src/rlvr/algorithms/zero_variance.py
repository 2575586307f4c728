"""RL-ZVP: learning from zero-variance prompts through token entropy (Le et al. 2025, "No Prompt
Left Behind: Exploiting Zero-Variance Prompts in LLM Reinforcement Learning via Entropy-Guided
Advantage Shaping", arXiv:2509.21880, Sec. 3.2, eq. 5).

A group whose G samples all score alike (all right or all wrong) gives GRPO no signal: its
advantages are 0. RL-ZVP keeps GRPO on the other groups and gives the samples of a
zero-variance group a token-level advantage from the entropy H_{i,t} of the policy at each
sampled token (detached: a constant, not differentiated):

    all right (R_i > 0):   A_{i,t} =  alpha H_{i,t}
    all wrong (R_i <= 0):  A_{i,t} = -alpha (max_k H_{i,k} - H_{i,t})

the max over the tokens of the same response. A right answer is reinforced most where the
policy was uncertain (the forks that led to it); a wrong one is pushed down most on the tokens
it was confident about, and not at all on its most uncertain token. The paper's alpha is 0.1.
Select with ``algorithm.advantage.name: rl_zvp``; the entropies come from the trainer's no-grad pass
of the policy before the update.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    _group_sums,
    _group_varies,
    _need,
    grpo,
    register_advantage,
)


def rl_zvp_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    entropy: torch.Tensor,
    mask: torch.Tensor,
    alpha: float = 0.1,
    eps: float = 1e-6,
) -> torch.Tensor:
    """RL-ZVP's token advantages [N, T] (see the module docstring).

    Args:
        rewards: [N] rewards.
        group_ids: [N] the group (prompt) of each sample.
        entropy: [N, T] the policy's entropy at each completion token (no grad).
        mask: [N, T] 1 on completion tokens.
        alpha: the scale alpha of the entropy advantage.
        eps: GRPO's eps, on the groups whose rewards differ.
    Returns:
        [N, T] advantages, 0 on masked-out tokens: GRPO's (broadcast over the tokens) on groups
        whose rewards differ, and on groups of one; the entropy-shaped ones on zero-variance
        groups.
    """
    if entropy.shape != mask.shape or mask.dim() != 2 or mask.shape[0] != rewards.shape[0]:
        raise ValueError(
            f"entropy and mask must both be [N, T] with N = {rewards.shape[0]}, got "
            f"{tuple(entropy.shape)} and {tuple(mask.shape)}"
        )
    r, inverse, count, _ = _group_sums(rewards, group_ids)
    m = mask.to(r.dtype)
    h = entropy.detach().to(r.dtype) * m
    zero_variance = (~_group_varies(r, inverse, count.numel()) & (count > 1))[inverse]  # [N]
    positive = alpha * h  # alpha H_{i,t}
    row_max = torch.where(m > 0, h, torch.finfo(r.dtype).min).amax(-1, keepdim=True)
    negative = -alpha * (row_max - h)  # -alpha (max_k H_{i,k} - H_{i,t})
    shaped = torch.where((r > 0)[:, None], positive, negative)
    outcome = grpo(r, group_ids, eps)[:, None].expand_as(h)
    return torch.where(zero_variance[:, None], shaped, outcome) * m


@register_advantage(
    "rl_zvp",
    paper='Le et al. 2025, "No Prompt Left Behind", arXiv:2509.21880',
    requires=("mask", "token_entropy"),
    token_level=True,
)
def _rl_zvp_estimator(
    inputs: AdvantageInputs, alpha: float = 0.1, eps: float = 1e-6
) -> AdvantageOutput:
    mask = _need("rl_zvp", inputs, "mask")
    entropy = _need("rl_zvp", inputs, "token_entropy")
    return AdvantageOutput(
        rl_zvp_advantages(inputs.rewards, inputs.group_ids, entropy, mask, alpha, eps)
    )
