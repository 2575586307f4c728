"""Length rewards: DAPO's soft overlong punishment, DLER's truncation penalty, GRPO-LEAD's
length-dependent accuracy reward and HBPO's budget-aware reward.

Both need the completion's length in tokens, passed as the per-sample field ``num_tokens``
(the rollout engine knows it; counting characters would be a different reward).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
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
    value = _inner(
        "length_truncation", reward, reward_params, completion, problem, num_tokens, fields
    )
    return truncation_penalty(value, int(num_tokens), int(max_tokens))


def _inner(
    who: str,
    reward: str,
    reward_params: Mapping[str, Any] | None,
    completion: str,
    problem: Problem,
    num_tokens: int,
    fields: Mapping[str, Any],
) -> float:
    """The per-sample reward ``reward`` (a registered name, with ``reward_params``) of one
    completion, given the fields it accepts (``num_tokens`` among them)."""
    inner = get_reward(reward)
    if inner.kind != "sample":
        raise ValueError(f"{who}: reward {reward!r} is a group reward")
    signature = RewardSignature.of(inner.fn)
    params = dict(reward_params or {})
    passed = {k: v for k, v in fields.items() if signature.accepts(k) and k not in params}
    if signature.accepts("num_tokens"):
        passed["num_tokens"] = num_tokens
    value = inner.fn(completion, problem, **params, **passed)
    if not isinstance(value, numbers.Real):
        raise TypeError(f"{who}: reward {reward!r} returned {type(value).__name__}")
    return float(value)


def lead_accuracy_rewards(
    correct: Sequence[bool],
    lengths: Sequence[int],
    alpha: float = 0.05,
    eps: float = 1e-6,
    penalty: float = -1.0,
    min_shortest: float = 0.0,
) -> list[float]:
    """GRPO-LEAD's length-dependent accuracy reward with its explicit penalty (Zhang & Zuo 2025,
    "GRPO-LEAD", arXiv:2504.09696, Sec. 3.1-3.2; read in the paper and in the authors'
    ``RewardManager.get_reweight_rewards``): over the group's correct completions only, their
    lengths' mean mu and unbiased std sigma (1 with fewer than two correct),
    ``z = (|o| - mu) / (sigma + eps)``; a correct completion scores ``exp(-alpha z)`` (above 1
    when shorter than its correct peers), an incorrect one ``penalty`` (-1: Sec. 3.2's explicit
    penalty; 0 is Sec. 3.1's reward alone). The authors' code shapes a group only when its three
    shortest completions average more than 4000 tokens (their long-reasoning regime), else its
    correct completions score 1: ``min_shortest`` (0: every group is shaped).

    Args:
        correct: [G] whether each completion of one prompt is right.
        lengths: [G] their lengths in tokens.
    Returns:
        [G] rewards."""
    if alpha < 0 or eps <= 0:
        raise ValueError(f"lead_accuracy: need alpha >= 0 and eps > 0, got {alpha}, {eps}")
    right = [float(n) for n, ok in zip(lengths, correct, strict=True) if ok]
    shortest = sorted(float(n) for n in lengths)[:3]
    if not right or sum(shortest) / len(shortest) <= min_shortest:
        return [1.0 if ok else penalty for ok in correct]
    mu = sum(right) / len(right)
    sigma = (sum((n - mu) ** 2 for n in right) / (len(right) - 1)) ** 0.5 if len(right) > 1 else 1.0
    return [
        math.exp(-alpha * (n - mu) / (sigma + eps)) if ok else penalty
        for n, ok in zip(lengths, correct, strict=True)
    ]


@register_reward("lead_accuracy", kind="group")
def lead_accuracy(
    completions: list[str],
    problem: Problem,
    num_tokens: list[int],
    alpha: float = 0.05,
    penalty: float = -1.0,
    eps: float = 1e-6,
    min_shortest: float = 0.0,
    threshold: float = 1.0,
    reward: str = "math",
    reward_params: Mapping[str, Any] | None = None,
    **fields: list[Any],
) -> list[float]:
    """GRPO-LEAD's reward of one group (:func:`lead_accuracy_rewards`): a completion is correct
    when the per-sample reward ``reward`` (a registered name, with ``reward_params``; its other
    fields passed on) reaches ``threshold``."""
    correct = [
        _inner(
            "lead_accuracy",
            reward,
            reward_params,
            text,
            problem,
            num_tokens[i],
            {k: v[i] for k, v in fields.items()},
        )
        >= threshold
        for i, text in enumerate(completions)
    ]
    lengths = [int(n) for n in num_tokens]
    return lead_accuracy_rewards(correct, lengths, alpha, eps, penalty, min_shortest)


@register_reward("hbpo_budget")
def hbpo_budget(
    completion: str,
    problem: Problem,
    num_tokens: int,
    scale: float = 4.0,
    alpha: float | None = None,
    max_len: int = 4096,
    threshold: float = 1.0,
    template: str = algorithms.HBPO_TEMPLATE,
    reward: str = "math",
    reward_params: Mapping[str, Any] | None = None,
    **fields: Any,
) -> float:
    """HBPO's budget-aware reward (Lyu et al. 2025, arXiv:2507.15844;
    :func:`rlvr.algorithms.budget_reward`): the budget b is read from the reply's budget
    statement (``template``, the budgets stage's, as the authors' code reads it by regex; a
    reply without one scores 0), n is its length in tokens (the statement's included, as the
    code's), and it is correct when the per-sample reward ``reward`` (a registered name, with
    ``reward_params``) of the reply without its statement reaches ``threshold``; ``scale`` is
    the paper's beta (4), ``alpha`` its alpha (None: 1 / max_len). The ``hbpo`` advantage's
    f2(b) reads the same ``scale`` and ``max_len``: the config checks they agree."""
    found = algorithms.budget_pattern(template).search(completion)
    if found is None:
        return 0.0
    answer = completion[: found.start()] + completion[found.end() :]  # the statement is no answer
    value = _inner("hbpo_budget", reward, reward_params, answer, problem, num_tokens, fields)
    correct = value >= threshold
    return algorithms.budget_reward(
        int(num_tokens), float(found.group(1)), correct, scale, alpha, int(max_len)
    )
