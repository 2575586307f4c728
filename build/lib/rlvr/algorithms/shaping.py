"""Reward shaping: terms added to a completion's outcome reward before advantages."""

from __future__ import annotations

import torch


def overlong_penalty(lengths: torch.Tensor, max_len: int, cache_len: int) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement
    Learning System at Scale", arXiv:2503.14476, Sec. 3.4).

    For a completion of L tokens, budget L_max and punishment interval L_cache:
        R(L) = 0                                  if L <= L_max - L_cache
        R(L) = ((L_max - L_cache) - L) / L_cache   if L_max - L_cache < L <= L_max
        R(L) = -1                                 if L > L_max
    The penalty is added to the task reward. DAPO uses L_max = 20480 and L_cache = 4096
    (expected length 16384). With L_max the generation budget no completion exceeds it, so
    only the linear ramp applies; L_cache = 0 then gives no penalty at all.

    Args:
        lengths: [N] completion lengths in tokens.
        max_len: L_max (> 0).
        cache_len: L_cache, 0 <= L_cache <= L_max.
    Returns:
        [N] float penalties in [-1, 0].
    """
    if max_len <= 0 or not 0 <= cache_len <= max_len:
        raise ValueError(
            f"overlong_penalty needs max_len > 0 and 0 <= cache_len <= max_len, got "
            f"max_len={max_len}, cache_len={cache_len}"
        )
    length = lengths.to(torch.float64)
    start = max_len - cache_len  # L_max - L_cache
    ramp = (start - length) / max(cache_len, 1)  # ((L_max - L_cache) - L) / L_cache
    penalty = torch.where(length <= start, 0.0, torch.where(length <= max_len, ramp, -1.0))
    return penalty.to(torch.get_default_dtype())
