"""Countdown: combine the given numbers with + - * / and parentheses to reach a target.

The task of TinyZero (Pan et al., 2025, https://github.com/Jiayi-Pan/TinyZero), taken from
"Stream of Search" (Gandhi et al., 2024): given 3 or 4 numbers and a target, write an arithmetic
expression that uses **each given number exactly once** (as TinyZero does) and equals the target.
The reward checks the expression itself, so any correct solution scores 1.0.

Instances are solvable by construction: draw distinct numbers, combine them (shuffled) with a
random binary expression tree over + - * /, and keep the instance when the exact value
(``fractions.Fraction``; intermediate fractions are fine) is an integer in the level's target
range. The numbers are shown sorted, so an instance's canonical form is
``"3,7,25,50->122"``; it is held out iff ``sha256(canonical) mod 100 < held_out_percent`` (10),
as in :mod:`rlvr.data.arithmetic`, so training never sees an eval instance (whatever its
construction, and at any level, since the hash ignores the level).

Levels:
    1. 3 numbers in 1..20, target in 1..100.
    2. 4 numbers in 1..50, target in 1..100.
    3. 4 numbers in 1..100, target in 101..1000.

The verifier never executes model text: the expression is whitelisted character by character,
parsed with :func:`ast.parse` and walked node by node (integers, binary + - * /, unary minus,
parentheses; anything else scores 0.0), then evaluated exactly with ``Fraction``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

from rlvr.data.base import Problem

COUNTDOWN_PROMPT_TEMPLATE = (
    "{question}\nThink step by step if needed, then give the final expression on the last line "
    "as 'Answer: <expression>'."
)

# A tree is a leaf number or (op, left, right).
Tree = int | tuple[str, "Tree", "Tree"]

_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
_OPS = ("+", "-", "*", "/")
_AST_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
# eval_problems() gives up after this many consecutive draws that add no new held-out instance.
_EVAL_PATIENCE = 10_000
# Longest expression text the verifier parses (a 4-number solution needs a few dozen chars).
_MAX_EXPRESSION_CHARS = 300

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_MARKER = re.compile(r"\banswer\s*\**\s*(?::|is\b:?)", re.IGNORECASE)
_EXPRESSION_LINE = re.compile(r"[\d\s+\-*/()=]*\d[\d\s+\-*/()=]*")
_ALLOWED_CHARS = re.compile(r"[\d\s+\-*/()]+")
_SYMBOLS = {
    "\\boxed": "",
    "\\times": "*",
    "\\cdot": "*",
    "\\div": "/",
    "×": "*",
    "·": "*",
    "÷": "/",
    "−": "-",
    "–": "-",
    "\\left": "",
    "\\right": "",
}


@dataclass(frozen=True)
class CountdownLevel:
    """How a level draws instances: ``n_numbers`` distinct numbers in ``lo..hi`` and a target
    in ``target_lo..target_hi``."""

    n_numbers: int
    lo: int
    hi: int
    target_lo: int
    target_hi: int


LEVELS: dict[int, CountdownLevel] = {
    1: CountdownLevel(3, 1, 20, 1, 100),
    2: CountdownLevel(4, 1, 50, 1, 100),
    3: CountdownLevel(4, 1, 100, 101, 1000),
}


@dataclass(frozen=True)
class CountdownInstance:
    """One puzzle: the numbers (sorted), the target and one expression that solves it."""

    numbers: tuple[int, ...]
    target: int
    solution: str

    @property
    def canonical(self) -> str:
        """The text the held-out hash is taken of, e.g. "3,7,25,50->122"."""
        return f"{','.join(map(str, self.numbers))}->{self.target}"


# ----------------------------------------------------------------------------- generation


def _tree_value(tree: Tree) -> Fraction | None:
    """Exact value of a tree, or None when it divides by zero."""
    if isinstance(tree, int):
        return Fraction(tree)
    op, left, right = tree
    a, b = _tree_value(left), _tree_value(right)
    if a is None or b is None:
        return None
    if op == "/":
        return None if b == 0 else a / b
    return a + b if op == "+" else a - b if op == "-" else a * b


def _render(tree: Tree) -> str:
    """Text of a tree with the fewest parentheses Python's precedence needs, e.g. "(7 - 3) * 25".

    A child is parenthesised when it binds looser than its parent, or when it is on the right of
    a - or / and binds equally (``a - (b + c)``, ``a / (b * c)``).
    """
    if isinstance(tree, int):
        return str(tree)
    op, left, right = tree
    left_s, right_s = _render(left), _render(right)
    if not isinstance(left, int) and _PRECEDENCE[left[0]] < _PRECEDENCE[op]:
        left_s = f"({left_s})"
    if not isinstance(right, int) and (
        _PRECEDENCE[right[0]] < _PRECEDENCE[op]
        or (op in "-/" and _PRECEDENCE[right[0]] == _PRECEDENCE[op])
    ):
        right_s = f"({right_s})"
    return f"{left_s} {op} {right_s}"


def _random_tree(rng: random.Random, leaves: list[int]) -> Tree:
    """A random binary tree over ``leaves`` (in this order) with random + - * / operators."""
    if len(leaves) == 1:
        return leaves[0]
    k = rng.randint(1, len(leaves) - 1)
    op = rng.choice(_OPS)
    return (op, _random_tree(rng, leaves[:k]), _random_tree(rng, leaves[k:]))


def draw_instance(rng: random.Random, level: CountdownLevel) -> CountdownInstance:
    """A solvable instance: random distinct numbers combined by a random tree whose exact value
    is an integer in the level's target range (re-drawn until one is)."""
    while True:
        numbers = rng.sample(range(level.lo, level.hi + 1), level.n_numbers)
        tree = _random_tree(rng, numbers)
        value = _tree_value(tree)
        if (
            value is not None
            and value.denominator == 1
            and level.target_lo <= value <= level.target_hi
        ):
            return CountdownInstance(tuple(sorted(numbers)), int(value), _render(tree))


def is_held_out(canonical: str, percent: int = 10) -> bool:
    """True if the canonical instance string belongs to the eval split (stable sha256 hash)."""
    return int(hashlib.sha256(canonical.encode()).hexdigest(), 16) % 100 < percent


# ----------------------------------------------------------------------------- verification


def _normalise(text: str) -> str:
    """Strip markdown/LaTeX wrapping and map ×, ÷, \\times, ... to ASCII operators."""
    for symbol, ascii_op in _SYMBOLS.items():
        text = text.replace(symbol, ascii_op)
    text = text.replace("\\(", "").replace("\\)", "").replace("\\[", "").replace("\\]", "")
    text = text.replace("{", "(").replace("}", ")")
    previous = None
    while text != previous:
        previous, text = text, text.strip().strip("*`$").rstrip(".")
    return text


def tagged_or_marked_answer(completion: str) -> str | None:
    """The non-empty content of the last ``<answer>...</answer>``, else the rest of the first
    non-empty line after the last "Answer:" / "answer is"; None if neither is there."""
    tags = [m.group(1).strip() for m in _ANSWER_TAG.finditer(completion)]
    tags = [t for t in tags if t]
    if tags:
        return tags[-1]
    markers = list(_MARKER.finditer(completion))
    if markers:
        rest = completion[markers[-1].end() :].strip()
        line = rest.split("\n", 1)[0].strip()
        if line:
            return line
    return None


def extract_expression(completion: str) -> str | None:
    """The expression a completion gives as its answer, normalised, or None.

    Priority: the last ``<answer>...</answer>`` (TinyZero's format); else the line after the last
    "Answer:"; else the last line that holds only an arithmetic expression.
    """
    found = tagged_or_marked_answer(completion)
    if found is not None:
        return _normalise(found) or None
    for line in reversed(completion.splitlines()):
        line = _normalise(line)
        if _EXPRESSION_LINE.fullmatch(line) and any(op in line for op in "+-*/"):
            return line
    return None


def _collect(node: ast.AST, leaves: list[int]) -> None:
    """Append the integer leaves of an allowed expression node to ``leaves``; raise ValueError on
    any node other than an int literal, binary + - * / or unary minus."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        leaves.append(node.value)
    elif isinstance(node, ast.BinOp) and type(node.op) in _AST_OPS:
        _collect(node.left, leaves)
        _collect(node.right, leaves)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _collect(node.operand, leaves)
    else:
        raise ValueError(f"disallowed syntax: {type(node).__name__}")


def _value(node: ast.AST) -> Fraction:
    """Exact value of a node already checked by :func:`_collect`; ZeroDivisionError on a / 0."""
    if isinstance(node, ast.Constant):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp):
        return -_value(node.operand)
    a, b = _value(node.left), _value(node.right)
    op = _AST_OPS[type(node.op)]
    if op == "/":
        return a / b
    return a + b if op == "+" else a - b if op == "-" else a * b


def parse_expression(expression: str) -> tuple[Fraction, list[int]] | None:
    """``(exact value, integer literals used)`` of an arithmetic expression, or None when it is
    not one: only digits, spaces, + - * / and parentheses are accepted, and the :mod:`ast` tree
    may hold only int literals, binary + - * / and unary minus (so ``2**10``, names, calls,
    floats and ``//`` are rejected). Nothing is executed. Division by zero gives None."""
    if len(expression) > _MAX_EXPRESSION_CHARS or not _ALLOWED_CHARS.fullmatch(expression):
        return None
    try:
        tree = ast.parse(expression.strip(), mode="eval")
        leaves: list[int] = []
        _collect(tree.body, leaves)
        return _value(tree.body), leaves
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError, MemoryError):
        return None


def check_expression(expression: str, numbers: list[int] | tuple[int, ...], target: int) -> bool:
    """True if ``expression`` uses exactly the given ``numbers`` (as a multiset: each once) and
    equals ``target`` exactly. A trailing ``= <target>`` is allowed (``"(7 - 3) * 25 = 100"``)."""
    left, *rights = expression.split("=")
    for right in rights:
        if right.strip() != str(target):
            return False
    parsed = parse_expression(left)
    if parsed is None:
        return False
    value, leaves = parsed
    return Counter(leaves) == Counter(numbers) and value == target


def countdown_reward(completion: str, numbers: list[int] | tuple[int, ...], target: int) -> float:
    """1.0 if the completion's final expression solves the instance, else 0.0."""
    expression = extract_expression(completion)
    return 1.0 if expression is not None and check_expression(expression, numbers, target) else 0.0


def encode_answer(instance: CountdownInstance) -> str:
    """The ``Problem.answer`` of an instance: JSON with numbers, target and a reference solution,
    e.g. ``{"numbers": [3, 7, 25, 50], "target": 122, "solution": "..."}``."""
    return json.dumps(
        {
            "numbers": list(instance.numbers),
            "target": instance.target,
            "solution": instance.solution,
        }
    )


def decode_answer(answer: str) -> tuple[list[int], int]:
    """``(numbers, target)`` from a ``Problem.answer`` written by :func:`encode_answer`."""
    try:
        data = json.loads(answer)
        numbers, target = [int(n) for n in data["numbers"]], int(data["target"])
    except (ValueError, TypeError, KeyError) as err:
        raise ValueError(
            f'countdown answer must be JSON like {{"numbers": [3, 7, 25], "target": 46}}, '
            f"got {answer!r}"
        ) from err
    return numbers, target


# ----------------------------------------------------------------------------- task


class CountdownTask:
    """Countdown puzzles of a given ``level`` (1..3), deterministic by seed.

    ``train_problem(i)`` draws from ``random.Random(f"{seed}-countdown-L{level}-train-{i}")``,
    re-drawing held-out instances, so it is a pure function of (seed, level, i).
    ``eval_problems()`` keeps the first ``n_eval`` distinct held-out instances of its own
    seed-derived stream. The prompt is ``prompt_template.format(question=..., numbers=...,
    target=...)``; ``Problem.answer`` is the JSON of :func:`encode_answer`.
    """

    name = "countdown"

    def __init__(
        self,
        level: int = 2,
        seed: int = 0,
        n_eval: int = 200,
        prompt_template: str = COUNTDOWN_PROMPT_TEMPLATE,
        held_out_percent: int = 10,
    ) -> None:
        if level not in LEVELS:
            raise ValueError(f"countdown level must be one of {sorted(LEVELS)}, got {level}")
        if n_eval < 0:
            raise ValueError(f"n_eval must be >= 0, got {n_eval}")
        if not 0 < held_out_percent < 100:
            raise ValueError(f"held_out_percent must be in 1..99, got {held_out_percent}")
        self.level = level
        self.seed = seed
        self.n_eval = n_eval
        self.prompt_template = prompt_template
        self.held_out_percent = held_out_percent
        self._eval = self._make_eval()

    def _problem(self, id_: str, instance: CountdownInstance) -> Problem:
        """The Problem for an instance, with the prompt built from the template."""
        numbers = list(instance.numbers)
        question = (
            f"Using the numbers {numbers}, create an expression that equals {instance.target}. "
            "You can use + - * / and parentheses; use each number exactly once."
        )
        prompt = self.prompt_template.format(
            question=question, numbers=numbers, target=instance.target
        )
        return Problem(id_, prompt, encode_answer(instance))

    def _make_eval(self) -> list[Problem]:
        """The first ``n_eval`` distinct held-out instances of the eval stream, as Problems."""
        rng = random.Random(f"{self.seed}-countdown-L{self.level}-eval")
        seen: dict[str, CountdownInstance] = {}
        misses = 0
        while len(seen) < self.n_eval and misses < _EVAL_PATIENCE:
            instance = draw_instance(rng, LEVELS[self.level])
            key = instance.canonical
            if key in seen or not is_held_out(key, self.held_out_percent):
                misses += 1
                continue
            seen[key] = instance
            misses = 0
        return [
            self._problem(f"countdown-L{self.level}-eval-{i}", inst)
            for i, inst in enumerate(seen.values())
        ]

    def train_problem(self, index: int) -> Problem:
        """The training problem at sampler position ``index`` (never a held-out instance)."""
        if index < 0:
            raise ValueError(f"index must be >= 0, got {index}")
        rng = random.Random(f"{self.seed}-countdown-L{self.level}-train-{index}")
        instance = draw_instance(rng, LEVELS[self.level])
        while is_held_out(instance.canonical, self.held_out_percent):
            instance = draw_instance(rng, LEVELS[self.level])
        return self._problem(f"countdown-L{self.level}-train-{index}", instance)

    def eval_problems(self) -> list[Problem]:
        """The held-out problems (a fresh list; the same problems on every call)."""
        return list(self._eval)

    def extract_answer(self, completion: str, problem: Problem) -> str | None:
        """The expression :meth:`score` checks (:func:`extract_expression`)."""
        return extract_expression(completion)

    def score(self, completion: str, problem: Problem) -> float:
        """1.0 if the completion's final expression uses each of the problem's numbers exactly
        once and equals its target, else 0.0."""
        numbers, target = decode_answer(problem.answer)
        return countdown_reward(completion, numbers, target)
