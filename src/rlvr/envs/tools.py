"""Tools a multi-turn environment offers the policy, and running the calls it makes.

A :class:`Tool` is a Python function with a JSON-schema description, in the function format
chat templates take (``tokenizer.apply_chat_template(..., tools=[t.schema() for t in tools])``,
the OpenAI/Hugging Face format). :func:`make_tool` derives that schema from the function's
signature and Google-style docstring. A parser (:mod:`rlvr.envs.parsers`) turns the policy's
text into :class:`ToolCall` objects, and :func:`call_tool` runs one: it never raises, every
failure (unknown tool, bad arguments, the tool raising or running past its timeout) becomes a
:class:`ToolOutcome` whose text tells the model what went wrong, so a malformed call costs a
turn rather than the episode.

Why not ``transformers.utils.get_json_schema``: it was tried (transformers 5.19) and it needs
a docstring description for every parameter, turns unknown annotations (``datetime.date``)
into ``"object"`` without complaint, answers ``*args`` with a misleading "no description"
error, and keeps the whole docstring (not its first paragraph) as the description.

Timeouts: a call runs in a daemon worker thread and is abandoned after ``Tool.timeout_s``.
Python cannot kill a thread, so an abandoned call keeps running (and holding a core, if it
computes) until it returns on its own; code from the model belongs in the sandbox
(:func:`python_tool`), not in a thread.
"""

from __future__ import annotations

import inspect
import json
import re
import threading
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs.base import EnvError
from rlvr.sandbox import SandboxLimits, SandboxResult, run_python

ERROR_CHARS = 500
RESULT_CHARS = 2000
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
_JSON_TYPES: dict[type, str] = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}
_ARGS_HEADER = re.compile(r"^(\s*)(Args|Arguments):\s*$")
_ARG_LINE = re.compile(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class ToolError(EnvError, ValueError):
    """A function that cannot be made a tool (names the function, the parameter, the fix)."""


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ToolError(
            f"tool name {name!r}: use 1-64 letters, digits, '_' or '-', not starting with a "
            "digit or '-' (make_tool takes name=...)"
        )


@dataclass
class Tool:
    """A function the policy may call.

    Attributes:
        name: what the model calls it by (letters, digits, ``_``, ``-``; at most 64).
        description: what it does, for the model.
        parameters: JSON schema of its keyword arguments:
            ``{"type": "object", "properties": {name: {"type": ..., "description": ...}},
            "required": [...]}``.
        fn: the function, called as ``fn(**arguments)``; its result is shown with ``str()``.
        timeout_s: wall-clock seconds a call may take before it is abandoned.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    timeout_s: float = 5.0

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not self.timeout_s > 0:
            raise ToolError(f"tool {self.name!r}: timeout_s must be > 0, got {self.timeout_s}")

    def schema(self) -> dict[str, Any]:
        """The chat-template function format:
        ``{"type": "function", "function": {"name", "description", "parameters"}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass
class ToolCall:
    """One call the policy made.

    Attributes:
        name: the tool's name.
        arguments: keyword arguments (decoded JSON).
        raw: the argument text of an ``Action: name[raw]`` call (bound to the tool's one
            required parameter by :func:`call_tool`); None for calls with JSON arguments.
    """

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw: str | None = None


@dataclass
class ToolOutcome:
    """What one call gave.

    Attributes:
        text: what the model sees (the result, or ``"Error: ..."``).
        ok: the tool ran and returned.
        error: what went wrong (``text`` without its ``"Error: "`` prefix), None if ``ok``.
    """

    text: str
    ok: bool
    error: str | None = None


def _json_type(hint: Any, where: str) -> dict[str, Any]:
    """The JSON schema of a type hint: int, float, str, bool, list[...] (items of a simple
    element type), dict[...], and ``X | None`` (``"nullable": true``)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(members) == 1:
            return {**_json_type(members[0], where), "nullable": True}
    base = origin or hint
    if base in _JSON_TYPES:
        schema: dict[str, Any] = {"type": _JSON_TYPES[base]}
        args = typing.get_args(hint)
        if base is list and len(args) == 1 and args[0] in _JSON_TYPES:
            schema["items"] = {"type": _JSON_TYPES[args[0]]}
        return schema
    raise ToolError(
        f"{where} has type {hint!r}, which has no JSON-schema type; use int, float, str, bool, "
        "list[...], dict[...] or one of them | None"
    )


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _docstring_parts(doc: str) -> tuple[str, dict[str, str]]:
    """(first paragraph, {parameter: description}) of a Google-style docstring: the ``Args:``
    section's entries are the lines at its first entry's indentation, deeper lines continue
    them, and a line at or left of the header's indentation ends the section."""
    lines = doc.splitlines()
    first: list[str] = []
    for line in lines:
        if not line.strip() or _ARGS_HEADER.match(line):
            break
        first.append(line.strip())
    params: dict[str, str] = {}
    header = next((i for i, line in enumerate(lines) if _ARGS_HEADER.match(line)), None)
    if header is not None:
        body = [line for line in lines[header + 1 :] if line.strip()]
        ends = [i for i, line in enumerate(body) if _indent(line) <= _indent(lines[header])]
        body = body[: ends[0]] if ends else body
        current = None
        for line in body:
            match = _ARG_LINE.match(line.strip())
            if match and _indent(line) == _indent(body[0]):
                current = match.group(1)
                params[current] = match.group(2).strip()
            elif current is not None:
                params[current] = f"{params[current]} {line.strip()}".strip()
    return " ".join(first), params


def make_tool(fn: Callable[..., Any], name: str | None = None, timeout_s: float = 5.0) -> Tool:
    """A :class:`Tool` from a type-annotated function with a Google-style docstring.

    The description is the docstring's first paragraph; each parameter's description comes
    from the ``Args:`` section (``name: text`` or ``name (type): text``, continuation lines
    indented deeper); the JSON type from its annotation (int -> integer, float -> number,
    str -> string, bool -> boolean, list[...] -> array, dict[...] -> object, ``X | None``
    -> X, nullable); parameters without a default are required.

    Raises:
        ToolError: no docstring, ``*args``/``**kwargs`` or positional-only parameters, a
            parameter without a type hint or with one that has no JSON type, or an ``Args:``
            entry that names no parameter.
    """
    name = name or getattr(fn, "__name__", "")
    _check_name(name)
    label = f"tool {name!r} ({getattr(fn, '__qualname__', fn)!r})"
    doc = inspect.getdoc(fn)
    if not doc:
        raise ToolError(f"{label}: has no docstring; its first paragraph is the description")
    description, documented = _docstring_parts(doc)
    try:
        hints = typing.get_type_hints(fn)
    except Exception as err:  # noqa: BLE001 - any unresolvable annotation
        raise ToolError(f"{label}: cannot resolve its type hints ({err})") from err
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        where = f"{label}: parameter {param.name!r}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolError(
                f"{where}: *args and **kwargs cannot be described to a model; name each argument"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolError(f"{where}: is positional-only; tools are called with keywords")
        if param.name not in hints:
            raise ToolError(f"{where}: has no type hint; annotate it (e.g. `{param.name}: str`)")
        properties[param.name] = _json_type(hints[param.name], where)
        if param.name in documented:
            properties[param.name]["description"] = documented[param.name]
        if param.default is param.empty:
            required.append(param.name)
    unknown = sorted(set(documented) - set(properties))
    if unknown:
        raise ToolError(f"{label}: its Args: section documents {unknown}, which are not parameters")
    parameters = {"type": "object", "properties": properties, "required": required}
    return Tool(name, description, parameters, fn, timeout_s)


def _json_name(value: Any) -> str:
    """The JSON type name of a decoded JSON value."""
    if value is None:
        return "null"
    return next((n for t, n in _JSON_TYPES.items() if isinstance(value, t)), type(value).__name__)


def _type_ok(value: Any, schema: Mapping[str, Any]) -> bool:
    """``value`` fits ``schema``'s type (an int fits "number"; a bool is no "integer")."""
    if value is None:
        return bool(schema.get("nullable"))
    kind = schema.get("type")
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    expected = {v: k for k, v in _JSON_TYPES.items()}.get(kind) if isinstance(kind, str) else None
    return expected is None or isinstance(value, expected)


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[truncated: {len(text) - limit} more characters]"


def unknown_tool(name: str, known: Iterable[str]) -> str:
    """What a call of a tool that does not exist is answered with (after ``Error: ``): its
    name and the tools there are."""
    return f"unknown tool {name[:80]!r}; available tools: {', '.join(sorted(known)) or 'none'}"


def _fail(message: str) -> ToolOutcome:
    message = _truncate(message, ERROR_CHARS)
    return ToolOutcome(f"Error: {message}", ok=False, error=message)


def action_parameters(tool: Tool) -> list[str]:
    """The parameters an ``Action: name[text]`` call fills: the tool's required ones, or all
    of them when none is required (the call works with at most one)."""
    return list(tool.parameters.get("required", [])) or list(tool.parameters.get("properties", {}))


def _bind_raw(tool: Tool, raw: str) -> dict[str, Any] | str:
    """The arguments of an ``Action: name[raw]`` call: ``raw`` as the tool's one required
    parameter (or its only one): as is for a string, else decoded as JSON (``lookup[42]``).
    Returns an error message instead when that does not work."""
    properties = tool.parameters.get("properties", {})
    names = action_parameters(tool)
    if not names:
        return {} if not raw.strip() else f"tool {tool.name!r} takes no arguments; use []"
    if len(names) > 1:
        return (
            f"tool {tool.name!r} takes {len(names)} arguments ({', '.join(names)}) and cannot be "
            "called with one text argument"
        )
    schema = properties.get(names[0], {})
    if schema.get("type") == "string":
        return {names[0]: raw}
    try:
        return {names[0]: json.loads(raw)}
    except (ValueError, RecursionError):
        kind = schema.get("type", "JSON")
        return f"argument {names[0]!r} of tool {tool.name!r} must be {kind}, got {raw[:80]!r}"


def _check_arguments(tool: Tool, arguments: Any) -> str | None:
    """What is wrong with ``arguments`` for ``tool`` (missing, unknown, wrong JSON type)."""
    if not isinstance(arguments, dict):
        return f"arguments of tool {tool.name!r} must be a JSON object, got {_json_name(arguments)}"
    properties = tool.parameters.get("properties", {})
    missing = [p for p in tool.parameters.get("required", []) if p not in arguments]
    if missing:
        return f"tool {tool.name!r} is missing argument(s) {', '.join(missing)}"
    unknown = [a for a in arguments if a not in properties]
    if unknown:
        takes = ", ".join(properties) or "none"
        return (
            f"tool {tool.name!r} got unknown argument(s) {', '.join(unknown)} (it takes: {takes})"
        )
    for key, value in arguments.items():
        if not _type_ok(value, properties[key]):
            return (
                f"argument {key!r} of tool {tool.name!r} must be {properties[key].get('type')}, "
                f"got {json.dumps(value, default=str)[:80]}"
            )
    return None


def _run(tool: Tool, arguments: dict[str, Any], max_chars: int) -> ToolOutcome:
    """Call ``tool.fn(**arguments)`` in a daemon thread; abandon it after ``tool.timeout_s``."""
    box: dict[str, str] = {}

    def work() -> None:
        try:
            box["text"] = str(tool.fn(**arguments))
        except BaseException as err:  # noqa: BLE001 - a tool's SystemExit is its failure too
            box["error"] = f"{type(err).__name__}: {err}"

    thread = threading.Thread(target=work, name=f"tool-{tool.name}", daemon=True)
    thread.start()
    thread.join(tool.timeout_s)
    if thread.is_alive():
        return _fail(f"timed out after {tool.timeout_s:g}s")
    if "error" in box:
        return _fail(box["error"])
    return ToolOutcome(_truncate(box["text"], max_chars), ok=True)


def call_tool(
    tools: Mapping[str, Tool], call: ToolCall, max_chars: int = RESULT_CHARS
) -> ToolOutcome:
    """Run one call; never raises. Failures come back as ``ok=False`` outcomes whose text
    (``"Error: ..."``, at most :data:`ERROR_CHARS` characters of message) names the problem:
    an unknown tool (with the known ones), raw ``Action:`` text for a tool that takes several
    arguments, missing or unknown arguments, a value of the wrong JSON type, the tool raising
    (``"Error: <Type>: <message>"``), or running past its ``timeout_s``
    (``"Error: timed out after <t>s"``). A result is ``str()``-ed and cut to ``max_chars``
    characters, with a ``[truncated: N more characters]`` line when it was longer."""
    tool = tools.get(call.name)
    if tool is None:
        return _fail(unknown_tool(call.name, tools))
    arguments: dict[str, Any] | str = call.arguments
    if call.raw is not None:
        arguments = _bind_raw(tool, call.raw)
        if isinstance(arguments, str):
            return _fail(arguments)
    problem = _check_arguments(tool, arguments)
    if problem is not None:
        return _fail(problem)
    return _run(tool, arguments, max_chars)


_SANDBOX_SLACK_S = 5.0
"""Seconds :func:`python_tool` gives the sandbox beyond the program's own limit (start-up and
clean-up), so the sandbox, not the thread timeout, ends a slow program."""


def _sandbox_text(result: SandboxResult) -> str:
    """What the model sees of a sandboxed run: stdout, and on failure also stderr's tail and
    how it ended (``[exit code 1]``, ``[killed: wall_time]``)."""
    if result.ok:
        return result.stdout or "(no output)"
    status = (
        f"[killed: {result.killed_reason}]"
        if result.killed_reason is not None
        else f"[exit code {result.returncode}]"
    )
    stdout = _truncate(result.stdout.rstrip(), RESULT_CHARS // 2)
    stderr = result.stderr.rstrip()[-(RESULT_CHARS // 3) :]
    return "\n".join(part for part in (stdout, stderr, status) if part)


def python_tool(timeout_s: float = 5.0) -> Tool:
    """A tool ``python(code)`` that runs the model's program in rlvr's sandbox
    (:func:`rlvr.sandbox.run_python`: a fresh confined process per call, standard
    library only, no network) with ``timeout_s`` seconds of wall and CPU time, and returns its
    stdout; a failing program returns its stdout, the tail of its stderr (the traceback) and
    how it ended, as a normal (``ok``) result the model can learn from. A sandbox that cannot
    start shows as ``"Error: SandboxError: ..."``."""
    limits = SandboxLimits(wall_seconds=timeout_s, cpu_seconds=timeout_s)

    def python(code: str) -> str:
        """Run a Python program and return what it prints. Each call is a fresh process
        (nothing carries over between calls) with only the standard library and no network.

        Args:
            code: a complete Python program; print() the values you want to see.
        """
        return _sandbox_text(run_python(code, limits=limits))

    return make_tool(python, timeout_s=timeout_s + _SANDBOX_SLACK_S)
