"""Problems from a local .jsonl / .json / .parquet / .csv file (loaded with ``datasets``).

Each row gives a prompt and a reference answer (column names are configurable). The held-out
split is either named by a split column or drawn with a seeded permutation; training problems
walk a fresh seeded permutation of the training rows every epoch.
"""

from __future__ import annotations

import os

import datasets
import numpy as np

from rlvr.data.base import Problem
from rlvr.rewards.verifiers import numeric_reward

_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
_HELD_OUT_SPLITS = frozenset({"test", "eval", "validation"})


def _load_rows(path: str, columns: list[str]) -> dict[str, list]:
    """Load ``path`` with ``datasets`` and return the requested columns as Python lists.

    Raises ValueError for a missing file, an unsupported extension, an empty file or a missing
    column (listing the available ones).
    """
    if not os.path.isfile(path):
        raise ValueError(f"data file not found: {path}")
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
    ) -> None:
        if not 0.0 <= eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
        if n_eval is not None and n_eval < 0:
            raise ValueError(f"n_eval must be >= 0, got {n_eval}")
        columns = [prompt_column, answer_column] + ([split_column] if split_column else [])
        rows = _load_rows(path, columns)
        self.path = path
        self.seed = seed
        self.prompt_template = prompt_template
        self._prompts = _check_text(rows[prompt_column], prompt_column)
        self._answers = _check_text(rows[answer_column], answer_column)
        n = len(self._prompts)
        if split_column:
            held = {
                i
                for i, v in enumerate(rows[split_column])
                if str(v).strip().lower() in _HELD_OUT_SPLITS
            }
        else:
            n_held = round(eval_fraction * n)
            held = {int(i) for i in np.random.default_rng(seed).permutation(n)[:n_held]}
        self._train_rows = [i for i in range(n) if i not in held]
        if not self._train_rows:
            raise ValueError(f"no training rows left in {path} after the held-out split")
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
