"""Reading tool calls out of the policy's text, in two formats, and describing them to it.

``"hermes"``: the Hermes / Qwen 2.5+ format chat templates with ``tools`` support train on:
each call is a JSON object in its own ``<tool_call>...</tool_call>`` block,

.. code-block:: text

    <tool_call>
    {"name": "calc", "arguments": {"expression": "2 + 2"}}
    </tool_call>

``"action"``: ReAct (Yao et al., 2023, https://arxiv.org/abs/2210.03629) lines
``Action: name[argument]``, one text argument per call, on one line.

Both parsers also read a final answer: the text after the last line that starts with
``Answer:``. A malformed call never raises: it becomes an entry of ``ParsedAction.errors``,
which an environment sends back to the model (and counts as an invalid action).
:func:`tools_prompt` is the system-prompt text for chat templates without ``tools`` support.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs.tools import Tool, ToolCall, ToolError

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_ANSWER = re.compile(r"^[ \t]*Answer:", re.MULTILINE)
_ACTION_LINE = re.compile(r"^\s*Action:(.*)$")
_ACTION = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_-]*)\s*\[(.*)\]\s*$")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


@dataclass
class ParsedAction:
    """The tool calls, malformed calls and final answer of one turn's text.

    Attributes:
        calls: the well-formed calls, in order.
        errors: one message per malformed call, for the model (``"tool call 2: invalid JSON
            (...)"``).
        answer: the text after the last line starting with ``Answer:`` (to the end of the
            text, stripped), or None without such a line.
    """

    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    answer: str | None = None


def _answer(text: str) -> str | None:
    matches = list(_ANSWER.finditer(text))
    return text[matches[-1].end() :].strip() if matches else None


def _hermes_call(body: str) -> ToolCall | str:
    """A call from a ``<tool_call>`` block's JSON, or what is wrong with it. Also takes
    ``"parameters"`` for ``"arguments"`` (Llama 3 style) and a body in a ```json fence."""
    body = body.strip()
    fenced = _FENCE.match(body)
    body = fenced.group(1) if fenced else body
    try:
        data = json.loads(body)
    except json.JSONDecodeError as err:
        return f"invalid JSON ({err.msg} at character {err.pos})"
    except (ValueError, RecursionError):
        return "invalid JSON"
    if not isinstance(data, dict):
        return 'expected a JSON object {"name": ..., "arguments": {...}}'
    name = data.get("name")
    if not isinstance(name, str) or not name:
        return 'missing "name" (a string)'
    arguments: Any = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            return f'"arguments" of {name!r} is a string that is not valid JSON'
    if not isinstance(arguments, dict):
        return f'"arguments" of {name!r} must be a JSON object'
    return ToolCall(name, arguments)


def parse_hermes(text: str) -> ParsedAction:
    """Every ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` block of ``text``.
    ``arguments`` may be an object or a JSON string holding one. Malformed JSON, a missing
    name, non-object arguments, and a ``<tool_call>`` with no ``</tool_call>`` before the next
    ``<tool_call>`` (or the end) are error entries."""
    parsed = ParsedAction(answer=_answer(text))
    start = text.find(_OPEN)
    index = 0
    while start != -1:
        index += 1
        body_start = start + len(_OPEN)
        close = text.find(_CLOSE, body_start)
        following = text.find(_OPEN, body_start)
        if close == -1 or (following != -1 and following < close):
            parsed.errors.append(f"tool call {index}: {_OPEN} is not closed by {_CLOSE}")
            start = following
            continue
        call = _hermes_call(text[body_start:close])
        if isinstance(call, str):
            parsed.errors.append(f"tool call {index}: {call}")
        else:
            parsed.calls.append(call)
        start = text.find(_OPEN, close + len(_CLOSE))
    return parsed


def parse_action(text: str) -> ParsedAction:
    """Every ``Action: name[args]`` line of ``text`` (ReAct style) as
    ``ToolCall(name, {}, raw=args)``, ``args`` being the text between the first ``[`` and the
    last ``]`` of the line; a line starting with ``Action:`` that does not have this form is
    an error entry."""
    parsed = ParsedAction(answer=_answer(text))
    for line in text.splitlines():
        line_match = _ACTION_LINE.match(line)
        if line_match is None:
            continue
        match = _ACTION.match(line_match.group(1))
        if match is None:
            shown = line_match.group(1).strip()[:80]
            parsed.errors.append(f"malformed action {shown!r}: write Action: tool_name[argument]")
        else:
            parsed.calls.append(ToolCall(match.group(1), {}, raw=match.group(2)))
    return parsed


PARSERS: dict[str, Callable[[str], ParsedAction]] = {
    "hermes": parse_hermes,
    "action": parse_action,
}
"""The tool-call formats by name."""


def _check_format(fmt: str) -> None:
    if fmt not in PARSERS:
        raise ToolError(f"unknown tool-call format {fmt!r}; use one of {sorted(PARSERS)}")


def format_call(call: ToolCall, fmt: str) -> str:
    """The text of ``call`` in format ``fmt`` (what :data:`PARSERS` ``[fmt]`` reads back).
    An ``"action"`` call shows ``raw``, else its one argument (strings as they are, other
    values as JSON); a call with several arguments has no ``"action"`` form (ToolError)."""
    _check_format(fmt)
    if fmt == "hermes":
        body = {"name": call.name, "arguments": call.arguments}
        return f"{_OPEN}\n{json.dumps(body, ensure_ascii=False)}\n{_CLOSE}"
    if call.raw is not None:
        return f"Action: {call.name}[{call.raw}]"
    if len(call.arguments) > 1:
        raise ToolError(
            f"call of {call.name!r} has {len(call.arguments)} arguments; the action format "
            "passes one"
        )
    value = next(iter(call.arguments.values()), "")
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return f"Action: {call.name}[{text}]"


def _tool_lines(tool: Tool) -> list[str]:
    """``- name(a: integer, b?: string): description`` and one line per described
    parameter."""
    properties = tool.parameters.get("properties", {})
    required = set(tool.parameters.get("required", []))
    params = [
        f"{p}{'' if p in required else '?'}: {schema.get('type', 'any')}"
        for p, schema in properties.items()
    ]
    lines = [f"- {tool.name}({', '.join(params)}): {tool.description}"]
    lines += [
        f"    {p}: {schema['description']}"
        for p, schema in properties.items()
        if schema.get("description")
    ]
    return lines


def tools_prompt(tools: list[Tool], fmt: str, answer_line: bool = True) -> str:
    """System-prompt text for chat templates without ``tools`` support: the tools (name,
    parameters with JSON types, ``?`` marking optional ones, descriptions) and the exact call
    syntax of ``fmt``; with ``answer_line``, how to give the final answer (a last line
    ``Answer: ...``, what :class:`ParsedAction` reads)."""
    _check_format(fmt)
    lines = ["You can use these tools:"]
    for tool in tools:
        lines += _tool_lines(tool)
    if fmt == "hermes":
        lines += [
            "",
            "To call a tool, write a JSON object with its name and arguments between "
            "<tool_call></tool_call> tags:",
            _OPEN,
            '{"name": "<tool name>", "arguments": {"<argument>": <value>}}',
            _CLOSE,
            "You may make several calls in one message, one block each.",
        ]
    else:
        lines += [
            "",
            "To call a tool, write a line",
            "Action: <tool name>[<argument>]",
            "with the tool's one argument between the brackets, on a single line. You may "
            "write several Action lines in one message.",
        ]
    lines.append("The results come back in the next message.")
    if answer_line:
        lines.append("When you know the final answer, write it on a last line: Answer: <answer>")
    return "\n".join(lines)
