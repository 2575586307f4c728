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
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rlvr.answers import answer_span, extract_choice, marked_answer, normalize_text, numeric_match
from rlvr.rewards.registry import register_reward

if TYPE_CHECKING:
    from rlvr.data.base import Problem


@register_reward("exact_match")
def exact_match(
    completion: str,
    problem: Problem,
    answers: Sequence[str] | str | None = None,
    extract: bool = True,
) -> float:
    """1.0 if the normalised answer (:func:`~rlvr.answers.answer_span` when ``extract``) equals
    the normalised reference ``problem.answer``, or any of ``answers`` when given; else 0.0."""
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
    ``math.isclose(rel_tol, abs_tol)`` (see :func:`rlvr.answers.numeric_match`)."""
    return 1.0 if numeric_match(completion, problem.answer, rel_tol, abs_tol) else 0.0


@register_reward("multiple_choice")
def multiple_choice(completion: str, problem: Problem, letters: str = "ABCDE") -> float:
    """1.0 if the letter the completion commits to (:func:`~rlvr.answers.extract_choice`) is the key
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


def parsed_answer_matches(completion: str, reference: str, timeout_seconds: int = 5) -> bool | None:
    """Whether the completion's marked final answer (:func:`rlvr.answers.marked_answer`) is
    mathematically equivalent to ``reference`` (math-verify), or None when the completion marks
    no answer or either side does not parse: a question for a judge
    (:func:`rlvr.rewards.judged.judge_fallback`)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    found = marked_answer(completion)
    if found is None:
        return None
    timeout = _signal_timeout(timeout_seconds)
    gold = _parse_gold(reference, timeout)
    configs = (LatexExtractionConfig(), ExprExtractionConfig())
    pred = parse(f"${found}$", extraction_config=configs, parsing_timeout=timeout)
    if not gold or not pred:
        return None
    return bool(verify(list(gold), pred, timeout_seconds=timeout))
