"""Task registry: build a task by name."""

from __future__ import annotations

from collections.abc import Callable

from rlvr.data.arithmetic import ArithmeticTask
from rlvr.data.base import Task
from rlvr.data.files import FileTask

TASKS: dict[str, str] = {
    "arithmetic": "procedural integer arithmetic, difficulty levels 1-6 (ArithmeticTask)",
    "file": "prompt/answer pairs from a local .jsonl/.json/.parquet/.csv file (FileTask)",
}

_CONSTRUCTORS: dict[str, Callable[..., Task]] = {"arithmetic": ArithmeticTask, "file": FileTask}


def make_task(name: str, **kwargs) -> Task:
    """Build the task registered as ``name`` with ``kwargs`` passed to its constructor."""
    if name not in _CONSTRUCTORS:
        raise ValueError(f"unknown task {name!r}; accepted: {', '.join(sorted(_CONSTRUCTORS))}")
    return _CONSTRUCTORS[name](**kwargs)
