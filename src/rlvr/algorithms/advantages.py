"""Outcome-reward advantage estimators: one scalar advantage per completion.

Notation: prompt x, group of G completions y_1..y_G sampled for x, reward r_i of y_i. Samples
of a batch are tagged with the id of their group (``group_ids``); ids are arbitrary integers,
not necessarily contiguous or sorted, and all estimators are vectorised over groups
(``index_add``).

A group of one has no other sample to form a baseline from; every estimator here then
returns the raw reward, A_i = r_i (baseline 0, scale 1): plain REINFORCE on that sample.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

AdvantageFn = Callable[..., torch.Tensor]

ADVANTAGES: dict[str, AdvantageFn] = {}


def register_advantage(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """Decorator: add an estimator ``fn(rewards [N], group_ids [N], **kw) -> [N]`` to ADVANTAGES."""

    def decorator(fn: AdvantageFn) -> AdvantageFn:
        if name in ADVANTAGES:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADVANTAGES[name] = fn
        return fn

    return decorator


def _group_sums(
    rewards: torch.Tensor, group_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Index samples by group.

    Args:
        rewards: [N] rewards (any real dtype).
        group_ids: [N] integer group id of every sample.
    Returns:
        r [N] float rewards, inverse [N] long (group index in 0..K-1 of every sample),
        count [K] samples per group, total [K] reward sum per group (K distinct ids).
    """
    if rewards.dim() != 1 or rewards.shape != group_ids.shape:
        raise ValueError(
            f"rewards and group_ids must be 1-D of equal length, got shapes "
            f"{tuple(rewards.shape)} and {tuple(group_ids.shape)}"
        )
    r = rewards if rewards.is_floating_point() else rewards.float()
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    count = torch.zeros(num_groups, dtype=r.dtype, device=r.device)
    count.index_add_(0, inverse, torch.ones_like(r))
    total = torch.zeros(num_groups, dtype=r.dtype, device=r.device).index_add_(0, inverse, r)
    return r, inverse, count, total


def _group_std(
    r: torch.Tensor, inverse: torch.Tensor, count: torch.Tensor, total: torch.Tensor
) -> torch.Tensor:
    """[K] unbiased group std: sqrt(sum_g (r - mean_g r)^2 / (n_g - 1)); 0 for a group of one."""
    mean = total / count
    sq_dev = torch.zeros_like(total).index_add_(0, inverse, (r - mean[inverse]) ** 2)
    return (sq_dev / (count - 1).clamp_min(1)).sqrt()


@register_advantage("grpo")
def grpo(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO outcome advantage (DeepSeekMath, Shao et al. 2024, eq. in Sec. 4.1.2).

    A_i = (r_i - mean_g r) / (std_g r + eps), std unbiased (n - 1). A group whose rewards are
    all equal gets A = 0. A group of one gets A_i = r_i (mean 0, scale 1), since its unbiased
    std is undefined.

    Args:
        rewards: [N] rewards.
        group_ids: [N] long group id of every sample.
        eps: added to the std so a constant group does not divide by zero.
    Returns:
        [N] advantages.
    """
    r, inverse, count, total = _group_sums(rewards, group_ids)
    mean = total / count
    std = _group_std(r, inverse, count, total)
    normalised = (r - mean[inverse]) / (std[inverse] + eps)  # A_i = (r_i - mean) / (std + eps)
    return torch.where(count[inverse] > 1, normalised, r)


@register_advantage("dr_grpo")
def dr_grpo(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO advantage (Liu et al. 2025, "Understanding R1-Zero-like training").

    A_i = r_i - mean_g r: GRPO without the division by the group std, which biases updates
    towards groups of near-constant reward. A group of one gets A_i = r_i (baseline 0).

    Args:
        rewards: [N] rewards.
        group_ids: [N] long group id of every sample.
    Returns:
        [N] advantages.
    """
    r, inverse, count, total = _group_sums(rewards, group_ids)
    centred = r - (total / count)[inverse]  # A_i = r_i - mean_g r
    return torch.where(count[inverse] > 1, centred, r)


@register_advantage("rloo")
def rloo(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """REINFORCE leave-one-out advantage (Ahmadian et al. 2024, "Back to Basics").

    A_i = r_i - mean_{j != i} r_j = r_i - (sum_g r - r_i) / (n_g - 1). A group of one has no
    other sample and gets A_i = r_i (baseline 0).

    Args:
        rewards: [N] rewards.
        group_ids: [N] long group id of every sample.
    Returns:
        [N] advantages.
    """
    r, inverse, count, total = _group_sums(rewards, group_ids)
    n = count[inverse]
    baseline = (total[inverse] - r) / (n - 1).clamp_min(1)  # mean_{j != i} r_j
    return torch.where(n > 1, r - baseline, r)


def compute_advantages(
    name: str, rewards: torch.Tensor, group_ids: torch.Tensor, **kwargs: float
) -> torch.Tensor:
    """Run the estimator registered as ``name`` on [N] rewards; returns [N] advantages."""
    if name not in ADVANTAGES:
        raise ValueError(
            f"unknown advantage estimator {name!r}; accepted: {', '.join(sorted(ADVANTAGES))}"
        )
    return ADVANTAGES[name](rewards, group_ids, **kwargs)


def group_stats(rewards: torch.Tensor, group_ids: torch.Tensor) -> dict[str, float]:
    """Reward statistics over groups, for logging.

    Args:
        rewards: [N] rewards.
        group_ids: [N] long group id of every sample.
    Returns:
        ``num_groups``; ``zero_variance_frac``: fraction of groups whose rewards are all equal
        (their GRPO / Dr. GRPO / RLOO advantages are 0, so they give no learning signal; groups
        of one count as constant); ``group_std_mean``: mean over groups of the unbiased reward
        std (0 for a group of one).
    """
    r, inverse, count, total = _group_sums(rewards, group_ids)
    num_groups = count.numel()
    if num_groups == 0:
        return {"num_groups": 0.0, "zero_variance_frac": 0.0, "group_std_mean": 0.0}
    high = torch.full_like(total, float("-inf")).scatter_reduce(0, inverse, r, reduce="amax")
    low = torch.full_like(total, float("inf")).scatter_reduce(0, inverse, r, reduce="amin")
    return {
        "num_groups": float(num_groups),
        "zero_variance_frac": (high == low).float().mean().item(),
        "group_std_mean": _group_std(r, inverse, count, total).mean().item(),
    }
