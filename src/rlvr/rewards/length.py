"""Length rewards: DAPO's soft overlong punishment and DLER's truncation penalty.

Both need the completion's length in tokens, passed as the per-sample field ``num_tokens``
(the rollout engine knows it; counting characters would be a different reward).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from rlvr import algorithms
from rlvr.rewards.protocol import RewardSignature
from rlvr.rewards.registry import get_reward, register_reward

if TYPE_CHECKING:
    from rlvr.data.base import Problem


def overlong_penalty(length: int, max_length: int, cache_length: int) -> float:
    """DAPO soft overlong punishment of one completion of ``length`` tokens, L_max =
    ``max_length``, L_cache = ``cache_length``: the one formula of
    :func:`rlvr.algorithms.overlong_penalty` (``algorithm.overlong.buffer_frac``), here as a
    reward term. ``cache_length = 0`` gives a hard -1 beyond ``max_length``."""
    if max_length <= 0 or not 0 <= cache_length <= max_length:
        raise ValueError(
            f"overlong: need max_length > 0 and 0 <= cache_length <= max_length, got "
            f"max_length={max_length}, cache_length={cache_length}"
        )
    if length < 0:
        raise ValueError(f"overlong: num_tokens must be >= 0, got {length}")
    return float(algorithms.overlong_penalty(torch.tensor([length]), max_length, cache_length))


@register_reward("overlong")
def overlong_reward(
    completion: str, problem: Problem, num_tokens: int, max_length: int, cache_length: int
) -> float:
    """DAPO overlong reward shaping of a completion of ``num_tokens`` tokens (see
    :func:`overlong_penalty`); weight 1 in a :class:`CombinedReward` reproduces the paper."""
    return overlong_penalty(int(num_tokens), int(max_length), int(cache_length))


def truncation_penalty(reward: float, length: int, max_tokens: int) -> float:
    """DLER truncation penalty (Liu et al., 2025, "DLER: Doing Length pEnalty Right -
    Incentivizing More Intelligence per Token via Reinforcement Learning"): a completion longer
    than the budget ``max_tokens`` gets reward 0, any other keeps ``reward``."""
    if max_tokens <= 0:
        raise ValueError(f"length_truncation: max_tokens must be positive, got {max_tokens}")
    return 0.0 if length > max_tokens else reward


@register_reward("length_truncation")
def length_truncation(
    completion: str,
    problem: Problem,
    num_tokens: int,
    max_tokens: int,
    reward: str = "math",
    reward_params: Mapping[str, Any] | None = None,
    **fields: Any,
) -> float:
    """The per-sample reward ``reward`` (a registered name, with ``reward_params``) under the
    DLER truncation penalty: 0.0 when ``num_tokens > max_tokens`` (the inner reward is not even
    computed), else the inner reward. Other fields are passed on to the inner reward when it
    accepts them."""
    if int(num_tokens) > int(max_tokens):
        return truncation_penalty(0.0, int(num_tokens), int(max_tokens))
    inner = get_reward(reward)
    if inner.kind != "sample":
        raise ValueError(f"length_truncation: reward {reward!r} is a group reward")
    signature = RewardSignature.of(inner.fn)
    params = dict(reward_params or {})
    passed = {k: v for k, v in fields.items() if signature.accepts(k) and k not in params}
    if signature.accepts("num_tokens"):
        passed["num_tokens"] = num_tokens
    value = inner.fn(completion, problem, **params, **passed)
    if not isinstance(value, numbers.Real):
        raise TypeError(f"length_truncation: reward {reward!r} returned {type(value).__name__}")
    return truncation_penalty(float(value), int(num_tokens), int(max_tokens))
