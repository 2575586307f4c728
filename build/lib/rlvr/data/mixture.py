"""Several tasks as one, each a category: the arms of a distribution-level curriculum.

SEC (Chen et al. 2025, "Self-Evolving Curriculum for LLM Reasoning") and DUMP (Wang et al. 2025,
"DUMP: Automated Distribution-Level Curriculum Learning for RL-based LLM Post-training") schedule
training over categories of problems (difficulty levels, sources). :class:`MixtureTask` puts
several tasks behind the task protocol:

* category ``c``'s training problems are its own task's stream: ``category_problem(c, i)`` is
  ``tasks[c].train_problem(i)`` with ``Problem.category`` set;
* ``train_problem(i)`` takes the categories in turn (a uniform mixture for a sampler that just
  walks the stream);
* the held-out split interleaves the categories' held-out problems, so every prefix of it (the
  trainer evaluates the first ``eval.n_prompts``) is balanced across categories;
* ``score`` is the owning category's scorer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from rlvr.answers import extract_answer
from rlvr.data.base import Problem, Task


class MixtureTask:
    """``tasks[c]`` is category ``categories[c]`` (see the module docstring).

    ``MixtureTask([ArithmeticTask(level=l) for l in (1, 3, 5)], ["L1", "L3", "L5"])``.
    """

    def __init__(
        self, tasks: Sequence[Task], categories: Sequence[str], name: str | None = None
    ) -> None:
        if not tasks or len(tasks) != len(categories):
            raise ValueError(
                f"a mixture needs one category name per task, got {len(tasks)} tasks and "
                f"{len(categories)} names"
            )
        if len(set(categories)) != len(categories) or "" in categories:
            raise ValueError(f"category names must be distinct and non-empty, got {categories}")
        self.tasks = list(tasks)
        self.categories = tuple(categories)
        self.name = name or "+".join(dict.fromkeys(t.name for t in tasks))
        per_category = [
            [dataclasses.replace(p, category=c) for p in t.eval_problems()]
            for t, c in zip(self.tasks, self.categories, strict=True)
        ]
        longest = max(len(problems) for problems in per_category)
        self._eval = [
            problems[i] for i in range(longest) for problems in per_category if i < len(problems)
        ]
        self._eval_category = {p.id: p.category for p in self._eval}

    def category_problem(self, category: int, index: int) -> Problem:
        """The ``index``-th training problem of category ``category``."""
        if not 0 <= category < len(self.tasks):
            raise ValueError(f"category must be in 0..{len(self.tasks) - 1}, got {category}")
        problem = self.tasks[category].train_problem(index)
        return dataclasses.replace(problem, category=self.categories[category])

    def train_problem(self, index: int) -> Problem:
        """The categories in turn: category ``index % k``, its problem ``index // k``."""
        if index < 0:
            raise ValueError(f"index must be >= 0, got {index}")
        k = len(self.tasks)
        return self.category_problem(index % k, index // k)

    def eval_problems(self) -> list[Problem]:
        """The categories' held-out problems interleaved (a fresh list, the same every call)."""
        return list(self._eval)

    def _task_of(self, problem: Problem) -> Task:
        """The task of ``problem``'s own category; a problem without a category (one rebuilt from
        saved samples) is looked up among the held-out problems by id."""
        category = problem.category or self._eval_category.get(problem.id, "")
        if category not in self.categories:
            raise ValueError(
                f"problem {problem.id!r} has no category of this mixture "
                f"({', '.join(self.categories)})"
            )
        return self.tasks[self.categories.index(category)]

    def score(self, completion: str, problem: Problem) -> float:
        """The score of ``problem``'s own category's task."""
        return self._task_of(problem).score(completion, problem)

    def extract_answer(self, completion: str, problem: Problem) -> str | None:
        """The string the category's task scores (:func:`answer_extractor` of that task)."""
        return answer_extractor(self._task_of(problem))(completion, problem)


def answer_extractor(task: Task) -> Callable[[str, Problem], str | None]:
    """The extraction ``task.score`` reads: ``task.extract_answer(completion, problem)`` for a
    task that defines it (reasoning-gym, countdown, ...), else the numeric verifier's
    :func:`rlvr.answers.extract_answer` (what the arithmetic and file tasks score).
    The string it returns is shown as ``extracted_answer`` and votes in maj@k."""
    own = getattr(task, "extract_answer", None)
    if own is not None:
        return own
    return lambda completion, problem: extract_answer(completion)
