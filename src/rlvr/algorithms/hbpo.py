"""HBPO: Hierarchical Budget Policy Optimization (Lyu et al. 2025, "Hierarchical Budget Policy
Optimization for Adaptive Reasoning", arXiv:2507.15844; the formulas as the paper states them and
the authors' code computes them, ``ZJU-REAL/HBPO``: ``rllm/rewards/math_reward.py`` and
``core_algos.compute_grpo_outcome_advantage``).

Each prompt's rollouts are split into subgroups, one per token budget b (512, 1024, 2048, 2560),
the budget stated at the start of the reply ("I will answer the question with b tokens": the
``budgets`` draw stage). A correct reply of n tokens scores

    f1(n, b) = beta cos(pi n / (2 L_max)) - alpha |n - b|
    f2(b)    = beta cos(pi b / (2 L_max))
    R(n | b) = min(f1(n, b), f2(b))  if correct and n <= L_max, else 0

(the paper takes f1 above the budget and f2 within it; the code's min is the same above the
budget and slightly below f2 for the shortest replies), beta 4, alpha 1 / L_max, L_max 4096
(the code's). The advantage adds the subgroup's standing to GRPO's over the whole group:

    A_ij = (R_ij - mean_i' j' R) / std_i' j' R  +  (mean_j R_ij - f2(b_i))

(std unbiased, plus 1e-6; the intra term added once, as the paper says: the code's duplicated
line adds it twice).
"""

from __future__ import annotations

import math
import re

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    _need,
    grpo,
    register_advantage,
)

PAPER = (
    'Lyu et al. 2025, "Hierarchical Budget Policy Optimization for Adaptive Reasoning" (HBPO), '
    "arXiv:2507.15844"
)
BUDGETS = (512, 1024, 2048, 2560)
"""The paper's and the code's token budgets."""
TEMPLATE = "<think> I will answer the question with {budget} tokens"
"""The budget statement a reply starts with (the authors' code's; the paper writes "within")."""


def budget_pattern(template: str = TEMPLATE) -> re.Pattern[str]:
    """The regex that finds ``template``'s statement in a reply, its budget the group."""
    if template.count("{budget}") != 1:
        raise ValueError(f"a budget statement holds {{budget}} once; got {template!r}")
    head, tail = template.split("{budget}")
    return re.compile(re.escape(head) + r"(\d+)" + re.escape(tail))


def budget_ceiling(budget: float, scale: float = 4.0, max_len: int = 4096) -> float:
    """f2(b) = beta cos(pi b / (2 L_max)) (beta: ``scale``): the most a correct reply within
    budget ``b`` scores."""
    return scale * math.cos(math.pi * budget / (2 * max_len))


def budget_reward(
    tokens: int,
    budget: float,
    correct: bool,
    scale: float = 4.0,
    alpha: float | None = None,
    max_len: int = 4096,
) -> float:
    """R(n | b) of one reply of ``tokens`` tokens under budget ``budget`` (module docstring;
    beta is ``scale``); ``alpha`` None: 1 / ``max_len``."""
    if max_len <= 0 or scale < 0 or (alpha is not None and alpha < 0):
        raise ValueError(
            f"hbpo: need max_len > 0, scale >= 0, alpha >= 0; got {max_len}, {scale}, {alpha}"
        )
    if not correct or tokens > max_len:
        return 0.0
    a = 1.0 / max_len if alpha is None else alpha
    f1 = scale * math.cos(math.pi * tokens / (2 * max_len)) - a * abs(tokens - budget)
    return min(f1, budget_ceiling(budget, scale, max_len))


def hbpo_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    budgets: torch.Tensor,
    scale: float = 4.0,
    max_len: int = 4096,
    eps: float = 1e-6,
) -> torch.Tensor:
    """HBPO's advantages [N] (module docstring).

    Args:
        rewards: [N] R of each reply; group_ids: [N] its prompt.
        budgets: [N] the budget b of each reply's subgroup.
        scale, max_len: the reward's beta and L_max, for f2(b) (an estimator's ``beta`` is the
            KL's, so beta is named ``scale`` here and in ``reward.terms: hbpo_budget``).
        eps: added to the group's std.
    """
    if budgets.shape != rewards.shape:
        raise ValueError(f"budgets must be [N] like rewards, got {tuple(budgets.shape)}")
    r = rewards.double()
    inter = grpo(r, group_ids, eps)  # (R - mean) / (unbiased std + eps) over the prompt's group
    pairs = torch.stack([group_ids.to(r.device), budgets.to(r.device).double().round().long()])
    subgroups, inverse = torch.unique(pairs, dim=1, return_inverse=True)
    count = torch.zeros(subgroups.shape[1], dtype=r.dtype).index_add_(
        0, inverse, torch.ones_like(r)
    )
    mean = torch.zeros_like(count).index_add_(0, inverse, r) / count  # mean_j R_ij
    ceiling = scale * torch.cos(math.pi * subgroups[1].double() / (2 * max_len))  # f2(b_i)
    out = inter + (mean - ceiling)[inverse]
    return out.to(rewards.dtype if rewards.is_floating_point() else torch.float32)


@register_advantage("hbpo", requires=("budgets",), paper=PAPER)
def _hbpo_estimator(
    inputs: AdvantageInputs, scale: float = 4.0, max_len: int = 4096, eps: float = 1e-6
) -> AdvantageOutput:
    budgets = _need("hbpo", inputs, "budgets")
    return AdvantageOutput(
        hbpo_advantages(inputs.rewards, inputs.group_ids, budgets, scale, max_len, eps)
    )
