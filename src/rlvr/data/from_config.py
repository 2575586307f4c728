"""Build the task a run's ``task:`` section describes (training and ``rlvr eval`` share this, so
both see the same problems, prompts and verifier)."""

from __future__ import annotations

from typing import Any

from rlvr.config import ConfigError, TaskConfig
from rlvr.data.base import Task
from rlvr.data.files import file_mixture
from rlvr.data.mixture import MixtureTask
from rlvr.data.registry import make_task
from rlvr.ecosystems import ecosystem_of
from rlvr.errors import RlvrError


def build_task(t: TaskConfig) -> Task:
    """The task of a ``task:`` section (:func:`_build`); a task constructor's ``ValueError``
    (an unknown reasoning-gym dataset, a bad option) becomes a ConfigError naming ``task``."""
    try:
        return _build(t)
    except ValueError as err:
        if isinstance(err, RlvrError):
            raise
        raise ConfigError(f"task: {err}") from None


def _build(t: TaskConfig) -> Task:
    """The task of a ``task:`` section; with ``levels``, a :class:`MixtureTask` with one category
    ("L1", "L2", ...) per level; with a file task's ``category_column``, one category per value
    of the column. Prompt lengths are checked separately
    (:func:`rlvr.data.checks.limit_prompt_length`), once the tokenizer is known."""
    kwargs: dict[str, Any] = {"seed": t.seed, "n_eval": t.n_eval}
    if t.prompt_template is not None:
        kwargs["prompt_template"] = t.prompt_template
    leveled = ("arithmetic", "countdown", "search_qa", "judge")
    if t.name in ("search_qa", "judge"):
        kwargs.update(t.dataset_kwargs)
    if t.name in leveled and t.levels:
        tasks = [make_task(t.name, level=level, **kwargs) for level in t.levels]
        return MixtureTask(tasks, [f"L{level}" for level in t.levels], name=t.name)
    if t.name in leveled:
        return make_task(t.name, level=t.level, **kwargs)
    if t.name.startswith("reasoning_gym:"):
        return make_task(t.name, size=t.size, **t.dataset_kwargs, **kwargs)
    if t.name == "guess_number" or ecosystem_of(t.name, "task") is not None:
        kwargs.pop("prompt_template", None)
        return make_task(t.name, **t.dataset_kwargs, **kwargs)
    source = {
        "prompt_column": t.prompt_column,
        "answer_column": t.answer_column,
        "split_column": t.split_column,
        "eval_fraction": t.eval_fraction,
        "split": t.split,
        "eval_split": t.eval_split,
        "subset": t.subset,
        "answer_pattern": t.answer_pattern,
        "completion_column": t.completion_column,
        "chosen_column": t.chosen_column,
        "rejected_column": t.rejected_column,
    }
    if t.category_column:
        return file_mixture(t.path, t.category_column, **source, **kwargs)
    return make_task("file", path=t.path, **source, **kwargs)
