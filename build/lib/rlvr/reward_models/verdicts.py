"""Reading a judge's verdict out of its reply: pure functions of text.

Each parser returns the verdict as a number, or None when the reply holds none (the judge
reward then fails, per ``reward.on_error``, or scores ``unparsed``). A verdict stated more than
once counts by its last statement (a judge that reasons first states the verdict last).

* :func:`parse_yes_no`: the last standalone "yes" or "no" (any case) -> 1.0 / 0.0;
* :func:`parse_number`: the last number (``7``, ``-2.5``, ``8/10`` reads 8);
* :func:`parse_boxed`: the number in the last ``\\boxed{...}``;
* :func:`parse_json_field`: a field of the last JSON object in the reply (``true``/``false``
  read 1/0);
* :func:`parse_choice`: the last of a few labels (``"A"``/``"B"``) standing alone;
* :func:`expected_value`: the expectation of values under choice probabilities, renormalised
  over the choices (the local judge's exact verdict, e.g. P(Yes) / (P(Yes) + P(No))).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?")


def parse_yes_no(text: str) -> float | None:
    """1.0 for a last standalone "yes", 0.0 for "no", None for neither."""
    found = _YES_NO.findall(text)
    return None if not found else float(found[-1].lower() == "yes")


def parse_number(text: str) -> float | None:
    """The last number in ``text`` (a fraction ``a/b`` reads as ``a``: "8/10" is 8 on a scale
    of 10), None when there is none."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    return float(found[-1].split("/")[0].replace(" ", ""))


def parse_boxed(text: str) -> float | None:
    """The number inside the last ``\\boxed{...}``, None when there is no box or no number."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, at = 1, start + len("\\boxed{")
    for i in range(at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return parse_number(text[at:i])
    return None


def parse_json_field(text: str, field: str) -> float | None:
    """``field`` of the last JSON object in ``text`` that has it (in a code fence or not): a
    number as is, a boolean as 1/0, a numeric string parsed; None otherwise."""
    decoder = json.JSONDecoder()
    value: Any = None
    for start in [m.start() for m in re.finditer(r"\{", text)]:
        try:
            obj, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(obj, dict) and field in obj:
            value = obj[field]
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return parse_number(value) if _NUMBER.fullmatch(value.strip()) else parse_yes_no(value)
    return None


def parse_choice(text: str, labels: Sequence[str]) -> int | None:
    """The index of the label that stands alone last in ``text`` (``"A"`` in "Response A is
    better", not in "And"), None when no label does."""
    best, where = None, -1
    for i, label in enumerate(labels):
        for m in re.finditer(rf"(?<![A-Za-z0-9]){re.escape(label)}(?![A-Za-z0-9])", text):
            if m.start() > where:
                best, where = i, m.start()
    return best


def expected_value(probs: Sequence[float], values: Sequence[float]) -> float | None:
    """``sum_i p_i v_i / sum_i p_i``: the verdict's expectation with the probabilities
    renormalised over the choices; None when they are all 0."""
    total = sum(probs)
    if total <= 0:
        return None
    return sum(p * v for p, v in zip(probs, values, strict=True)) / total
