"""Problems from a local .jsonl / .json / .parquet / .csv file (loaded with ``datasets``).

Each row gives a prompt and a reference answer (column names are configurable). The held-out
split is either named by a split column or drawn with a seeded permutation; training problems
walk a fresh seeded permutation of the training rows every epoch. A category column (a source,
a difficulty) splits the file into one task per value, mixed by :func:`file_mixture` for the
category curricula (:mod:`rlvr.curriculum`).
"""

from __future__ import annotations

import functools
import os

import datasets
import numpy as np

from rlvr.data.base import Problem
from rlvr.data.mixture import MixtureTask
from rlvr.rewards.verifiers import numeric_reward

_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
_HELD_OUT_SPLITS = frozenset({"test", "eval", "validation"})


def _load_rows(path: str, columns: list[str]) -> dict[str, list]:
    """Load ``path`` with ``datasets`` and return the requested columns as Python lists (shared
    with other callers: do not modify them).

    Raises ValueError for a missing file, an unsupported extension, an empty file or a missing
    column (listing the available ones). The file is read once per (path, size, modification
    time, columns), so the per-category tasks of :func:`file_mixture` do not re-read it.
    """
    if not os.path.isfile(path):
        raise ValueError(f"data file not found: {path}")
    stat = os.stat(path)
    return _load_rows_cached(os.path.abspath(path), stat.st_size, stat.st_mtime_ns, tuple(columns))


@functools.lru_cache(maxsize=4)
def _load_rows_cached(
    path: str, size: int, mtime_ns: int, columns: tuple[str, ...]
) -> dict[str, list]:
    """:func:`_load_rows` for one version of a file (size and mtime are part of the key)."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in _BUILDERS:
        raise ValueError(
            f"unsupported file extension {ext!r} for {path}; accepted: {', '.join(_BUILDERS)}"
        )
    ds = datasets.load_dataset(_BUILDERS[ext], data_files=path, split="train")
    if len(ds) == 0:
        raise ValueError(f"data file has no rows: {path}")
    for column in columns:
        if column not in ds.column_names:
            raise ValueError(
                f"column {column!r} not found in {path}; available columns: {ds.column_names}"
            )
    return {column: list(ds[column]) for column in columns}


def _check_text(values: list, column: str) -> list[str]:
    """``str()`` of every value, raising ValueError naming the row index of an empty one."""
    texts = []
    for row, value in enumerate(values):
        text = "" if value is None else str(value).strip()
        if not text:
            raise ValueError(f"row {row} has an empty {column!r}")
        texts.append(text)
    return texts


class FileTask:
    """Prompt/answer pairs from a local file, with a deterministic train/held-out split.

    Held-out rows: those whose ``split_column`` value is "test", "eval" or "validation" (case
    insensitive) when a split column is given, else a seeded ``eval_fraction`` of the rows.
    ``eval_problems()`` returns the held-out rows in file order, the first ``n_eval`` of them
    when ``n_eval`` is set (the rest stay out of training too). ``train_problem(i)`` takes
    position ``i % n_train`` of the permutation ``default_rng((seed, i // n_train))`` of the
    training rows, so it is a pure function of (seed, i). Answers are kept as ``str(value)``;
    problem ids are "file-train-<row>" / "file-eval-<row>" with the row's index in the file.
    With ``category_column`` and ``category``, only the rows whose value in that column is
    ``category`` (compared as text) belong to the task, held-out split included.
    """

    name = "file"

    def __init__(
        self,
        path: str,
        prompt_column: str = "prompt",
        answer_column: str = "answer",
        split_column: str | None = None,
        eval_fraction: float = 0.1,
        n_eval: int | None = None,
        seed: int = 0,
        prompt_template: str = "{question}",
        category_column: str | None = None,
        category: str | None = None,
    ) -> None:
        if (category_column is None) != (category is None):
            raise ValueError("category_column and category go together")
        if not 0.0 <= eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
        if n_eval is not None and n_eval < 0:
            raise ValueError(f"n_eval must be >= 0, got {n_eval}")
        columns = [prompt_column, answer_column] + ([split_column] if split_column else [])
        rows = _load_rows(path, columns + ([category_column] if category_column else []))
        self.path = path
        self.seed = seed
        self.prompt_template = prompt_template
        self._prompts = _check_text(rows[prompt_column], prompt_column)
        self._answers = _check_text(rows[answer_column], answer_column)
        mine = list(range(len(self._prompts)))  # the rows of this task (its category's)
        if category_column:
            mine = [i for i, v in enumerate(rows[category_column]) if str(v).strip() == category]
            if not mine:
                raise ValueError(f"no row of {path} has {category_column!r} = {category!r}")
        if split_column:
            held = {
                i for i in mine if str(rows[split_column][i]).strip().lower() in _HELD_OUT_SPLITS
            }
        else:
            n_held = round(eval_fraction * len(mine))
            order = np.random.default_rng(seed).permutation(len(mine))[:n_held]
            held = {mine[int(i)] for i in order}
        self._train_rows = [i for i in mine if i not in held]
        if not self._train_rows:
            where = f" ({category_column} = {category!r})" if category_column else ""
            raise ValueError(f"no training rows left in {path}{where} after the held-out split")
        self._eval_rows = sorted(held)[:n_eval]
        self._perm_epoch = -1
        self._perm = np.empty(0, dtype=np.int64)

    def _problem(self, split: str, row: int) -> Problem:
        """The Problem for a row of the file."""
        prompt = self.prompt_template.format(question=self._prompts[row])
        return Problem(f"file-{split}-{row}", prompt, self._answers[row])

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
        """The held-out problems, in file order."""
        return [self._problem("eval", row) for row in self._eval_rows]

    def score(self, completion: str, problem: Problem) -> float:
        """1.0 if the completion's final answer equals ``problem.answer``, else 0.0."""
        return numeric_reward(completion, problem.answer)


def file_mixture(path: str, category_column: str, **kwargs: object) -> MixtureTask:
    """One :class:`FileTask` per distinct value of ``category_column`` (in order of first
    appearance), mixed as categories named by the values; ``kwargs`` go to every FileTask
    (each category gets its own held-out split: ``eval_fraction`` of its rows, or its rows
    marked by ``split_column``)."""
    values = _load_rows(path, [category_column])[category_column]
    categories = list(dict.fromkeys(_check_text(values, category_column)))
    tasks = [
        FileTask(path, category_column=category_column, category=c, **kwargs) for c in categories
    ]
    return MixtureTask(tasks, categories, name="file")
