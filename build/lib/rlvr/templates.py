"""Checks of the two user-written patterns of a task section, shared by config validation and
the data loader: ``task.prompt_template`` (a ``str.format`` template) and ``task.answer_pattern``
(a regex with one group). Errors are :class:`rlvr.errors.DataError` (a ``ValueError``)."""

from __future__ import annotations

import re
import string

from rlvr.errors import DataError


def template_fields(template: str) -> set[str]:
    """The field names of a ``str.format`` template; DataError for a malformed template or a
    field that is not a plain name ("{}", "{0}", "{a.b}")."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as err:
        raise DataError(
            f"task.prompt_template {template!r} is not a valid template ({err}); write literal "
            "braces as {{ and }}"
        ) from None
    fields = {field for _, field, _, _ in parsed if field is not None}
    for field in fields:
        if not field.isidentifier():
            raise DataError(
                f"task.prompt_template {template!r}: {{{field}}} is not a field name; use "
                "{question} or a column name, e.g. {unit}"
            )
    return fields


def answer_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled; DataError unless it is a regex with exactly one group."""
    try:
        regex = re.compile(pattern)
    except re.error as err:
        raise DataError(f"task.answer_pattern {pattern!r} is not a valid regex ({err})") from None
    if regex.groups != 1:
        raise DataError(
            f"task.answer_pattern {pattern!r} must have exactly one group (the answer), e.g. "
            f"'#### (\\S+)'; it has {regex.groups}"
        )
    return regex
