"""Verifiable rewards on the final answer: symbolic math, numbers, strings, multiple choice.

Registered rewards (all binary, 1.0 or 0.0):

- ``math``: symbolic equivalence with the `math-verify` package (LaTeX, fractions, decimals,
  sets, intervals, ``\\boxed{}`` extraction), the verifier of DeepSeek-R1-style RLVR recipes;
- ``numeric``: the project's numeric verifier with configurable tolerances;
- ``exact_match``: normalised string equality (SQuAD-style normalisation);
- ``multiple_choice``: the chosen letter ("Answer: C", "(C)", "\\boxed{C}") equals the key.
"""

from __future__ import annotations

import functools
import logging
import re
import string
import threading
import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rlvr.rewards.registry import register_reward
from rlvr.rewards.verifiers import _last_boxed, numeric_match

if TYPE_CHECKING:
    from rlvr.data.base import Problem

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_ANSWER_LINE = re.compile(r"(?:final\s+answer|answer)\s*(?::|is\b:?)", re.IGNORECASE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT_TABLE = str.maketrans("", "", string.punctuation)


def answer_span(completion: str) -> str:
    """The part of a completion that states its final answer.

    Priority: the content of the last ``<answer>...</answer>``; the content of the last
    ``\\boxed{...}``; the rest of the line after the last "Answer:" / "The answer is"; else the
    whole completion. Surrounding whitespace is stripped.
    """
    tags = _ANSWER_TAG.findall(completion)
    if tags:
        return tags[-1].strip()
    boxed = _last_boxed(completion)
    if boxed is not None:
        return boxed
    markers = list(_ANSWER_LINE.finditer(completion))
    if markers:
        line = completion[markers[-1].end() :].strip().split("\n", 1)[0].strip()
        if line:
            return line
    return completion.strip()


def normalize_text(text: str) -> str:
    """SQuAD-style normalisation: NFKC, lower case, no punctuation, no articles (a/an/the),
    single spaces. ``\\text{...}`` wrappers and math dollars are dropped first."""
    text = unicodedata.normalize("NFKC", text)
    text = re.sub(r"\\text\{([^{}]*)\}", r"\1", text).replace("$", "")
    text = text.lower().translate(_PUNCT_TABLE)
    return " ".join(_ARTICLES.sub(" ", text).split())


@register_reward("exact_match")
def exact_match(
    completion: str,
    problem: Problem,
    answers: Sequence[str] | str | None = None,
    extract: bool = True,
) -> float:
    """1.0 if the normalised answer (:func:`answer_span` when ``extract``) equals the normalised
    reference ``problem.answer``, or any of ``answers`` when given; else 0.0."""
    refs = (
        [problem.answer] if answers is None else [answers] if isinstance(answers, str) else answers
    )
    candidate = normalize_text(answer_span(completion) if extract else completion)
    return 1.0 if candidate and candidate in {normalize_text(r) for r in refs} else 0.0


@register_reward("numeric")
def numeric(
    completion: str, problem: Problem, rel_tol: float = 1e-6, abs_tol: float = 1e-9
) -> float:
    """1.0 if the final number of the completion equals ``problem.answer`` within
    ``math.isclose(rel_tol, abs_tol)`` (see :func:`rlvr.rewards.verifiers.numeric_match`)."""
    return 1.0 if numeric_match(completion, problem.answer, rel_tol, abs_tol) else 0.0


def _choice_patterns(letters: str) -> list[re.Pattern[str]]:
    """Patterns for a chosen letter, most explicit first; group 1 is the letter."""
    cls = f"[{re.escape(letters)}]"
    return [
        re.compile(rf"\\boxed\{{\s*(?:\\text(?:bf)?\{{)?\s*\(?({cls})\)?\s*\}}?\s*\}}"),
        re.compile(rf"(?i:answer)(?:\s+is)?[\s:*\-]*\(?({cls})\)?(?!\w)"),
        re.compile(rf"\(({cls})\)"),
        re.compile(rf"^\s*(?:\*\*)?\(?({cls})(?:[.):]|\*\*)?\s*$"),
    ]


@functools.lru_cache(maxsize=16)
def _cached_patterns(letters: str) -> list[re.Pattern[str]]:
    return _choice_patterns(letters)


def extract_choice(text: str, letters: str = "ABCDE") -> str | None:
    """The multiple-choice letter a text commits to, or None.

    Tried in order, the last match of each winning: ``\\boxed{C}`` (also ``\\boxed{(C)}``,
    ``\\boxed{\\text{C}}``); "Answer: C" / "The answer is (C)" / "answer: **C**"; a
    parenthesised "(C)"; a text that is only the letter ("C", "C.", "(C)").
    """
    for pattern in _cached_patterns(letters):
        found = pattern.findall(text)
        if found:
            return found[-1]
    return None


@register_reward("multiple_choice")
def multiple_choice(completion: str, problem: Problem, letters: str = "ABCDE") -> float:
    """1.0 if the letter the completion commits to (:func:`extract_choice`) is the key
    ``problem.answer`` (written "C", "(C)" or "C."); 0.0 otherwise.

    Raises ``ValueError`` if the reference answer is not one of ``letters``.
    """
    key = extract_choice(problem.answer.strip(), letters)
    if key is None:
        raise ValueError(
            f"problem {problem.id!r}: answer {problem.answer!r} is not a choice among {letters!r}"
        )
    return 1.0 if extract_choice(completion, letters) == key else 0.0


class _DropTimeoutWarning(logging.Filter):
    """math-verify warns that its timeout is off when called outside the main thread; the
    reward's caller (CombinedReward) enforces the timeout instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutWarning())


def _signal_timeout(seconds: int) -> int | None:
    """math-verify times out with SIGALRM, which only works in the main thread."""
    return seconds if threading.current_thread() is threading.main_thread() else None


@functools.lru_cache(maxsize=4096)
def _parse_gold(answer: str, timeout: int | None) -> tuple[Any, ...]:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    configs = (LatexExtractionConfig(), ExprExtractionConfig())
    text = answer.strip()
    wrapped = text if ("$" in text or "\\boxed" in text or "\\[" in text) else f"${text}$"
    gold = parse(wrapped, extraction_config=configs, parsing_timeout=timeout)
    if not gold:
        gold = parse(text, extraction_config=configs, parsing_timeout=timeout)
    return tuple(gold)


@register_reward("math")
def math_reward(completion: str, problem: Problem, timeout_seconds: int = 5) -> float:
    """1.0 if the completion's final answer is mathematically equivalent to ``problem.answer``.

    Uses math-verify (Hugging Face): the reference is parsed as LaTeX (``"\\frac{1}{2}"``,
    ``"0.5"``, ``"\\{1,2\\}"``, ``"(0,1]"``); the completion's answer is taken from the last
    ``\\boxed{}`` first, then "final answer"-style anchors and plain expressions, and compared
    symbolically and numerically (sets, intervals, relations, matrices included).
    ``timeout_seconds`` bounds each parse and comparison in the main thread (math-verify uses
    SIGALRM); in a worker thread the caller's timeout applies instead.

    Raises ``ValueError`` if the reference answer cannot be parsed.
    """
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    timeout = _signal_timeout(timeout_seconds)
    gold = _parse_gold(problem.answer, timeout)
    if not gold:
        raise ValueError(
            f"problem {problem.id!r}: math-verify cannot parse the answer {problem.answer!r}"
        )
    pred = parse(
        completion,
        extraction_config=(LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()),
        parsing_timeout=timeout,
    )
    return 1.0 if pred and verify(list(gold), pred, timeout_seconds=timeout) else 0.0
