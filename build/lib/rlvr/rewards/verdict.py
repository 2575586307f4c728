"""Function-call tests judged where the solution cannot reach the verdict: the values a
solution's process reported (``_call_harness.py``: one line per call, ``<nonce> <index> ok
<tagged JSON>`` or ``<nonce> <index> err <JSON message>``), read strictly
(:func:`parse_value_lines`, :func:`values_for_check`) and compared in the trusted parent with
the expected values (:func:`same_value`).

The solution's process is given only each call's function name and arguments, never an
expected value, and reports plain data (``None``, ``bool``, ``int``, ``float``, ``str`` and
lists, tuples, sets and dicts of them, checked by exact type: an object whose ``__eq__`` always
succeeds is not plain data and fails the test). Patching builtins, the harness, frames, ``gc``
or ``atexit``, forking, or forging result lines can only change the values it reports: what
any program chooses anyway. Assert tests of any form are judged by :mod:`rlvr.rewards.remote`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from rlvr.rewards._plain import decode

_INDEX = r"0|[1-9][0-9]{0,8}"


def parse_value_lines(stdout: str, nonce: str, count: int) -> dict[int, tuple[bool, str]]:
    """``{call index: (ok, JSON text or error message)}`` from the solution process's lines
    ``<nonce> <index> ok <json>`` / ``<nonce> <index> err <json string>``. Lines that do not
    match exactly are ignored; an index reported twice is an error (a forged line)."""
    line = re.compile(
        rf"^{re.escape(nonce)} (?P<index>{_INDEX}) (?P<kind>ok|err) (?P<body>[^\n]*)$",
        re.MULTILINE | re.ASCII,
    )
    out: dict[int, tuple[bool, str]] = {}
    for match in line.finditer(stdout):
        index = int(match["index"])
        if index >= count:
            continue
        if index in out:
            out[index] = (False, "the solution reported this value twice")
            continue
        out[index] = (match["kind"] == "ok", match["body"])
    return out


def values_for_check(reported: dict[int, tuple[bool, str]], calls: range) -> list[Any]:
    """The tagged plain-data values (see ``_plain.py``) of the calls in ``calls``, checked by
    decoding them; ValueError naming the first call that failed (with its message: JSON text,
    or the text itself), was not reported or is not plain data."""
    values = []
    for k in calls:
        ok, body = reported.get(k, (False, json.dumps("did not finish")))
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            why = body[:300] if not ok else "unreadable result"
            raise ValueError(f"{_call_name(k)}: {why}") from None
        if not ok:
            raise ValueError(f"{_call_name(k)}: {data if isinstance(data, str) else 'failed'}")
        try:
            decode(data)
        except (ValueError, TypeError, RecursionError) as err:
            raise ValueError(f"{_call_name(k)}: not plain data ({err})") from None
        values.append(data)
    return values


def _call_name(k: int) -> str:
    return f"call {k}"


#: Floats match with absolute or relative error at most this (the usual checker rule of
#: programming contests): only rounding noise of a different summation order is forgiven.
FLOAT_TOLERANCE = 1e-9


def same_value(got: Any, expected: Any, unwrap: bool = False) -> bool:
    """Whether ``got`` (a value the solution reported, decoded plain data) equals ``expected``
    (JSON data: None, bool, int, float, str, lists, dicts with string keys).

    Types are compared as JSON sees them: a ``bool`` only equals a ``bool`` (``True`` is not
    ``1``), ``int`` and ``float`` equal each other by value (floats within
    :data:`FLOAT_TOLERANCE`), a ``tuple`` equals the list of its items (JSON has no tuples; APPS
    and LiveCodeBench compare the same way), a ``set`` never equals a list. With ``unwrap``
    (APPS/TACO and PrimeIntellect, which often store the value ``v`` as ``[v]``), ``got`` may also
    equal the single element of a one-element ``expected`` list, as the APPS evaluation accepts.
    """
    if _same(got, expected):
        return True
    return unwrap and type(expected) is list and len(expected) == 1 and _same(got, expected[0])


def _same(got: Any, expected: Any) -> bool:
    kind = type(expected)
    if kind in (bool, str, type(None)):
        return type(got) is kind and got == expected
    if kind in (int, float):
        if type(got) not in (int, float):
            return False
        if kind is int and type(got) is int:
            return got == expected
        try:
            return math.isclose(got, expected, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE)
        except OverflowError:  # an int too large for a float
            return False
    if kind is list:
        return (
            type(got) in (list, tuple)
            and len(got) == len(expected)
            and all(_same(g, e) for g, e in zip(got, expected, strict=True))
        )
    if kind is dict:
        return (
            type(got) is dict
            and len(got) == len(expected)
            and all(key in got and _same(got[key], value) for key, value in expected.items())
        )
    return False
