"""The registry of named rewards: ``@register_reward``, lookup by name or ``module:function``.

A reward is registered under a name with its kind (per sample or per group, see
:mod:`rlvr.rewards.protocol`); :func:`get_reward` resolves a registered name, a
``"module:function"`` (imported with :func:`load_function`; the current directory is importable)
or a callable. The built-in rewards register themselves when their modules are imported, which
happens on the first lookup. The names ``task`` and ``verifier`` are reserved: they mean the
task's own verifier, which the combined reward resolves with the task
(:class:`~rlvr.rewards.combined.CombinedReward`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlvr.registry import Registry
from rlvr.rewards.protocol import RewardConfigError, RewardKind, qualified_name
from rlvr.user_code import import_user_module

# Modules whose import registers the built-in rewards (imported on first lookup).
_BUILTIN_MODULES = (
    "rlvr.rewards.final_answer",
    "rlvr.rewards.structure",
    "rlvr.rewards.similarity",
    "rlvr.rewards.length",
    "rlvr.rewards.exploration",
    "rlvr.rewards.code",
    "rlvr.rewards.label_free",
    "rlvr.rewards.reference_probability",
    "rlvr.rewards.reward_model",
    "rlvr.rewards.novelty",
    "rlvr.rewards.judged",
    "rlvr.rewards.pairwise",
    "rlvr.rewards.rubric",
    "rlvr.rewards.process",
)

# Reward names that mean the task's own verifier (resolved with the task, not the registry).
TASK_REWARD_NAMES = ("task", "verifier")


@dataclass(frozen=True)
class RegisteredReward:
    """A named reward function and its kind; an ``inline`` reward (the task's own verifier:
    trusted, cheap and bounded) runs in the caller's thread, without a worker or time limit."""

    name: str
    fn: Callable[..., Any]
    kind: RewardKind
    inline: bool = False


def _same_function(old: RegisteredReward, new: RegisteredReward) -> bool:
    """The same ``module.qualname`` registered again (its module imported twice)."""
    return qualified_name(old.fn) == qualified_name(new.fn)


REWARDS: Registry[RegisteredReward] = Registry(
    "reward", modules=_BUILTIN_MODULES, same=_same_function
)
"""Rewards by name; the built-in ones register when the registry is first read (their modules
imported then); a module imported twice registers its functions again, not a conflict."""


def register_reward(name: str, kind: RewardKind = "sample") -> Callable[[Callable], Callable]:
    """Decorator: register ``fn`` under ``name`` as a per-sample or per-group reward.

    The function is returned unchanged (so it stays picklable by reference for process pools).
    Registering a different function under a taken name raises ``ValueError``; re-registering
    the same ``module.qualname`` (a module imported twice) replaces the entry.
    """
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"reward name must be a non-empty string without ':', got {name!r}")
    if name in TASK_REWARD_NAMES:
        raise ValueError(f"reward name {name!r} is reserved for the task's own verifier")
    if kind not in ("sample", "group"):
        raise ValueError(f"reward {name!r}: kind must be 'sample' or 'group', got {kind!r}")

    def decorator(fn: Callable) -> Callable:
        try:
            REWARDS.add(name, RegisteredReward(name, fn, kind))
        except ValueError:
            old = dict.get(REWARDS, name)
            raise ValueError(
                f"reward {name!r} is already registered to {qualified_name(old.fn)}; "
                f"cannot register {qualified_name(fn)} under the same name"
            ) from None
        return fn

    return decorator


def available_rewards() -> list[str]:
    """Names of all registered rewards (built-ins included), sorted."""
    return sorted(REWARDS)


def get_reward(name: str | Callable[..., Any]) -> RegisteredReward:
    """The registered reward ``name``; for ``"module:function"`` or a callable, that function.

    A function that was registered keeps its registered kind, otherwise it is a per-sample
    reward. Unknown names raise :class:`RewardConfigError` listing the known ones (the task's
    verifier, ``task``, is resolved by :class:`~rlvr.rewards.combined.CombinedReward`, which
    holds the task).
    """
    if callable(name) or ":" in name:
        if callable(name):
            fn, label = name, _callable_name(name)
        else:
            fn, label = load_function(name), name
        for entry in dict.values(REWARDS):  # registered already if its module is imported
            if entry.fn is fn:
                return entry
        return RegisteredReward(label, fn, "sample")
    entry = REWARDS.get(name)
    if entry is None:
        raise RewardConfigError(
            f"unknown reward {name!r}; registered rewards: "
            f"{', '.join(sorted([*REWARDS, *TASK_REWARD_NAMES]))} "
            "(or name a function as 'module:function')"
        )
    return entry


def _callable_name(fn: Callable[..., Any]) -> str:
    """A function's label: its ``__name__``, or ``function`` for a lambda."""
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return "function" if name == "<lambda>" else name


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
