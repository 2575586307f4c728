"""Reward functions: ``(completion, problem) -> float``, the task's verifier or a user function.

A user reward is named in config as ``module:function`` (an importable module, e.g. a file on
``PYTHONPATH``) and called with the completion text and the :class:`rlvr.data.Problem`.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable

from rlvr.data.base import Problem, Task

RewardFn = Callable[[str, Problem], float]


def load_function(spec: str) -> RewardFn:
    """Import ``module:function``; errors name what was given and what is expected."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"reward.function must look like 'module:function', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(
            f"reward.function {spec!r}: cannot import {module_name!r} ({err})"
        ) from err
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"reward.function {spec!r}: {module_name} has no callable {attr!r}")
    return fn


def make_reward(task: Task, function: str | None = None) -> RewardFn:
    """The run's reward: the task's own verifier, or the user function when one is named."""
    fn = task.score if function is None else load_function(function)

    def reward(completion: str, problem: Problem) -> float:
        value = float(fn(completion, problem))
        if not math.isfinite(value):
            raise ValueError(
                f"reward {function or task.name + ' verifier'} returned {value} for problem "
                f"{problem.id!r}; completion starts {completion[:80]!r}"
            )
        return value

    return reward
