"""Data rows to problem contents: checked values, the prompt template, duplicates dropped.

A row gives a prompt and a reference answer (columns named by :class:`RowFormat`):

* the prompt is text, or a chat: a list of ``{"role", "content"}`` messages (an optional
  system message first, the user's last, user/assistant turns between); the template is
  applied to the (last) user message;
* the answer is text, a number or a boolean (kept as ``str(value)``), optionally cut out of a
  longer text by ``answer_pattern`` (one regex group, e.g. GSM8K's ``#### (\\S+)``); without
  an answer column (``answer_column`` None) every answer is "";
* a row may give completions (:class:`~rlvr.data.base.Demonstration`): a demonstration
  (``completion_column``: text, or messages continuing the chat: assistant turns, tool results,
  user turns), a preference pair (``chosen_column`` and ``rejected_column``), or a prompt chat
  that ends with assistant turns (the chat before its first assistant message is the prompt,
  the rest the demonstration: the common ``messages`` format of SFT data);
* the template may use ``{question}`` (the prompt) and any other column of the row by name
  (``"{question} (in {unit})"``); every field is checked against the columns at load.

Anything else (a list or dict where text belongs, a null, an empty string, a missing column or
template field, an answer the pattern does not match) is a :class:`~rlvr.errors.DataError`
naming the source, row and column and what was expected.

Rows with the same prompt (the rendered user message or chat) are duplicates: only the first
is kept (held-out rows count as first), so no problem is both trained on and held out;
the dropped ones are counted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.data.base import FILE_PROMPT_TEMPLATE, Chat, Demonstration
from rlvr.data.sources import read_source
from rlvr.data.tables import Table, describe
from rlvr.errors import DataError
from rlvr.templates import answer_regex, template_fields

HELD_OUT_SPLITS = frozenset({"test", "eval", "validation"})
_ROLES = ("system", "user", "assistant")
_CONTINUATION_ROLES = ("assistant", "user", "tool")


@dataclass(frozen=True)
class RowFormat:
    """How data rows become problems (the file-task keys of a ``task:`` section)."""

    prompt_column: str = "prompt"
    answer_column: str | None = "answer"
    prompt_template: str = FILE_PROMPT_TEMPLATE
    answer_pattern: str | None = None
    split_column: str | None = None
    category_column: str | None = None
    completion_column: str | None = None
    chosen_column: str | None = None
    rejected_column: str | None = None

    def __post_init__(self) -> None:
        fields = template_fields(self.prompt_template)
        if not {"question", self.prompt_column} & fields:
            raise DataError(
                f"task.prompt_template {self.prompt_template!r} never uses the prompt: include "
                "{question}"
            )
        if self.answer_pattern is not None:
            answer_regex(self.answer_pattern)
        if (self.chosen_column is None) != (self.rejected_column is None):
            raise DataError("task.chosen_column and task.rejected_column go together")
        if self.chosen_column is not None and self.completion_column is not None:
            raise DataError("give task.completion_column or task.chosen_column, not both")

    def columns(self) -> list[str]:
        """Every column a row needs: prompt, answer, split, category, completions, template
        fields."""
        named = [self.prompt_column, self.answer_column, self.split_column, self.category_column]
        named += [self.completion_column, self.chosen_column, self.rejected_column]
        fields = sorted(template_fields(self.prompt_template) - {"question"})
        return list(dict.fromkeys(c for c in named + fields if c is not None))


@dataclass(frozen=True)
class PreparedRow:
    """One checked row: its 0-based ``index`` in its table, ``where`` it is ("d.jsonl, line 4"),
    the rendered user message ``prompt`` (the last user turn of ``chat`` for a chat row), the
    ``answer`` text, whether a split column or the eval split marks it ``held_out``, its
    ``category`` (the category column's value, "" without one) and the completions it gives
    (``demonstrations``)."""

    index: int
    where: str
    prompt: str
    chat: Chat | None
    answer: str
    held_out: bool = False
    category: str = ""
    demonstrations: tuple[Demonstration, ...] = ()


@dataclass(frozen=True)
class Duplicate:
    """A dropped row: ``where`` it is, ``kept`` where the row with the same prompt is, its
    ``category``, and whether its answer differs from the kept row's (``conflict``)."""

    where: str
    kept: str
    category: str
    conflict: bool


@dataclass(frozen=True)
class LoadedRows:
    """The rows of a source after checks and de-duplication, in table order (the eval split's
    after the training split's); ``marked`` says a split column or eval split marks the
    held-out rows (else a fraction is drawn); ``category_column`` is the column of
    ``PreparedRow.category``."""

    source: str
    rows: tuple[PreparedRow, ...]
    duplicates: tuple[Duplicate, ...]
    marked: bool
    category_column: str | None = None


def load_rows(
    path: str,
    fmt: RowFormat,
    split: str = "train",
    eval_split: str | None = None,
    subset: str | None = None,
) -> LoadedRows:
    """Read ``path`` (:func:`rlvr.data.sources.read_source`), check and render every row, and drop
    duplicate prompts. Raises DataError as described in the module docstring, ValueError for
    both a split column and an eval split."""
    if fmt.split_column is not None and eval_split is not None:
        raise ValueError("give split_column or eval_split, not both")
    train, held = read_source(path, fmt.columns(), split, eval_split, subset)
    rows = prepare_rows(train, fmt)
    if held is not None:
        rows += prepare_rows(held, fmt, held_out=True)
    kept, duplicates = deduplicate(rows)
    marked = fmt.split_column is not None or eval_split is not None
    return LoadedRows(train.source, tuple(kept), tuple(duplicates), marked, fmt.category_column)


def prepare_rows(table: Table, fmt: RowFormat, held_out: bool = False) -> list[PreparedRow]:
    """Check and render every row of ``table``; ``held_out`` marks them all (an eval split)."""
    _check_columns(table, fmt)
    fields = sorted(template_fields(fmt.prompt_template) - {"question"})
    regex = answer_regex(fmt.answer_pattern) if fmt.answer_pattern is not None else None
    return [_prepare_row(table, i, fmt, fields, regex, held_out) for i in range(table.n_rows)]


def _prepare_row(
    table: Table,
    i: int,
    fmt: RowFormat,
    fields: list[str],
    regex: re.Pattern[str] | None,
    held_out: bool,
) -> PreparedRow:
    """Row ``i`` of ``table`` checked and rendered (see :func:`prepare_rows`)."""
    where = table.where(i)

    def cell(column: str) -> str:
        return text_cell(table.columns[column][i], where, column)

    answer = cell(fmt.answer_column) if fmt.answer_column is not None else ""
    if regex is not None and fmt.answer_column is not None:
        answer = _cut_answer(regex, answer, where, fmt.answer_column)
    raw_prompt = table.columns[fmt.prompt_column][i]
    given: list[Demonstration] = []
    if isinstance(raw_prompt, list) and raw_prompt and _role(raw_prompt[-1]) == "assistant":
        first = next(k for k, turn in enumerate(raw_prompt) if _role(turn) == "assistant")
        at = f"{where}, column {fmt.prompt_column!r}"
        if not any(_role(turn) == "user" for turn in raw_prompt[:first]):
            raise DataError(
                f"{at}: a chat needs a user message before its first assistant message (the "
                "prompt the demonstration answers)"
            )
        turns = continuation_cell(raw_prompt[first:], at, first)
        given.append(Demonstration.of(turns))
        raw_prompt = raw_prompt[:first]
    prompt = prompt_cell(raw_prompt, where, fmt.prompt_column)
    for column, reward in (
        (fmt.completion_column, 1.0),
        (fmt.chosen_column, 1.0),
        (fmt.rejected_column, 0.0),
    ):
        if column is not None:
            turns = completion_cell(table.columns[column][i], where, column)
            given.append(Demonstration.of(turns, reward))
    last = prompt if isinstance(prompt, str) else prompt[-1][1]
    values = {field: cell(field) for field in fields}
    try:
        text = fmt.prompt_template.format(**values, question=last)
    except ValueError as err:  # a format spec the value does not take, e.g. {question:d}
        raise DataError(f"{where}: task.prompt_template {fmt.prompt_template!r}: {err}") from None
    chat = None if isinstance(prompt, str) else (*prompt[:-1], ("user", text))
    if fmt.split_column is not None:
        held_out = cell(fmt.split_column).lower() in HELD_OUT_SPLITS
    category = cell(fmt.category_column) if fmt.category_column is not None else ""
    return PreparedRow(i, where, text, chat, answer, held_out, category, tuple(given))


def _check_columns(table: Table, fmt: RowFormat) -> None:
    """DataError naming the first column a row needs that ``table`` lacks."""
    keys = {
        fmt.prompt_column: "task.prompt_column",
        fmt.answer_column: "task.answer_column",
        fmt.completion_column: "task.completion_column",
        fmt.chosen_column: "task.chosen_column",
        fmt.rejected_column: "task.rejected_column",
        fmt.split_column: "task.split_column",
        fmt.category_column: "task.category_column",
    }
    available = ", ".join(table.available)
    for column in fmt.columns():
        if column in table.available:
            continue
        if column in keys:
            raise DataError(
                f"column {column!r} not found in {table.source} ({keys[column]}); available "
                f"columns: {available}"
            )
        raise DataError(
            f"task.prompt_template {fmt.prompt_template!r} uses {{{column}}}, which is not a "
            f"column of {table.source}; a template may use {{question}} (the prompt column "
            f"{fmt.prompt_column!r}) and these columns: {available}"
        )


def text_cell(value: Any, where: str, column: str) -> str:
    """A text, number or boolean value as stripped text; DataError for anything else (a list,
    a dict, a null, NaN) or an empty string."""
    if value is None:
        raise DataError(f"{where}, column {column!r}: missing (null); every row needs a value")
    if not isinstance(value, (str, int, float)) or (
        isinstance(value, float) and not math.isfinite(value)
    ):
        raise DataError(f"{where}, column {column!r}: expected text, got {describe(value)}")
    text = str(value).strip()
    if not text:
        raise DataError(f"{where}, column {column!r} is empty")
    return text


def prompt_cell(value: Any, where: str, column: str) -> str | Chat:
    """A prompt: stripped text, or a chat given as a list of role/content messages."""
    if isinstance(value, list) and any(isinstance(turn, dict) for turn in value):
        return chat_cell(value, where, column)
    if not isinstance(value, str) and value is not None:
        raise DataError(
            f"{where}, column {column!r}: expected the prompt as text, or a chat (a list of "
            f"{{'role': ..., 'content': ...}} messages), got {describe(value)}"
        )
    return text_cell(value, where, column)


def chat_cell(value: list[Any], where: str, column: str) -> Chat:
    """A chat: an optional system message first, the user's last, non-empty text contents."""
    turns = []
    for i, turn in enumerate(value):
        at = f"{where}, column {column!r}, message {i}"
        if not (
            isinstance(turn, dict)
            and isinstance(turn.get("role"), str)
            and isinstance(turn.get("content"), str)
        ):
            raise DataError(
                f"{at}: expected {{'role': ..., 'content': <text>}}, got {describe(turn)}"
            )
        role, content = turn["role"], turn["content"]
        if role not in _ROLES:
            raise DataError(f"{at}: role {role!r} is not one of {', '.join(_ROLES)}")
        if role == "system" and i > 0:
            raise DataError(f"{at}: only the first message may be a system message")
        if not content.strip():
            raise DataError(f"{at}: empty content")
        turns.append((role, content))
    if turns[-1][0] != "user":
        raise DataError(
            f"{where}, column {column!r}: the last message must be the user's (the policy writes "
            f"the reply), got role {turns[-1][0]!r}"
        )
    return tuple(turns)


def _role(turn: Any) -> Any:
    return turn.get("role") if isinstance(turn, dict) else None


def completion_cell(value: Any, where: str, column: str) -> list[dict[str, Any]]:
    """A given completion: text (one assistant message), or a list of messages continuing the
    prompt's chat (:func:`continuation_cell`)."""
    if isinstance(value, list):
        return continuation_cell(value, f"{where}, column {column!r}", 0)
    return [{"role": "assistant", "content": text_cell(value, where, column)}]


def continuation_cell(value: list[Any], at: str, offset: int) -> list[dict[str, Any]]:
    """Messages that continue a chat: assistant, user or tool messages, the first and the last
    an assistant's (the turns trained on); an assistant message needs text content or
    ``tool_calls``. Each message is kept as written (other fields included)."""
    turns: list[dict[str, Any]] = []
    for k, turn in enumerate(value):
        here = f"{at}, message {k + offset}"
        if not isinstance(turn, dict) or not isinstance(turn.get("role"), str):
            raise DataError(
                f"{here}: expected {{'role': ..., 'content': ...}}, got {describe(turn)}"
            )
        role, content = turn["role"], turn.get("content")
        if role not in _CONTINUATION_ROLES:
            raise DataError(
                f"{here}: role {role!r} cannot follow the prompt; expected one of "
                f"{', '.join(_CONTINUATION_ROLES)}"
            )
        text = isinstance(content, str) and content.strip()
        if not text and not (role == "assistant" and turn.get("tool_calls")):
            raise DataError(f"{here}: empty content")
        turns.append(dict(turn))
    if not turns:
        raise DataError(f"{at}: no messages")
    if turns[0]["role"] != "assistant" or turns[-1]["role"] != "assistant":
        raise DataError(
            f"{at}: a demonstration starts and ends with an assistant message (the turns "
            f"trained on), got {turns[0]['role']!r} ... {turns[-1]['role']!r}"
        )
    return turns


def _cut_answer(regex: re.Pattern[str], answer: str, where: str, column: str) -> str:
    """The answer pattern's group in ``answer``; DataError naming the row when it does not
    match (or matches nothing)."""
    match = regex.search(answer)
    found = (match.group(1) or "").strip() if match else ""
    if not found:
        shown = answer if len(answer) <= 80 else "..." + answer[-77:]
        raise DataError(
            f"{where}, column {column!r}: task.answer_pattern {regex.pattern!r} does not match "
            f"{shown!r}"
        )
    return found


def deduplicate(rows: Sequence[PreparedRow]) -> tuple[list[PreparedRow], list[Duplicate]]:
    """Rows with distinct prompts (the rendered chat), in their order, and the dropped ones.

    Of rows with the same prompt the first is kept, held-out rows counting as first (so a
    marked held-out set stays whole); a dropped row whose answer differs is a ``conflict``.
    """
    first: dict[Chat, PreparedRow] = {}
    duplicates = []
    for row in sorted(rows, key=lambda r: not r.held_out):  # stable: held-out rows first
        key = row.chat if row.chat is not None else (("user", row.prompt),)
        kept = first.setdefault(key, row)
        if kept is not row:
            duplicates.append(
                Duplicate(row.where, kept.where, row.category, row.answer != kept.answer)
            )
    keep = {id(row) for row in first.values()}
    return [row for row in rows if id(row) in keep], duplicates
