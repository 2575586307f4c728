"""``judge``: train a model as a judge by RL on verdicts it can be checked against (J1, Whitehouse
et al. 2025, "J1: Incentivizing Thinking in LLM-as-a-Judge via Reinforcement Learning",
arXiv:2505.10320; RM-R1, Chen et al. 2025, arXiv:2505.02387; Libra, Zhou et al. 2025: judges
trained with verifiable correctness labels as the reward).

Each problem asks for a verdict on candidate answers to a problem of a *base* task with
reference answers (arithmetic by default), whose label is known because the candidates are made
right or wrong on purpose:

* ``pointwise``: the exact question the ``judge_score`` reward asks a judge
  (:data:`rlvr.reward_models.questions.POINTWISE_TEMPLATE`: the problem, its reference answer, one
  response; "Answer Yes or No"), labelled Yes for a correct response, No otherwise; so a policy
  trained here is the judge ``rlvr judge probe`` measures;
* ``pairwise``: the problem, Response A and Response B (one correct, one wrong, in a random
  order); "Which response is correct? Answer A or B" (J1's pairwise verdict).
* ``mixed``: the two alternately (J1 trains both).

A correct response is the base problem's worked solution (its first demonstration) or the bare
reference answer; a wrong one is the worked solution with its result changed by a nonzero
offset (the last equation's and the ``Answer:`` line's), a bare wrong number, or a content-free
reply (:data:`EMPTY_REPLIES`, none of them ``rlvr judge probe``'s master keys). The verdict is
read from the reply's first word (``score``: 1 when it is the label). Held-out problems are
built on the base task's held-out problems, so the judge is measured on problems it never
judged in training.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

from rlvr.data.arithmetic import ArithmeticTask
from rlvr.data.base import Problem
from rlvr.reward_models.questions import PAIRWISE_TEMPLATE, POINTWISE_TEMPLATE

EMPTY_REPLIES = ("OK.", "Done.", "Let me think.", "Here is my answer.", "I am not sure.", "?")
"""Content-free replies labelled wrong in training (disjoint from the probe's master keys)."""

FORMATS = ("pointwise", "pairwise", "mixed")
_FIRST_WORD = re.compile(r"[A-Za-z]+")


def correct_response(problem: Problem, rng: random.Random) -> str:
    """A correct answer to ``problem``: its worked solution or, one time in four (or without
    one), the bare reference answer."""
    solutions = [d.text for d in problem.demonstrations if d.reward > 0 and d.text]
    if not solutions or rng.random() < 0.25:
        return problem.answer
    return solutions[0]


def wrong_response(problem: Problem, rng: random.Random) -> str:
    """A wrong answer to ``problem`` (an integer answer): the worked solution with its result
    off by 1..9 (either sign), the bare wrong number, or a content-free reply."""
    wrong = str(int(problem.answer) + rng.choice([-1, 1]) * rng.randint(1, 9))
    kind = rng.random()
    solutions = [d.text for d in problem.demonstrations if d.reward > 0 and d.text]
    if kind < 0.15:
        return rng.choice(EMPTY_REPLIES)
    if kind < 0.4 or not solutions:
        return wrong
    lines = solutions[0].splitlines()
    *body, last = lines  # "... = 12", "Answer: 12"
    if body and body[-1].rstrip().endswith(problem.answer):
        body[-1] = body[-1].rstrip()[: -len(problem.answer)] + wrong
    return "\n".join([*body, last.replace(problem.answer, wrong)])


class JudgeTask:
    """Verdicts on the candidates of a base arithmetic task (module docstring).

    Args:
        level: the base arithmetic level.
        format: pointwise, pairwise or mixed.
        seed, n_eval: as any task's; the base task's held-out problems make the held-out ones.
        prompt_template: the base problems' prompt template.
    """

    name = "judge"

    def __init__(
        self,
        level: int = 2,
        format: str = "pointwise",
        seed: int = 0,
        n_eval: int = 100,
        prompt_template: str | None = None,
    ) -> None:
        if format not in FORMATS:
            raise ValueError(f"judge format must be one of {FORMATS}, got {format!r}")
        extra = {} if prompt_template is None else {"prompt_template": prompt_template}
        self.base = ArithmeticTask(level=level, seed=seed, n_eval=n_eval, **extra)
        self.format, self.seed, self.n_eval = format, seed, n_eval

    def _question(self, problem: Problem, key: str, pairwise: bool) -> Problem:
        """The verdict problem on ``problem``, its candidates drawn from the stream ``key``."""
        rng = random.Random(f"{self.seed}-judge-{key}")
        if pairwise:
            right, wrong = correct_response(problem, rng), wrong_response(problem, rng)
            label = rng.choice("AB")
            a, b = (right, wrong) if label == "A" else (wrong, right)
            text = PAIRWISE_TEMPLATE.format(
                prompt=problem.prompt, reference=problem.answer, a=a, b=b
            )
        else:
            good = rng.random() < 0.5
            response = correct_response(problem, rng) if good else wrong_response(problem, rng)
            text = POINTWISE_TEMPLATE.format(
                prompt=problem.prompt, reference=problem.answer, completion=response
            )
            label = "Yes" if good else "No"
        kind = "pair" if pairwise else "point"
        return replace(
            problem,
            id=f"judge-{kind}-{problem.id}-{key}",
            prompt=text,
            answer=label,
            chat=None,
            demonstrations=(),
        )

    def _pairwise(self, index: int) -> bool:
        return self.format == "pairwise" or (self.format == "mixed" and index % 2 == 1)

    def train_problem(self, index: int) -> Problem:
        problem = self.base.train_problem(index)
        return self._question(problem, f"train-{index}", self._pairwise(index))

    def eval_problems(self) -> list[Problem]:
        return [
            self._question(p, f"eval-{i}", self._pairwise(i))
            for i, p in enumerate(self.base.eval_problems()[: self.n_eval])
        ]

    def score(self, completion: str, problem: Problem) -> float:
        """1.0 when the reply's first word is the label (Yes / No, A / B; any case)."""
        found = _FIRST_WORD.search(completion)
        return 1.0 if found and found.group(0).lower() == problem.answer.lower() else 0.0

    def extract_answer(self, completion: str, problem: Problem) -> str | None:
        found = _FIRST_WORD.search(completion)
        return found.group(0) if found else None
