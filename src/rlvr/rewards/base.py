"""The run's reward: the task's own verifier, a user function, or a weighted sum of named rewards.

:func:`build_reward` is the one entry point (trainer and Python API). A user reward is

- per sample: ``f(completion: str, problem: rlvr.data.Problem, **fields) -> float``;
- per group (registered with ``@rlvr.rewards.register_reward(name, kind="group")``):
  ``f(completions: list[str], problem: rlvr.data.Problem, **fields) -> list[float]``,

named in config as ``module:function`` (a module in the current directory, or importable from
``PYTHONPATH``) or passed to the Python API as the function itself. Fields are keyword
parameters the run fills per sample (:data:`rlvr.rewards.registry.SAMPLE_FIELDS`), or fixed
values set under ``params``. The value must be a real number (``bool`` counts as 0/1), finite
and at most ``max_abs`` in magnitude.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from rlvr.data.base import Task
from rlvr.rewards.registry import (
    DEFAULT_MAX_ABS,
    CombinedReward,
    ExecutorKind,
    OnError,
    RewardConfigError,
    RewardSpec,
)
from rlvr.user_code import import_user_module

CALLABLE_MARKER = "<python callable>:"


def callable_name(fn: Callable[..., Any]) -> str:
    """How a Python reward is recorded in a run's config: ``"module:function"`` when that
    imports back to ``fn`` from a module other than ``__main__``, else
    ``"<python callable>:module.qualname"`` (which :func:`load_function` refuses, saying how
    to resume)."""
    module = getattr(fn, "__module__", None) or "?"
    qualname = getattr(fn, "__qualname__", None) or type(fn).__name__
    if module != "__main__" and "." not in qualname and "<" not in qualname:
        imported = sys.modules.get(module)
        if imported is not None and getattr(imported, qualname, None) is fn:
            return f"{module}:{qualname}"
    return f"{CALLABLE_MARKER}{module}.{qualname}"


def load_function(spec: str) -> Callable[..., Any]:
    """Import ``module:function``; the current directory is importable (appended to
    ``sys.path``, after installed packages, so a local file cannot shadow one).

    Raises :class:`RewardConfigError` naming the module and what went wrong: not found (and
    where it was looked for), an error while importing it, or no such callable.
    """
    if spec.startswith(CALLABLE_MARKER):
        raise RewardConfigError(
            f"reward {spec!r}: this run's reward was a Python function passed to rlvr.train(); "
            "resume it from Python: train(cfg, resume=RUN, reward=your_function)"
        )
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise RewardConfigError(f"reward {spec!r}: expected 'module:function'")
    module = import_user_module(module_name, f"reward {spec!r}", RewardConfigError)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise RewardConfigError(
            f"reward {spec!r}: module {module_name!r} ({getattr(module, '__file__', '?')}) has "
            f"no callable {attr!r}"
        )
    return fn


def build_reward(
    task: Task,
    function: str | Callable[..., Any] | None = None,
    terms: Sequence[Any] = (),
    *,
    on_error: OnError = "raise",
    timeout_s: float | None = 60.0,
    max_abs: float = DEFAULT_MAX_ABS,
    executor: ExecutorKind = "thread",
    max_workers: int | None = None,
) -> CombinedReward:
    """The run's reward, from one of three sources: ``function`` (``"module:function"`` or a
    callable), ``terms`` (:class:`RewardSpec` or what :meth:`RewardSpec.coerce` accepts; the
    name ``task``/``verifier`` is the task's verifier), or neither: the task's verifier alone.

    The task's verifier runs inline (cheap, no time limit); every other reward runs on a worker
    under ``timeout_s``. Call the result as ``reward(texts, problems, **fields)`` for a
    :class:`~rlvr.rewards.registry.RewardBreakdown`, probe it once with ``reward.check(problem)``
    before the first rollout, and ``close()`` it at the end.
    """
    if function is not None and terms:
        raise RewardConfigError("set reward.function or reward.terms, not both")
    specs = [RewardSpec(function)] if function is not None else list(terms)
    return CombinedReward(
        specs or [RewardSpec("task")],
        task=task,
        on_error=on_error,
        timeout_s=timeout_s,
        max_abs=max_abs,
        executor=executor,
        max_workers=max_workers,
    )
