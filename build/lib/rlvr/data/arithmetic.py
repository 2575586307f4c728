"""Procedural integer arithmetic in eight difficulty levels, deterministic by seed.

Expressions are small trees (an ``int`` leaf or ``(op, left, right)``) rendered with the fewest
parentheses standard precedence allows; the rendered string is the expression's canonical form.
An expression is held out iff ``sha256(canonical) mod 100 < held_out_percent`` (30 at the two
small levels, so that their eval split has ~30 / ~90 problems; 10 above), so the train stream
(which re-draws held-out expressions) and the eval split never overlap, by construction.

Levels:
    1. ``a + b`` with a, b in 0..9 (100 expressions exist, ~30 held out).
    2. ``a + b``, ``a - b`` or ``a * b`` with a, b in 0..9 (300 expressions, ~90 held out).
    3. ``a + b`` or ``a - b`` with two-digit a, b (results may be negative).
    4. ``a * b`` with two-digit a and b in 2..9, or ``a + b`` with three-digit a, b.
    5. two operations among + - * on 1..20 without parentheses, e.g. ``3 + 4 * 7``.
    6. three or four operations on 1..12 with at least one pair of parentheses,
       e.g. ``(5 + 7) * 3 - 4``.
    7. ``a * b`` with three-digit a and two-digit b, e.g. ``347 * 28`` (for the ``calculator``
       environment: a small model rarely multiplies these in its head).
    8. ``a * b + c`` or ``a * b - c`` with three-digit a, c and two-digit b (two steps).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable

from rlvr.answers import numeric_reward
from rlvr.data.base import DEFAULT_PROMPT_TEMPLATE, Demonstration, Problem

Expr = int | tuple[str, "Expr", "Expr"]

_PRECEDENCE = {"+": 1, "-": 1, "*": 2}
_OPS = ("+", "-", "*")
# eval_problems() gives up after this many consecutive draws that add no new held-out expression.
_EVAL_PATIENCE = 10_000


def _evaluate(expr: Expr) -> int:
    """Exact integer value of an expression tree."""
    if isinstance(expr, int):
        return expr
    op, left, right = expr
    a, b = _evaluate(left), _evaluate(right)
    return a + b if op == "+" else a - b if op == "-" else a * b


def _render(expr: Expr) -> str:
    """Canonical text of an expression tree, e.g. "(5 + 7) * 3 - 4".

    A child is parenthesised when it binds looser than its parent, or when it is a + or - on the
    right of a - (``a - (b + c)``); other same-precedence right children need none, since + and *
    are associative.
    """
    if isinstance(expr, int):
        return str(expr)
    op, left, right = expr
    left_s, right_s = _render(left), _render(right)
    if not isinstance(left, int) and _PRECEDENCE[left[0]] < _PRECEDENCE[op]:
        left_s = f"({left_s})"
    if not isinstance(right, int) and (
        _PRECEDENCE[right[0]] < _PRECEDENCE[op] or (op == "-" and _PRECEDENCE[right[0]] == 1)
    ):
        right_s = f"({right_s})"
    return f"{left_s} {op} {right_s}"


def worked_solution(expr: Expr) -> str:
    """A step-by-step solution ending with the answer line the prompt asks for: one line per
    operation in evaluation order (children first), e.g. for ``(5 + 7) * 3 - 4``::

        5 + 7 = 12
        12 * 3 = 36
        36 - 4 = 32
        Answer: 32
    """
    steps: list[str] = []

    def value(node: Expr) -> int:
        if isinstance(node, int):
            return node
        op, left, right = node
        a, b = value(left), value(right)
        result = _evaluate((op, a, b))
        steps.append(f"{a} {op} {b} = {result}")
        return result

    answer = value(expr)  # fills steps
    return "\n".join([*steps, f"Answer: {answer}"])


def is_held_out(expression: str, percent: int = 10) -> bool:
    """True if the canonical expression string belongs to the eval split (stable sha256 hash):
    about ``percent`` % of all expressions are held out."""
    return int(hashlib.sha256(expression.encode()).hexdigest(), 16) % 100 < percent


def _random_tree(rng: random.Random, n_leaves: int, lo: int, hi: int) -> Expr:
    """A random binary tree with ``n_leaves`` leaves in lo..hi and random + - * operators."""
    if n_leaves == 1:
        return rng.randint(lo, hi)
    k = rng.randint(1, n_leaves - 1)
    op = rng.choice(_OPS)
    return (op, _random_tree(rng, k, lo, hi), _random_tree(rng, n_leaves - k, lo, hi))


def _level1(rng: random.Random) -> Expr:
    return ("+", rng.randint(0, 9), rng.randint(0, 9))


def _level2(rng: random.Random) -> Expr:
    return (rng.choice(_OPS), rng.randint(0, 9), rng.randint(0, 9))


def _level3(rng: random.Random) -> Expr:
    return (rng.choice(("+", "-")), rng.randint(10, 99), rng.randint(10, 99))


def _level4(rng: random.Random) -> Expr:
    if rng.random() < 0.5:
        return ("*", rng.randint(10, 99), rng.randint(2, 9))
    return ("+", rng.randint(100, 999), rng.randint(100, 999))


def _level5(rng: random.Random) -> Expr:
    while True:
        expr = _random_tree(rng, 3, 1, 20)
        if "(" not in _render(expr):
            return expr


def _level6(rng: random.Random) -> Expr:
    while True:
        expr = _random_tree(rng, rng.choice((4, 5)), 1, 12)
        if "(" in _render(expr):
            return expr


def _level7(rng: random.Random) -> Expr:
    return ("*", rng.randint(100, 999), rng.randint(11, 99))


def _level8(rng: random.Random) -> Expr:
    product = ("*", rng.randint(100, 999), rng.randint(11, 99))
    return (rng.choice(("+", "-")), product, rng.randint(100, 999))


_LEVELS: dict[int, Callable[[random.Random], Expr]] = {
    1: _level1,
    2: _level2,
    3: _level3,
    4: _level4,
    5: _level5,
    6: _level6,
    7: _level7,
    8: _level8,
}
# Percent of each level's expressions held out for evaluation.
HELD_OUT_PERCENT: dict[int, int] = {1: 30, 2: 30, 3: 10, 4: 10, 5: 10, 6: 10, 7: 10, 8: 10}


class ArithmeticTask:
    """Procedural arithmetic problems ("What is 23 + 48?") of a given ``level`` (1..8), each
    with a worked solution as its demonstration (:func:`worked_solution`: SFT, ``sft_coef``).

    ``train_problem(i)`` draws from ``random.Random(f"{seed}-L{level}-train-{i}")``, re-drawing
    held-out expressions, so it is a pure function of (seed, level, i). ``eval_problems()`` draws
    from its own seed-derived stream and keeps the first ``n_eval`` distinct held-out expressions;
    it returns fewer when the level's space runs out (it stops after ``_EVAL_PATIENCE``
    consecutive draws add nothing new): level 1 has only 100 expressions, of which about 30 are
    held out, level 2 about 90 of 300.
    """

    name = "arithmetic"

    def __init__(
        self,
        level: int = 2,
        seed: int = 0,
        n_eval: int = 200,
        prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
    ) -> None:
        if level not in _LEVELS:
            raise ValueError(f"arithmetic level must be one of {sorted(_LEVELS)}, got {level}")
        if n_eval < 0:
            raise ValueError(f"n_eval must be >= 0, got {n_eval}")
        self.level = level
        self.held_out_percent = HELD_OUT_PERCENT[level]
        self.seed = seed
        self.n_eval = n_eval
        self.prompt_template = prompt_template
        self._eval = self._make_eval()

    def _problem(self, id_: str, expr: Expr) -> Problem:
        """The Problem for an expression tree, with the prompt built from the template."""
        question = f"What is {_render(expr)}?"
        worked = Demonstration.of([{"role": "assistant", "content": worked_solution(expr)}])
        prompt = self.prompt_template.format(question=question)
        return Problem(id_, prompt, str(_evaluate(expr)), demonstrations=(worked,))

    def _make_eval(self) -> list[Problem]:
        """The first ``n_eval`` distinct held-out expressions of the eval stream, as Problems."""
        rng = random.Random(f"{self.seed}-L{self.level}-eval")
        seen: dict[str, Expr] = {}
        misses = 0
        while len(seen) < self.n_eval and misses < _EVAL_PATIENCE:
            expr = _LEVELS[self.level](rng)
            text = _render(expr)
            if text in seen or not is_held_out(text, self.held_out_percent):
                misses += 1
                continue
            seen[text] = expr
            misses = 0
        return [
            self._problem(f"arith-L{self.level}-eval-{i}", e) for i, e in enumerate(seen.values())
        ]

    def train_problem(self, index: int) -> Problem:
        """The training problem at sampler position ``index`` (never a held-out expression)."""
        if index < 0:
            raise ValueError(f"index must be >= 0, got {index}")
        rng = random.Random(f"{self.seed}-L{self.level}-train-{index}")
        expr = _LEVELS[self.level](rng)
        while is_held_out(_render(expr), self.held_out_percent):
            expr = _LEVELS[self.level](rng)
        return self._problem(f"arith-L{self.level}-train-{index}", expr)

    def eval_problems(self) -> list[Problem]:
        """The held-out problems (a fresh list; the same problems on every call)."""
        return list(self._eval)

    def score(self, completion: str, problem: Problem) -> float:
        """1.0 if the completion's final answer equals ``problem.answer`` numerically, else 0.0."""
        return numeric_reward(completion, problem.answer)
