"""Problems from a data file or a Hugging Face dataset (``task.name: file``).

``path`` is a local .jsonl / .json / .parquet / .csv file, a ``save_to_disk`` directory or a hub
dataset name read from the local cache (:mod:`rlvr.data.sources`). Each row gives a prompt
(text or a chat) and a reference answer; rows are checked, rendered with the prompt template and
de-duplicated by :mod:`rlvr.data.rows` before any split. The held-out split is the rows marked
by a split column or the dataset's ``eval_split``, or else a seeded ``eval_fraction`` of the
rows; training problems walk a fresh seeded permutation of the training rows every epoch. A
category column (a source, a difficulty) splits the rows into one task per value, mixed by
:func:`file_mixture` for the category curricula (:mod:`rlvr.curriculum`).

Scoring: a reference that parses as a number is compared numerically with the completion's
final number (:func:`rlvr.answers.extract_answer`); any other reference is compared
as normalised text (case, punctuation, articles and spacing ignored) with the completion's
final answer line (:func:`rlvr.data.reasoning_gym.extract_final_answer`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Collection
from typing import Any

import numpy as np

from rlvr.answers import extract_answer, normalize_text, parse_number
from rlvr.data.base import FILE_PROMPT_TEMPLATE, Problem
from rlvr.data.mixture import MixtureTask
from rlvr.data.reasoning_gym import extract_final_answer
from rlvr.data.rows import LoadedRows, PreparedRow, RowFormat, load_rows
from rlvr.errors import DataError


def answers_match(predicted: str | None, reference: str) -> bool:
    """True if both parse as numbers and are equal (relative tolerance 1e-6), else if their
    normalised texts (:func:`rlvr.answers.normalize_text`) are equal and non-empty."""
    if predicted is None:
        return False
    p, a = parse_number(predicted), parse_number(reference)
    if p is not None and a is not None:
        return math.isclose(p, a, rel_tol=1e-6, abs_tol=1e-9)
    return normalize_text(predicted) == normalize_text(reference) != ""


class FileTask:
    """Prompt/answer rows of a data source, with a deterministic train/held-out split.

    Held-out rows: those whose ``split_column`` value is "test", "eval" or "validation" (case
    insensitive), or the rows of the dataset's ``eval_split``; without either, a seeded
    ``eval_fraction`` of the rows. ``eval_problems()`` returns the held-out rows in table order,
    the first ``n_eval`` of them when ``n_eval`` is set (the rest stay out of training too).
    ``train_problem(i)`` takes position ``i % n_train`` of the permutation
    ``default_rng((seed, i // n_train))`` of the training rows, so it is a pure function of
    (seed, i). Problem ids are "file-train-<row>" / "file-eval-<row>" with the row's 0-based
    index in its table. With ``category_column`` and ``category``, only the rows whose value in
    that column is ``category`` (compared as text) belong to the task, held-out split included.

    ``duplicates`` lists this task's rows dropped as duplicates of another row's prompt;
    ``long_prompts_dropped`` counts rows left out by :func:`rlvr.data.checks.limit_prompt_length`.
    """

    name = "file"

    def __init__(
        self,
        path: str,
        prompt_column: str = "prompt",
        answer_column: str | None = "answer",
        split_column: str | None = None,
        eval_fraction: float = 0.1,
        n_eval: int | None = None,
        seed: int = 0,
        prompt_template: str = FILE_PROMPT_TEMPLATE,
        category_column: str | None = None,
        category: str | None = None,
        split: str = "train",
        eval_split: str | None = None,
        subset: str | None = None,
        answer_pattern: str | None = None,
        completion_column: str | None = None,
        chosen_column: str | None = None,
        rejected_column: str | None = None,
    ) -> None:
        if (category_column is None) != (category is None):
            raise ValueError("category_column and category go together")
        loaded = load_source(
            path,
            category_column,
            prompt_column=prompt_column,
            answer_column=answer_column,
            split_column=split_column,
            prompt_template=prompt_template,
            answer_pattern=answer_pattern,
            split=split,
            eval_split=eval_split,
            subset=subset,
            completion_column=completion_column,
            chosen_column=chosen_column,
            rejected_column=rejected_column,
        )
        self._setup(loaded, category, eval_fraction, n_eval, seed)

    @classmethod
    def from_rows(
        cls,
        loaded: LoadedRows,
        category: str | None = None,
        eval_fraction: float = 0.1,
        n_eval: int | None = None,
        seed: int = 0,
    ) -> FileTask:
        """The task of already loaded rows (of one ``category`` of them when given)."""
        task = cls.__new__(cls)
        task._setup(loaded, category, eval_fraction, n_eval, seed)
        return task

    def _setup(
        self,
        loaded: LoadedRows,
        category: str | None,
        eval_fraction: float,
        n_eval: int | None,
        seed: int,
    ) -> None:
        """Select this task's rows and split them (see the class docstring)."""
        if not 0.0 <= eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
        if n_eval is not None and n_eval < 0:
            raise ValueError(f"n_eval must be >= 0, got {n_eval}")
        mine = [row for row in loaded.rows if category is None or row.category == category]
        where = "" if category is None else f" ({loaded.category_column} = {category!r})"
        if not mine:
            raise DataError(
                f"no row of {loaded.source} has {loaded.category_column!r} = {category!r}"
            )
        if loaded.marked:
            held = [row for row in mine if row.held_out]
        else:
            order = np.random.default_rng(seed).permutation(len(mine))
            drawn = set(order[: round(eval_fraction * len(mine))].tolist())
            held = [row for i, row in enumerate(mine) if i in drawn]
        held_ids = {id(row) for row in held}
        self._train_rows = [row for row in mine if id(row) not in held_ids]
        if not self._train_rows:
            raise DataError(
                f"no training rows left in {loaded.source}{where} after the held-out split"
            )
        self._eval_rows = held[:n_eval]
        self.eval_rows_unused = len(held) - len(self._eval_rows)  # held out past n_eval
        self.source = loaded.source
        self.seed = seed
        self.duplicates = [
            d for d in loaded.duplicates if category is None or d.category == category
        ]
        self.long_prompts_dropped = 0
        self._perm_epoch = -1
        self._perm = np.empty(0, dtype=np.int64)

    @staticmethod
    def _problem(split: str, row: PreparedRow) -> Problem:
        """The Problem of a row."""
        return Problem(
            f"file-{split}-{row.index}",
            row.prompt,
            row.answer,
            chat=row.chat,
            demonstrations=row.demonstrations,
        )

    def train_problem(self, index: int) -> Problem:
        """The training problem at sampler position ``index`` (epoch ``index // n_train``)."""
        if index < 0:
            raise ValueError(f"index must be >= 0, got {index}")
        epoch, position = divmod(index, len(self._train_rows))
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng((self.seed, epoch)).permutation(
                len(self._train_rows)
            )
            self._perm_epoch = epoch
        return self._problem("train", self._train_rows[int(self._perm[position])])

    def eval_problems(self) -> list[Problem]:
        """The held-out problems, in table order."""
        return [self._problem("eval", row) for row in self._eval_rows]

    @property
    def n_train(self) -> int:
        """Number of training rows."""
        return len(self._train_rows)

    @property
    def n_eval(self) -> int:
        """Number of held-out problems."""
        return len(self._eval_rows)

    def rows(self) -> list[tuple[PreparedRow, Problem]]:
        """Every training row, then every held-out row, each once with its Problem."""
        return [(row, self._problem("train", row)) for row in self._train_rows] + [
            (row, self._problem("eval", row)) for row in self._eval_rows
        ]

    def without(self, rows: Collection[PreparedRow], reason: str) -> FileTask:
        """A copy without ``rows`` (counted in ``long_prompts_dropped``); DataError naming
        ``reason`` if no training row is left."""
        drop = {id(row) for row in rows}
        task = copy.copy(self)
        task._train_rows = [row for row in self._train_rows if id(row) not in drop]
        task._eval_rows = [row for row in self._eval_rows if id(row) not in drop]
        if not task._train_rows:
            raise DataError(f"no training rows of {self.source} are left: every one {reason}")
        task.long_prompts_dropped = self.long_prompts_dropped + len(drop)
        task._perm_epoch = -1
        return task

    def extract_answer(self, completion: str, problem: Problem) -> str | None:
        """The final answer ``score`` reads: a number for a numeric reference, else the final
        answer line (see the module docstring)."""
        if parse_number(problem.answer) is not None:
            return extract_answer(completion)
        return extract_final_answer(completion)

    def score(self, completion: str, problem: Problem) -> float:
        """1.0 if the completion's final answer matches ``problem.answer``
        (:func:`answers_match`), else 0.0."""
        return (
            1.0 if answers_match(self.extract_answer(completion, problem), problem.answer) else 0.0
        )


def load_source(
    path: str,
    category_column: str | None = None,
    *,
    prompt_column: str = "prompt",
    answer_column: str | None = "answer",
    split_column: str | None = None,
    prompt_template: str = FILE_PROMPT_TEMPLATE,
    answer_pattern: str | None = None,
    split: str = "train",
    eval_split: str | None = None,
    subset: str | None = None,
    completion_column: str | None = None,
    chosen_column: str | None = None,
    rejected_column: str | None = None,
) -> LoadedRows:
    """The checked, de-duplicated rows of a file or dataset (the arguments are FileTask's)."""
    fmt = RowFormat(
        prompt_column=prompt_column,
        answer_column=answer_column,
        prompt_template=prompt_template,
        answer_pattern=answer_pattern,
        split_column=split_column,
        category_column=category_column,
        completion_column=completion_column,
        chosen_column=chosen_column,
        rejected_column=rejected_column,
    )
    return load_rows(path, fmt, split, eval_split, subset)


def file_mixture(
    path: str,
    category_column: str,
    eval_fraction: float = 0.1,
    n_eval: int | None = None,
    seed: int = 0,
    **source: Any,
) -> MixtureTask:
    """One :class:`FileTask` per distinct value of ``category_column`` (in order of first
    appearance), mixed as categories named by the values. The source is read and de-duplicated
    once (``source``: the keyword arguments of :func:`load_source`); each category gets its own
    held-out split (``eval_fraction`` of its rows, or its rows marked by ``split_column`` /
    ``eval_split``)."""
    loaded = load_source(path, category_column, **source)
    categories = list(dict.fromkeys(row.category for row in loaded.rows))
    tasks = [FileTask.from_rows(loaded, c, eval_fraction, n_eval, seed) for c in categories]
    return MixtureTask(tasks, categories, name="file")
