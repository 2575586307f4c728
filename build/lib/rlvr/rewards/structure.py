"""Rewards on the structure of a completion: a required format, and JSON that fits a schema.

- ``format``: a regular expression, or tags that must appear in order, such as
  ``<think>...</think><answer>...</answer>`` (the format reward of DeepSeek-R1-Zero style RL);
- ``json_schema``: the completion (or its last fenced ``json`` block) parses as JSON and
  validates against a JSON Schema (``jsonschema`` package).

Both return a :class:`~rlvr.rewards.protocol.Score` whose reason says what failed.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rlvr.rewards.protocol import Score
from rlvr.rewards.registry import register_reward

if TYPE_CHECKING:
    from rlvr.data.base import Problem

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)


@functools.lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.DOTALL)
    except re.error as err:
        raise ValueError(f"format: invalid regular expression {pattern!r}: {err}") from err


def tags_in_order(text: str, tags: Sequence[str], strict: bool = True) -> str | None:
    """None if each ``<tag>...</tag>`` occurs exactly once, in the given order, without
    overlapping; else the reason it does not. ``strict`` also forbids anything but whitespace
    outside the tags."""
    position, outside = 0, []
    for tag in tags:
        opening, closing = f"<{tag}>", f"</{tag}>"
        for marker in (opening, closing):
            count = text.count(marker)
            if count != 1:
                return f"{marker} occurs {count} times, expected once"
        start, end = text.find(opening), text.find(closing)
        if start < position:
            return f"{opening} is out of order"
        if end < start:
            return f"{closing} comes before {opening}"
        outside.append(text[position:start])
        position = end + len(closing)
    outside.append(text[position:])
    if strict and any(part.strip() for part in outside):
        return "text outside the tags"
    return None


_ANSWER_LINE = re.compile(r"(?:final\s+)?answer\s*:[ \t]*\S", re.IGNORECASE)


@register_reward("format")
def format_reward(
    completion: str,
    problem: Problem,
    pattern: str | None = None,
    tags: Sequence[str] | None = None,
    strict: bool = True,
) -> Score:
    """1.0 if the completion has the required format, else 0.0 (with the reason).

    With ``pattern``: the stripped completion must match it entirely (``re.fullmatch``,
    DOTALL) when ``strict``, or contain a match otherwise. With ``tags``: :func:`tags_in_order`
    (e.g. ``["think", "answer"]`` for ``<think>...</think><answer>...</answer>``). With neither:
    the convention every task's default prompt asks for, a last non-empty line
    ``Answer: <answer>`` (what :func:`rlvr.answers.extract_answer` reads).
    """
    if pattern is not None:
        regex = _compile(pattern)
        text = completion.strip()
        found = regex.fullmatch(text) if strict else regex.search(text)
        return Score(1.0, "matches") if found else Score(0.0, f"does not match {pattern!r}")
    if tags is None:
        lines = [line.strip() for line in completion.splitlines() if line.strip()]
        if lines and _ANSWER_LINE.match(lines[-1]):
            return Score(1.0, "ends with an 'Answer: ...' line")
        return Score(0.0, "last line is not 'Answer: <answer>'")
    if isinstance(tags, str):
        tags = (tags,)
    problem_found = tags_in_order(completion, tags, strict)
    return Score(1.0, "tags in order") if problem_found is None else Score(0.0, problem_found)


def extract_json_text(completion: str) -> str:
    """The JSON part of a completion: the last fenced block labelled ``json`` (else the last
    unlabelled fenced block), else the whole completion, stripped."""
    blocks = _FENCE.findall(completion)
    for wanted in ("json", ""):
        labelled = [body for label, body in blocks if label.lower() == wanted]
        if labelled:
            return labelled[-1].strip()
    return completion.strip()


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    import jsonschema

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as err:
        raise ValueError(f"json_schema: invalid JSON Schema: {err.message}") from err
    return cls(schema)


def _schema_json(schema: Mapping[str, Any] | str | bool | None, problem: Problem) -> str:
    """The schema as canonical JSON text: from ``schema`` (a dict or JSON text), else the
    problem's answer parsed as JSON."""
    source = problem.answer if schema is None else schema
    if isinstance(source, str):
        try:
            source = json.loads(source)
        except json.JSONDecodeError as err:
            where = "the schema" if schema is not None else f"problem {problem.id!r}'s answer"
            raise ValueError(f"json_schema: {where} is not valid JSON ({err})") from err
    if not isinstance(source, (Mapping, bool)):
        raise ValueError(f"json_schema: a schema must be an object, got {type(source).__name__}")
    return json.dumps(source, sort_keys=True)


@register_reward("json_schema")
def json_schema_reward(
    completion: str,
    problem: Problem,
    schema: Mapping[str, Any] | str | None = None,
    extract: bool = True,
) -> Score:
    """1.0 if the completion is JSON valid under the schema, else 0.0 with the reason.

    The schema comes from ``schema`` (a parameter or per-sample field, dict or JSON text) or
    else from ``problem.answer`` (JSON text). With ``extract``, the JSON is read from the last
    fenced ``json`` block when there is one (:func:`extract_json_text`). An invalid schema is
    a data error and raises ``ValueError``; malformed JSON and schema violations score 0.
    """
    validator = _validator(_schema_json(schema, problem))
    text = extract_json_text(completion) if extract else completion
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as err:
        return Score(0.0, f"invalid JSON: {str(err)[:120]}")
    try:
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
    except RecursionError:
        return Score(0.0, "JSON nested too deeply to validate")
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(root)"
        return Score(0.0, f"schema violation at {where}: {first.message[:160]}")
    return Score(1.0, "valid")
