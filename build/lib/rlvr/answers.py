"""Final answers in model completions: extract them, parse numbers, compare, normalise.

The lowest layer of the answer convention every task and reward shares (it imports nothing of
rlvr, so :mod:`rlvr.data` and :mod:`rlvr.rewards` both build on it):

* :func:`extract_answer` returns the answer *string* as written by the model (or None): the last
  ``\\boxed{...}``, else what follows the last "Answer:", else the last number;
  :func:`parse_number` turns such a string into a float (or None); :func:`numeric_match` and
  :func:`numeric_reward` (1.0 if the completion's final answer equals the reference, else 0.0)
  compare it numerically;
* :func:`answer_span` (the part of a completion that states its answer), :func:`normalize_text`
  (SQuAD-style normalisation) and :func:`extract_choice` (the multiple-choice letter) read
  text answers;
* :func:`normalize_answer`: the vote class of an extracted answer (numbers by value), as
  majority votes and answer entropies count them.
"""

from __future__ import annotations

import functools
import math
import re
import string
import unicodedata
from collections.abc import Iterator

_PUNCT = ".,;:!?"
# A number as models write it: "\frac{3}{4}", "-1,234.5", "3/4", "42". A sign is only taken when
# it does not follow a word character or a closing bracket, so "10-3" yields 10 and 3, not -3.
_NUMBER = re.compile(
    r"-?\\[dt]?frac\{\s*-?\d+\s*\}\{\s*\d+\s*\}"
    r"|(?:(?<![\w)\]}])[-+])?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?"
)
_MARKER = re.compile(r"(?:final\s+answer|answer)\s*(?::|is\b:?)", re.IGNORECASE)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_DECIMAL = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_FRACTION = re.compile(r"([-+]?\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)")
_LATEX_FRAC = re.compile(r"(-?)\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_ANSWER_LINE = re.compile(r"(?:final\s+answer|answer)\s*(?::|is\b:?)", re.IGNORECASE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT_TABLE = str.maketrans("", "", string.punctuation)

NO_ANSWER = "<none>"
"""The answer class of a completion from which no answer could be extracted."""


def boxed_spans(text: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, content)`` of each balanced ``\\boxed{...}`` (or ``\\fbox``) of ``text``
    (nested braces allowed), the last one first."""
    for m in reversed(list(_BOXED.finditer(text))):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            yield m.start(), i, text[m.end() : i - 1]


def _last_boxed(text: str) -> str | None:
    """Content of the last balanced, non-empty ``\\boxed{...}``, or None."""
    for _, _, content in boxed_spans(text):
        content = content.strip().rstrip(_PUNCT).strip()
        if content:
            return content
    return None


def _after_marker(text: str) -> str | None:
    """The answer after the last "Answer:"-style marker: the first number on the first non-empty
    line after it, else that line stripped of trailing punctuation; None if nothing follows."""
    markers = list(_MARKER.finditer(text))
    if not markers:
        return None
    rest = text[markers[-1].end() :].strip()
    line = rest.split("\n", 1)[0]
    number = _NUMBER.search(line)
    if number:
        return number.group()
    line = line.strip().rstrip(_PUNCT).strip()
    return line or None


def marked_answer(text: str) -> str | None:
    """The final answer a completion marks as such: the last ``\\boxed{...}``'s content, else
    what follows the last "Answer:"-style marker; None when it marks none (no fallback to the
    last number, unlike :func:`extract_answer`)."""
    boxed = _last_boxed(text)
    return boxed if boxed is not None else _after_marker(text)


def extract_answer(text: str) -> str | None:
    """Extract the final answer from a completion, or None if there is none.

    Priority: the content of the last ``\\boxed{...}``; else what follows the last "Answer:",
    "Final answer:" or "The answer is" (its first number, or the rest of that line); else the last
    number in the text. Trailing punctuation is stripped.
    """
    for found in (_last_boxed(text), _after_marker(text)):
        if found is not None:
            return found
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def parse_number(s: str) -> float | None:
    """Parse a number as models write it, or None.

    Accepts "1,234" (thousands commas), "-3.5", "3/4", "\\frac{3}{4}", "$42$" (math dollars) and
    "42." (trailing punctuation). Anything else, including "nan" and "inf", gives None.
    """
    s = s.strip().strip("$").strip().rstrip(_PUNCT).strip()
    if _DECIMAL.fullmatch(s):
        return float(s.replace(",", ""))
    m = _FRACTION.fullmatch(s) or _LATEX_FRAC.fullmatch(s)
    if m is None:
        return None
    if m.re is _LATEX_FRAC:
        sign, num, den = m.groups()
        num_value, den_value = parse_number(sign + num.strip()), parse_number(den)
    else:
        num_value, den_value = float(m.group(1)), float(m.group(2))
    if num_value is None or den_value is None or den_value == 0:
        return None
    return num_value / den_value


def numeric_match(
    completion: str, answer: str, rel_tol: float = 1e-6, abs_tol: float = 1e-9
) -> bool:
    """True if the final answer extracted from ``completion`` equals the reference ``answer``.

    Both sides are compared as numbers (``math.isclose`` with the given tolerances); if either is
    not a number, the stripped strings must be identical.
    """
    predicted = extract_answer(completion)
    if predicted is None:
        return False
    p, a = parse_number(predicted), parse_number(answer)
    if p is None or a is None:
        return predicted.strip() == answer.strip()
    return math.isclose(p, a, rel_tol=rel_tol, abs_tol=abs_tol)


def numeric_reward(completion: str, answer: str) -> float:
    """Binary reward: 1.0 if ``numeric_match(completion, answer)``, else 0.0."""
    return 1.0 if numeric_match(completion, answer) else 0.0


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


def normalize_answer(answer: str | None) -> str:
    """The vote class of an extracted answer: numbers by value ("42", "42.0" and "42." agree),
    other strings with whitespace collapsed; :data:`NO_ANSWER` for None or an empty string."""
    if answer is None or not answer.strip():
        return NO_ANSWER
    value = parse_number(answer)
    if value is not None and math.isfinite(value):
        if value == int(value) and abs(value) < 1e15:
            return str(int(value))
        return repr(value)
    return " ".join(answer.split())
