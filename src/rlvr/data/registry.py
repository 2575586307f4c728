"""Task registry: build a task by name.

Names: "arithmetic", "file", "countdown", and "reasoning_gym:NAME" for any dataset NAME that
reasoning-gym registers (e.g. "reasoning_gym:chain_sum").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlvr.data.arithmetic import ArithmeticTask
from rlvr.data.base import Task
from rlvr.data.countdown import LEVELS as COUNTDOWN_LEVELS
from rlvr.data.countdown import CountdownTask
from rlvr.data.files import FileTask
from rlvr.data.guess_number import GuessNumberTask
from rlvr.data.reasoning_gym import PREFIX as REASONING_GYM_PREFIX
from rlvr.data.reasoning_gym import ReasoningGymTask
from rlvr.data.textarena import TextArenaTask
from rlvr.ecosystems import ecosystem_of, task_families

TASKS: dict[str, str] = {
    "arithmetic": "procedural integer arithmetic, difficulty levels 1-6 (ArithmeticTask)",
    "file": "prompt/answer rows (text or chat) from a .jsonl/.json/.parquet/.csv file, a "
    "save_to_disk directory or a Hugging Face dataset in the local cache (FileTask)",
    "countdown": "reach a target with + - * / using each given number once, levels 1-3 "
    "(CountdownTask)",
    "reasoning_gym:<name>": "a reasoning-gym dataset, e.g. reasoning_gym:chain_sum, scored by its "
    "own verifier (ReasoningGymTask; needs `pip install reasoning-gym`)",
    "guess_number": "hidden numbers in 1..max_value for env guess_number (GuessNumberTask)",
    "textarena:<env_id>": "labelled games for env textarena (TextArenaTask)",
    "gem:<env_id>": "labelled episodes for env gem:<env_id> (a GEM environment)",
    "openenv:<URL>": "labelled episodes for env openenv:<URL> (an OpenEnv server)",
    "verifiers:<taskset>": "a verifiers taskset's tasks, scored by its own rewards (VerifiersTask)",
}

_CONSTRUCTORS: dict[str, Callable[..., Task]] = {
    "arithmetic": ArithmeticTask,
    "file": FileTask,
    "countdown": CountdownTask,
    "guess_number": GuessNumberTask,
}
# Difficulty levels per task; a task not listed here takes no ``level``.
LEVELS: dict[str, tuple[int, int]] = {
    "arithmetic": (1, 8),
    "countdown": (min(COUNTDOWN_LEVELS), max(COUNTDOWN_LEVELS)),
}


def _verifiers_task(taskset: str, **kwargs: Any) -> Task:
    from rlvr.data.verifiers_tasks import VerifiersTask

    options = {k: v for k, v in kwargs.items() if k not in ("seed", "n_eval")}
    return VerifiersTask(taskset, kwargs.get("n_eval", 32), **options)


_ECOSYSTEM_TASKS: dict[str, Callable[..., Task]] = {
    "reasoning_gym": ReasoningGymTask,
    "textarena": lambda env_id, **kwargs: TextArenaTask(env_id, n_eval=kwargs.get("n_eval", 32)),
    "gem": lambda env_id, **kwargs: TextArenaTask(env_id, kwargs.get("n_eval", 32), "gem"),
    "openenv": lambda url, **kwargs: TextArenaTask(url, kwargs.get("n_eval", 32), "openenv"),
    "verifiers": _verifiers_task,
}
"""The task side of each ecosystem with tasks (:data:`rlvr.ecosystems.ECOSYSTEMS`), from its id:
a reasoning-gym dataset, labelled episodes of a TextArena / GEM / OpenEnv environment, a
verifiers taskset."""


def is_task_name(name: str) -> bool:
    """True if ``name`` is a registered task or another ecosystem's ``PREFIX<id>``."""
    return name in _CONSTRUCTORS or ecosystem_of(name, "task") is not None


def _check_level(name: str, kwargs: dict[str, Any]) -> None:
    """ValueError unless ``kwargs["level"]`` (when given) is within the task's levels."""
    if "level" not in kwargs:
        return
    family = REASONING_GYM_PREFIX if name.startswith(REASONING_GYM_PREFIX) else name
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
    if not is_task_name(name):
        accepted = [*_CONSTRUCTORS, *task_families()]
        raise ValueError(f"unknown task {name!r}; accepted: {', '.join(accepted)}")
    _check_level(name, kwargs)
    found = ecosystem_of(name, "task")
    if found is not None:
        ecosystem, task_id = found
        return _ECOSYSTEM_TASKS[ecosystem.prefix.rstrip(":")](task_id, **kwargs)
    return _CONSTRUCTORS[name](**kwargs)
