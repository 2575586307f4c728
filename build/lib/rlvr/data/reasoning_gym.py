"""Tasks from reasoning-gym's procedural datasets, scored by each dataset's own verifier.

reasoning-gym (Stojanovski et al., 2025, "Reasoning Gym: Reasoning Environments for
Reinforcement Learning with Verifiable Rewards", https://github.com/open-thought/reasoning-gym)
ships ~100 generators (``chain_sum``, ``basic_arithmetic``, ``countdown``, ``sudoku``, ...);
each item is a dict with ``question``, ``answer`` and ``metadata``, and each dataset scores an
answer string against an item with ``score_answer(answer, entry)`` (a float in [0, 1]; some
datasets give partial credit).

Task spec ``reasoning_gym:NAME``. Training items come from
``create_dataset(NAME, seed=seed, size=size)``, walked in a fresh seeded permutation of
``0..size-1`` every epoch; eval items from ``create_dataset(NAME, seed=seed + size, ...)``.
Disjointness: most generators seed item ``i`` with ``Random(seed + i)``, so these two seed
ranges never share a generator state; and, whatever the generator, the first ``n_eval`` distinct
eval questions are removed from training by question text (a training draw whose question is
held out moves on to the next position of the permutation).

Problem ids name the dataset index (``rg-chain_sum-train-17``, ``rg-chain_sum-eval-3``), so the
item a problem came from can always be regenerated for scoring (e.g. when an eval directory is
rescored); items are cached by id.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from rlvr.answers import boxed_spans
from rlvr.data.base import Problem
from rlvr.data.countdown import tagged_or_marked_answer

PREFIX = "reasoning_gym:"
RG_PROMPT_TEMPLATE = (
    "{question}\nThink step by step if needed, then give the final answer on the last line as "
    "'Answer: <answer>'."
)
_INSTALL_HINT = (
    "the reasoning_gym:* tasks need the reasoning-gym package: pip install reasoning-gym"
)


def _import_reasoning_gym() -> Any:
    """The ``reasoning_gym`` module, or ImportError with the install command."""
    try:
        import reasoning_gym
    except ImportError as err:
        raise ImportError(_INSTALL_HINT) from err
    return reasoning_gym


def available_datasets() -> list[str]:
    """Names of the datasets reasoning-gym registers (ImportError if it is not installed)."""
    return sorted(_import_reasoning_gym().factory.DATASETS)


_WRAPPERS = (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"), ("**", "**"), ("`", "`"))


def _last_boxed(text: str) -> tuple[int, int, str] | None:
    """``(start, end, content)`` of the last balanced ``\\boxed{...}`` in ``text``, or None."""
    return next(boxed_spans(text), None)


def _unwrap(text: str) -> str:
    """``text`` without surrounding whitespace, markdown (``**``, backticks), math delimiters
    (``$``, ``\\(``, ``\\[``), a ``\\boxed{...}`` around the whole of it and a trailing
    period, repeated until nothing changes."""
    previous = None
    while text != previous:
        previous, text = text, text.strip().strip("*`").strip()
        for left, right in _WRAPPERS:
            if (
                len(text) > len(left) + len(right)
                and text.startswith(left)
                and text.endswith(right)
            ):
                text = text[len(left) : -len(right)]
        boxed = _last_boxed(text)
        if boxed is not None and boxed[0] == 0 and boxed[1] == len(text):
            text = boxed[2]
        if text.endswith(".") and not text.endswith(".."):
            text = text[:-1]
    return text


def extract_final_answer(completion: str) -> str | None:
    """The final answer of a completion as text: exactly the string the task scores (with the
    dataset's ``score_answer``) and shows as ``extracted_answer``.

    Where: the content of the last ``<answer>`` tags, else the rest of the line after the last
    "Answer:" / "answer is", else the content of the last ``\\boxed{...}``, else the last
    non-empty line. Then surrounding markdown, ``$...$`` / ``\\(...\\)`` math delimiters, a
    ``\\boxed{}`` wrapper and a trailing period are removed. None for a completion with no
    text.
    """
    found = tagged_or_marked_answer(completion)
    if found is None:
        boxed = _last_boxed(completion)
        found = boxed[2] if boxed is not None else None
    if found is None:
        lines = [line for line in completion.splitlines() if line.strip()]
        if not lines:
            return None
        found = lines[-1]
    return _unwrap(found) or None


def _create(rg: Any, dataset: str, seed: int, size: int, kwargs: dict[str, Any]) -> Any:
    """``rg.create_dataset`` with its errors turned into ValueErrors naming what is accepted."""
    registry = rg.factory.DATASETS
    if dataset not in registry:
        raise ValueError(
            f"unknown reasoning-gym dataset {dataset!r}; available: {', '.join(sorted(registry))}"
        )
    fields = sorted(f.name for f in dataclasses.fields(registry[dataset][1]))
    unknown = sorted(set(kwargs) - set(fields))
    if unknown:
        raise ValueError(
            f"reasoning-gym dataset {dataset!r} has no option(s) {unknown}; "
            f"its options: {', '.join(f for f in fields if f not in ('seed', 'size'))}"
        )
    try:
        return rg.create_dataset(dataset, seed=seed, size=size, **kwargs)
    except (AssertionError, TypeError, ValueError) as err:
        raise ValueError(f"reasoning-gym dataset {dataset!r} rejected {kwargs}: {err}") from err


class ReasoningGymTask:
    """A reasoning-gym dataset as a task (see the module docstring for the splits).

    Args:
        name: the dataset, e.g. "chain_sum" (a "reasoning_gym:" prefix is accepted).
        seed: seed of the training dataset; the eval dataset uses ``seed + size``.
        n_eval: distinct held-out questions (fewer when the dataset's space is that small).
        size: training items, cycled through in a new seeded order every epoch.
        prompt_template: user message with ``{question}``.
        **dataset_kwargs: the dataset's own config, e.g. ``min_terms=2`` for chain_sum.
    """

    def __init__(
        self,
        name: str,
        seed: int = 0,
        n_eval: int = 200,
        size: int = 10_000,
        prompt_template: str = RG_PROMPT_TEMPLATE,
        **dataset_kwargs: Any,
    ) -> None:
        dataset = name.removeprefix(PREFIX)
        if n_eval < 0:
            raise ValueError(f"n_eval must be >= 0, got {n_eval}")
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        rg = _import_reasoning_gym()
        self.name = PREFIX + dataset
        self.dataset = dataset
        self.seed = seed
        self.n_eval = n_eval
        self.size = size
        self.prompt_template = prompt_template
        self.dataset_kwargs = dict(dataset_kwargs)
        self._train = _create(rg, dataset, seed, size, self.dataset_kwargs)
        eval_size = max(4 * n_eval, 64)
        self._eval_ds = _create(rg, dataset, seed + size, eval_size, self.dataset_kwargs)
        self._entries: dict[str, dict[str, Any]] = {}
        self._eval = self._make_eval(eval_size)
        self._held_out = {self._entries[p.id]["question"] for p in self._eval}
        self._perm_epoch = -1
        self._perm = np.empty(0, dtype=np.int64)

    def _item(self, split: str, index: int) -> tuple[str, dict[str, Any]]:
        """``(problem id, entry)`` of dataset item ``index`` of ``split`` ("train" or "eval")."""
        id_ = f"rg-{self.dataset}-{split}-{index}"
        if id_ not in self._entries:
            self._entries[id_] = self._source(split)[index]
        return id_, self._entries[id_]

    def _problem(self, id_: str, entry: dict[str, Any]) -> Problem:
        """The Problem of an item: the templated question and the reference answer."""
        prompt = self.prompt_template.format(question=entry["question"])
        return Problem(id_, prompt, str(entry["answer"]))

    def _make_eval(self, eval_size: int) -> list[Problem]:
        """The first ``n_eval`` items of the eval dataset with distinct questions."""
        problems: list[Problem] = []
        questions: set[str] = set()
        for index in range(eval_size):
            if len(problems) >= self.n_eval:
                break
            id_, entry = self._item("eval", index)
            if entry["question"] in questions:
                del self._entries[id_]
                continue
            questions.add(entry["question"])
            problems.append(self._problem(id_, entry))
        return problems

    def train_problem(self, index: int) -> Problem:
        """The training problem at sampler position ``index`` (never a held-out question)."""
        if index < 0:
            raise ValueError(f"index must be >= 0, got {index}")
        epoch, position = divmod(index, self.size)
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng((self.seed, epoch)).permutation(self.size)
            self._perm_epoch = epoch
        for step in range(self.size):
            id_, entry = self._item("train", int(self._perm[(position + step) % self.size]))
            if entry["question"] not in self._held_out:
                return self._problem(id_, entry)
        raise ValueError(
            f"every training item of {self.name} is among the held-out questions; "
            "lower n_eval or raise size"
        )

    def eval_problems(self) -> list[Problem]:
        """The held-out problems (a fresh list; the same problems on every call)."""
        return list(self._eval)

    def _source(self, split: str) -> Any:
        """The reasoning-gym dataset of a split ("train" or "eval")."""
        return self._train if split == "train" else self._eval_ds

    def _parse_id(self, problem: Problem) -> tuple[str, int]:
        """``(split, dataset index)`` from a problem id of this task; ValueError otherwise."""
        split, _, index = problem.id.removeprefix(f"rg-{self.dataset}-").partition("-")
        if (
            not problem.id.startswith(f"rg-{self.dataset}-")
            or split not in ("train", "eval")
            or not index.isdigit()
        ):
            raise ValueError(f"problem {problem.id!r} does not come from task {self.name}")
        return split, int(index)

    def entry(self, problem: Problem) -> dict[str, Any]:
        """The reasoning-gym item a problem of this task was made from (regenerated from its id
        when not cached)."""
        return self._item(*self._parse_id(problem))[1]

    def extract_answer(self, completion: str, problem: Problem) -> str | None:
        """The answer string :meth:`score` passes to the dataset's verifier
        (:func:`extract_final_answer`; the same for every problem of the task)."""
        return extract_final_answer(completion)

    def score(self, completion: str, problem: Problem) -> float:
        """The dataset's ``score_answer`` of :meth:`extract_answer`, clipped to [0, 1]; a scorer
        that raises on a malformed answer counts as 0.0."""
        split, index = self._parse_id(problem)
        entry = self._item(split, index)[1]
        answer = self.extract_answer(completion, problem)
        try:
            value = float(self._source(split).score_answer(answer=answer, entry=entry))
        except Exception:
            return 0.0
        return min(1.0, max(0.0, value)) if math.isfinite(value) else 0.0
