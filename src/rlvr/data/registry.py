"""Tasks by name (:data:`rlvr.catalog.TASKS`): the built-in ones, another project's
(``reasoning_gym:NAME``, ``gem:<env_id>``, ... : the families of :data:`rlvr.ecosystems.
ECOSYSTEMS`), and a user's (:func:`register_task`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlvr.catalog import TASKS
from rlvr.data.base import Task
from rlvr.data.countdown import LEVELS as COUNTDOWN_LEVELS

LEVELS: dict[str, tuple[int, int]] = {
    "arithmetic": (1, 8),
    "countdown": (min(COUNTDOWN_LEVELS), max(COUNTDOWN_LEVELS)),
    "search_qa": (1, 3),
    "judge": (1, 8),
}
"""Difficulty levels per task; a task not listed here takes no ``level``."""


def register_task(name: str, description: str) -> Callable[[type], type]:
    """Class decorator: make a task class (``Task(**options) -> Task``) selectable as
    ``task.name: NAME`` and listed by ``rlvr tasks``."""

    def decorator(cls: type) -> type:
        TASKS.add(name, cls, description)
        return cls

    return decorator


def is_task_name(name: str) -> bool:
    """True if ``name`` is a registered task or another ecosystem's ``PREFIX<id>``."""
    return TASKS.lookup(name) is not None


def _check_level(family: str, name: str, kwargs: dict[str, Any]) -> None:
    """ValueError unless ``kwargs["level"]`` (when given) is within the task's levels."""
    if "level" not in kwargs:
        return
    if family not in LEVELS:
        raise ValueError(f"task {name!r} has no difficulty levels; do not pass level")
    lo, hi = LEVELS[family]
    level = kwargs["level"]
    if not isinstance(level, int) or not lo <= level <= hi:
        raise ValueError(f"{name} level must be an integer in {lo}..{hi}, got {level!r}")


def make_task(name: str, **kwargs: Any) -> Task:
    """Build the task registered as ``name`` with ``kwargs`` passed to its constructor.

    ``make_task("countdown", level=1, seed=0, n_eval=100)``;
    ``make_task("reasoning_gym:chain_sum", seed=0, n_eval=100, size=10_000, min_terms=2)``
    (options other than seed, n_eval, size and prompt_template go to the dataset's config).
    """
    found = TASKS.lookup(name)
    if found is None:
        raise ValueError(f"unknown task {name!r}; accepted: {', '.join(TASKS)}")
    entry, task_id = found
    _check_level(entry, name, kwargs)
    make = TASKS[entry]
    return make(**kwargs) if task_id is None else make(task_id, **kwargs)
