"""Checks on a built task before any sampling: prompt lengths, and what loading left out.

:func:`limit_prompt_length` checks every prompt of a finite task (file and dataset tasks and
mixtures of them: every training and held-out row) against a token limit, and the held-out
problems of a procedural task (arithmetic, countdown, reasoning_gym), before the engine sees
any: a prompt over the limit is an error naming its row, or is left out and counted.
:func:`data_stats` gives the counts a run logs once (``data/...``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection
from typing import Any, Literal

from rlvr.config import Config, ConfigError
from rlvr.data.base import Problem, Task
from rlvr.data.files import FileTask
from rlvr.data.mixture import MixtureTask
from rlvr.errors import DataError

LongPrompts = Literal["drop", "error"]


def limit_prompt_length(
    task: Task,
    count_tokens: Callable[[Problem], int],
    max_tokens: int,
    mode: LongPrompts = "error",
) -> tuple[Task, int]:
    """``task`` without problems whose prompt is over ``max_tokens`` tokens, and their number.

    Args:
        task: as built by :func:`rlvr.data.build_task`.
        count_tokens: tokens of a problem's prompt as the policy sees it (its chat rendered by
            the chat template, system prompt included).
        max_tokens: the most prompt tokens allowed (``task.max_prompt_tokens``, or the model's
            context less the completion length).
        mode: "error": raise DataError naming the first long prompt's row (or problem id), its
            token count and the limit; "drop": leave long problems out (counted in
            ``data/long_prompts_dropped``, :func:`data_stats`).

    File tasks have every training and held-out row checked; procedural tasks (unbounded
    streams) their held-out problems only. Returns ``task`` itself when nothing is dropped.
    """
    if mode not in ("drop", "error"):
        raise ValueError(f"mode must be 'drop' or 'error', got {mode!r}")
    if isinstance(task, MixtureTask):
        limited = [limit_prompt_length(t, count_tokens, max_tokens, mode) for t in task.tasks]
        dropped = sum(n for _, n in limited)
        if dropped == 0:
            return task, 0
        return MixtureTask([t for t, _ in limited], task.categories, name=task.name), dropped
    if isinstance(task, FileTask):
        long = []
        for row, problem in task.rows():
            n = count_tokens(problem)
            if n > max_tokens:
                _refuse(row.where, n, max_tokens, mode)
                long.append(row)
        if not long:
            return task, 0
        return task.without(long, f"is over {max_tokens} prompt tokens"), len(long)
    long_ids = set()
    for problem in task.eval_problems():
        n = count_tokens(problem)
        if n > max_tokens:
            _refuse(f"held-out problem {problem.id!r} of task {task.name}", n, max_tokens, mode)
            long_ids.add(problem.id)
    if not long_ids:
        return task, 0
    return HeldOutSubset(task, long_ids), len(long_ids)


def _refuse(where: str, n_tokens: int, max_tokens: int, mode: LongPrompts) -> None:
    """DataError for a long prompt in "error" mode."""
    if mode == "error":
        raise DataError(
            f"{where}: the prompt is {n_tokens:,} tokens, over the limit of {max_tokens:,} "
            "prompt tokens (task.max_prompt_tokens, or the model's context less "
            "rollout.max_new_tokens); shorten it, or set task.long_prompts: drop to leave such "
            "prompts out (counted in data/long_prompts_dropped)"
        )


class HeldOutSubset:
    """A procedural task with some held-out problems left out (their prompts are too long);
    everything else (training stream, scoring, extra attributes) is the wrapped task's."""

    def __init__(self, task: Task, dropped_ids: Collection[str]) -> None:
        self.task = task
        self.name = task.name
        self._dropped = frozenset(dropped_ids)
        self.long_prompts_dropped = len(self._dropped)

    def __getattr__(self, attribute: str) -> Any:
        if attribute == "task":  # not set yet (copy, unpickling)
            raise AttributeError(attribute)
        return getattr(self.task, attribute)

    def train_problem(self, index: int) -> Problem:
        """The wrapped task's training problem."""
        return self.task.train_problem(index)

    def eval_problems(self) -> list[Problem]:
        """The wrapped task's held-out problems less the dropped ones."""
        return [p for p in self.task.eval_problems() if p.id not in self._dropped]

    def score(self, completion: str, problem: Problem) -> float:
        """The wrapped task's score."""
        return self.task.score(completion, problem)


def limit_task_prompts(task: Task, tokenizer: Any, policy: Any, config: Config) -> tuple[Task, int]:
    """The task less the problems whose prompt is too long, and their number; training and
    evaluation both check prompts this way (:func:`rlvr.data.limit_prompt_length` with the
    smaller of ``task.max_prompt_tokens`` and the model's context (or vLLM's
    ``rollout.vllm.max_model_len``) less ``rollout.max_new_tokens``; ``task.long_prompts`` says
    drop or error)."""
    from rlvr.models import encode_messages  # the chat template renders the prompt

    system_prompt = config.model.system_prompt
    context = int(getattr(policy.config, "max_position_embeddings", 0) or 0)
    if config.rollout.engine == "vllm" and config.rollout.vllm.max_model_len:
        context = min(
            context or config.rollout.vllm.max_model_len, config.rollout.vllm.max_model_len
        )
    limits = [config.task.max_prompt_tokens] if config.task.max_prompt_tokens else []
    if context:
        room = context - config.rollout.max_new_tokens
        if room <= 0:
            raise ConfigError(
                f"rollout.max_new_tokens ({config.rollout.max_new_tokens}) leaves no room for a "
                f"prompt in the model's context of {context} tokens"
            )
        limits.append(room)
    if not limits:
        return task, 0

    def count(problem: Problem) -> int:
        return len(encode_messages(tokenizer, problem.messages(system_prompt)))

    return limit_prompt_length(task, count, min(limits), config.task.long_prompts)


def data_stats(task: Task) -> dict[str, int]:
    """Counts to log once per run: ``data/duplicates_dropped`` (rows whose prompt repeats an
    earlier row's), ``data/duplicate_conflicts`` (those whose answer differed from the kept
    row's), ``data/long_prompts_dropped`` (:func:`limit_prompt_length`), and for file tasks
    ``data/train_rows``, ``data/eval_rows`` and ``data/eval_rows_unused`` (held out beyond
    ``task.n_eval``: neither trained nor evaluated on). A mixture sums its categories'."""
    if isinstance(task, MixtureTask):
        parts = [data_stats(t) for t in task.tasks]
        keys = set.intersection(*(set(p) for p in parts))
        return {key: sum(p[key] for p in parts) for key in sorted(keys)}
    stats = {"data/long_prompts_dropped": getattr(task, "long_prompts_dropped", 0)}
    if isinstance(task, FileTask):
        stats |= {
            "data/duplicates_dropped": len(task.duplicates),
            "data/duplicate_conflicts": sum(d.conflict for d in task.duplicates),
            "data/train_rows": task.n_train,
            "data/eval_rows": task.n_eval,
            "data/eval_rows_unused": task.eval_rows_unused,
        }
    return stats


def data_fingerprint(task: Task) -> str | None:
    """SHA-256 over every problem (id, chat, answer) of a finite task (file and dataset tasks and
    mixtures of them), in order; None for procedural tasks, which their config fixes. A resume
    compares it with the run's, so edited data is never silently trained on as if unchanged."""
    if isinstance(task, MixtureTask):
        parts = [data_fingerprint(t) for t in task.tasks]
        if any(p is None for p in parts):
            return None
        return hashlib.sha256("".join(parts).encode()).hexdigest()
    if not isinstance(task, FileTask):
        return None
    digest = hashlib.sha256()
    for _, problem in task.rows():
        digest.update(json.dumps([problem.id, problem.messages(), problem.answer]).encode())
    return digest.hexdigest()
