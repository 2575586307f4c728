"""The run's reward: the task's own verifier, a user function, or a weighted sum of named rewards.

:func:`build_reward` is the one entry point (trainer and Python API). A user reward is

- per sample: ``f(completion: str, problem: rlvr.data.Problem, **fields) -> float``;
- per group (registered with ``@rlvr.rewards.register_reward(name, kind="group")``):
  ``f(completions: list[str], problem: rlvr.data.Problem, **fields) -> list[float]``,

named in config as ``module:function`` (a module in the current directory, or importable from
``PYTHONPATH``; :func:`rlvr.rewards.registry.load_function`) or passed to the Python API as the
function itself. Fields are keyword parameters the run fills per sample
(:data:`rlvr.rewards.protocol.SAMPLE_FIELDS`), or fixed values set under ``params``. The value
must be a real number (``bool`` counts as 0/1), finite and at most ``max_abs`` in magnitude.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rlvr.data.base import Task
from rlvr.rewards.combined import CombinedReward, OnError, RewardSpec
from rlvr.rewards.executor import ExecutorKind
from rlvr.rewards.protocol import DEFAULT_MAX_ABS, RewardConfigError

if TYPE_CHECKING:
    from rlvr.config import RewardConfig


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
    :class:`~rlvr.rewards.combined.RewardBreakdown`, probe it once with ``reward.check(problem)``
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


def config_terms(reward: RewardConfig) -> list[RewardSpec]:
    """The terms of a ``reward`` config section as :class:`RewardSpec`, each ``params.judge``
    naming a ``reward.judges`` entry replaced by that judge's config (a plain mapping: a reward
    worker, a process or a Ray worker, builds the judge from it)."""
    specs = []
    for t in reward.terms:
        params: Mapping[str, Any] = dict(t.params)
        name = params.get("judge")
        if isinstance(name, str):
            if name not in reward.judges:
                raise RewardConfigError(
                    f"reward term {t.label or t.name!r} names judge {name!r}, which "
                    f"reward.judges does not define (defined: {', '.join(reward.judges) or 'none'})"
                )
            params = {**params, "judge": reward.judges[name].model_dump(mode="json")}
        specs.append(RewardSpec(t.name, t.weight, params, t.label))
    return specs
