"""Tool calling for agent environments: the safe calculator, tool schemas from functions,
running calls (bad arguments, raising and hanging tools), the sandboxed Python tool, and the
hermes / action parsers. Every expected value is worked out by hand."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from rlvr.envs.calc import CalcError, calc, format_number, safe_eval
from rlvr.envs.parsers import (
    PARSERS,
    ParsedAction,
    format_call,
    parse_action,
    parse_hermes,
    tools_prompt,
)
from rlvr.envs.tools import (
    Tool,
    ToolCall,
    ToolError,
    ToolOutcome,
    call_tool,
    make_tool,
    python_tool,
)

# --- calc ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("2 * (3 + 4) ** 2", 98),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("7 % 3", 1),
        ("7 / 2", 3.5),
        ("-(-3)", 3),
        ("+4", 4),
        ("2 ** -1", 0.5),
        ("1_000 * 3", 3000),
        (" 1.5e3 ", 1500.0),
        ("2 ** 3 ** 2", 512),  # right-associative: 2 ** 9
        ("9 ** 100", 9**100),  # 96 digits: allowed
        ("(" * 90 + "1" + ")" * 90, 1),
    ],
)
def test_safe_eval_values(expression: str, value: int | float) -> None:
    result = safe_eval(expression)
    assert result == value and type(result) is type(value)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "unsupported syntax: Call"),
        ("x", "unsupported syntax: Name 'x'"),
        ("x + 1", "unsupported syntax: Name 'x'"),
        ("(1).real", "unsupported syntax: Attribute"),
        ("'a' * 3", "unsupported syntax: str 'a'"),
        ("True + 1", "unsupported syntax: bool True"),
        ("2j", "unsupported syntax: complex 2j"),
        ("[1, 2]", "unsupported syntax: List"),
        ("1 < 2", "unsupported syntax: Compare"),
        ("lambda: 1", "unsupported syntax: Lambda"),
        ("abs(-1)", "unsupported syntax: Call"),
        ("__import__('os').system('ls')", "unsupported syntax: Call"),
        ("(lambda: 9)() + 1", "unsupported syntax: Call"),
        ("[].__class__.__base__", "unsupported syntax: Attribute"),
        ("2 ^ 3", "unsupported operator: BitXor (use ** for powers)"),
        ("1 / 0", "division by zero"),
        ("1 // 0.0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("2 ** 10 ** 10", "exponent too large (at most 100 in magnitude)"),
        ("2 ** 101", "exponent too large (at most 100 in magnitude)"),
        ("99 ** 99", "result too large (more than 100 digits)"),  # 198 digits
        ("10 ** 100", "result too large (more than 100 digits)"),  # 101 digits
        ("10 ** 60 * 10 ** 60", "result too large (more than 100 digits)"),
        ("1e300 * 1e300", "result too large"),
        ("(-8) ** 0.5", "result is a complex number"),
        ("١٢ + 1", "unsupported character '١' (use ASCII digits and operators)"),
        ("１２", "unsupported character '１' (use ASCII digits and operators)"),
        ("1 +", "syntax error: invalid syntax"),
        ("", "syntax error: invalid syntax"),
        ("1; 2", "syntax error: invalid syntax"),
        ("1" * 201, "expression too long (201 > 200 characters)"),
        ("-" * 150 + "1", "expression too complex (more than 256 syntax nodes)"),
    ],
)
def test_safe_eval_refuses(expression: str, message: str) -> None:
    with pytest.raises(CalcError) as caught:
        safe_eval(expression)
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


def test_safe_eval_is_fast_on_the_worst_inputs() -> None:
    start = time.perf_counter()
    for expression in ("9**99*9**99", "2**100**100", "(" * 99 + "9**100" + ")" * 95):
        with pytest.raises(CalcError):
            safe_eval(expression)
    assert time.perf_counter() - start < 5  # refused before computing, not after


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (12.0, "12"),
        (0.1 + 0.2, "0.3"),
        (2 / 3, "0.6666666667"),
        (-0.0, "0"),
        (1e20, "1e+20"),
        (2.5e-7, "2.5e-07"),
        (10**30, "1" + "0" * 30),
        (-3, "-3"),
    ],
)
def test_format_number(x: int | float, text: str) -> None:
    assert format_number(x) == text


def test_calc_tool_function() -> None:
    assert calc("1/3*3") == "1"
    assert calc("(2 + 3) * 4") == "20"
    tool = make_tool(calc)
    assert tool.schema()["function"]["description"] == "Evaluate an arithmetic expression."
    assert tool.parameters["required"] == ["expression"]


# --- make_tool ----------------------------------------------------------------------------


def _search(query: str, limit: int = 5, exact: bool = False, boost: float | None = None) -> str:
    """Search the notes.

    Finds notes whose text matches.

    Args:
        query: words to look for,
            all of them.
        limit (int): at most this many results.
        exact: match whole words only.

    Returns:
        the matching notes, one a line.
    """
    return f"{query}|{limit}|{exact}|{boost}"


def test_make_tool_schema() -> None:
    tool = make_tool(_search, name="search", timeout_s=2.0)
    assert tool.schema() == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the notes.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "words to look for, all of them."},
                    "limit": {"type": "integer", "description": "at most this many results."},
                    "exact": {"type": "boolean", "description": "match whole words only."},
                    "boost": {"type": "number", "nullable": True},
                },
                "required": ["query"],
            },
        },
    }
    assert tool.timeout_s == 2.0 and tool.fn is _search


def test_make_tool_containers() -> None:
    def f(xs: list[int], table: dict[str, int], anything: list) -> str:
        """F."""
        return ""

    properties = make_tool(f).parameters["properties"]
    assert properties == {
        "xs": {"type": "array", "items": {"type": "integer"}},
        "table": {"type": "object"},
        "anything": {"type": "array"},
    }


def _varargs(*numbers: int) -> str:
    """Sum."""
    return ""


def _kwargs(a: int, **options: str) -> str:
    """Options."""
    return ""


def _untyped(a) -> str:
    """Untyped."""
    return ""


def _odd_type(when: time.struct_time) -> str:
    """Odd."""
    return ""


def _no_doc(a: int) -> str:
    return ""


def _typo(a: int) -> str:
    """Typo.

    Args:
        b: not a parameter.
    """
    return ""


def _positional(a: int, /) -> str:
    """Positional."""
    return ""


@pytest.mark.parametrize(
    ("fn", "words"),
    [
        (_varargs, ["'numbers'", "*args"]),
        (_kwargs, ["'options'", "**kwargs"]),
        (_untyped, ["'a'", "no type hint"]),
        (_odd_type, ["'when'", "struct_time", "no JSON-schema type"]),
        (_no_doc, ["no docstring"]),
        (_typo, ["['b']", "not parameters"]),
        (_positional, ["'a'", "positional-only"]),
        (lambda: "", ["tool name '<lambda>'"]),
    ],
)
def test_make_tool_refuses(fn: Callable[..., str], words: list[str]) -> None:
    with pytest.raises(ToolError) as caught:
        make_tool(fn)
    assert isinstance(caught.value, ValueError)
    assert all(w in str(caught.value) for w in words), str(caught.value)


# --- call_tool ----------------------------------------------------------------------------


def _add(a: int, b: float = 0.5) -> float:
    """Add two numbers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


def _boom(x: str) -> str:
    """Raise."""
    raise RuntimeError("kaput " + "x" * 1000)


def _sleepy(x: str) -> str:
    """Sleep."""
    time.sleep(2.0)
    return "woke"


def _square(n: int) -> int:
    """Square."""
    return n * n


def _no_args() -> str:
    """Nothing."""
    return "ok"


TOOLS = {
    "add": make_tool(_add, name="add"),
    "boom": make_tool(_boom, name="boom"),
    "sleepy": make_tool(_sleepy, name="sleepy", timeout_s=0.2),
    "square": make_tool(_square, name="square"),
    "calc": make_tool(calc),
    "ping": make_tool(_no_args, name="ping"),
}


@pytest.mark.parametrize(
    ("call", "text"),
    [
        (ToolCall("add", {"a": 2, "b": 3}), "5"),
        (ToolCall("add", {"a": 2, "b": 0.25}), "2.25"),
        (ToolCall("add", {"a": 2}), "2.5"),
        (ToolCall("square", {}, raw=" 12 "), "144"),
        (ToolCall("calc", {}, raw="2**5"), "32"),
        (ToolCall("calc", {"expression": "6*7"}), "42"),
        (ToolCall("ping", {}), "ok"),
        (ToolCall("ping", {}, raw=""), "ok"),
    ],
)
def test_call_tool_ok(call: ToolCall, text: str) -> None:
    assert call_tool(TOOLS, call) == ToolOutcome(text, ok=True, error=None)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (
            ToolCall("nope", {}),
            "unknown tool 'nope'; available tools: add, boom, calc, ping, sleepy, square",
        ),
        (ToolCall("add", {"b": 1}), "tool 'add' is missing argument(s) a"),
        (
            ToolCall("add", {"a": 1, "c": 2}),
            "tool 'add' got unknown argument(s) c (it takes: a, b)",
        ),
        (ToolCall("add", {"a": True}), "argument 'a' of tool 'add' must be integer, got true"),
        (ToolCall("add", {"a": 1.5}), "argument 'a' of tool 'add' must be integer, got 1.5"),
        (ToolCall("add", {"a": "1"}), "argument 'a' of tool 'add' must be integer, got \"1\""),
        (ToolCall("add", {"a": None}), "argument 'a' of tool 'add' must be integer, got null"),
        (ToolCall("add", [1, 2]), "arguments of tool 'add' must be a JSON object, got array"),  # type: ignore[arg-type]
        (ToolCall("add", {}, raw="1, 2"), "argument 'a' of tool 'add' must be integer, got '1, 2'"),
        (
            ToolCall("square", {}, raw="three"),
            "argument 'n' of tool 'square' must be integer, got 'three'",
        ),
        (ToolCall("ping", {}, raw="x"), "tool 'ping' takes no arguments; use []"),
        (ToolCall("calc", {}, raw="1/0"), "CalcError: division by zero"),
        (ToolCall("calc", {}, raw="os.system('ls')"), "CalcError: unsupported syntax: Call"),
        (ToolCall("sleepy", {"x": ""}), "timed out after 0.2s"),
    ],
)
def test_call_tool_errors(call: ToolCall, error: str) -> None:
    outcome = call_tool(TOOLS, call)
    assert outcome == ToolOutcome(f"Error: {error}", ok=False, error=error)


def test_call_tool_raw_needs_a_single_required_parameter() -> None:
    def two(a: str, b: str) -> str:
        """Two."""
        return a + b

    outcome = call_tool({"two": make_tool(two)}, ToolCall("two", {}, raw="x"))
    assert outcome.error == (
        "tool 'two' takes 2 arguments (a, b) and cannot be called with one text argument"
    )


def test_call_tool_raising_tool_is_truncated() -> None:
    outcome = call_tool(TOOLS, ToolCall("boom", {"x": ""}))
    assert not outcome.ok
    assert outcome.text.startswith("Error: RuntimeError: kaput xxx")
    # the message "RuntimeError: kaput xxx..." has 14 + 6 + 1000 = 1020 characters
    assert outcome.text.endswith("x\n[truncated: 520 more characters]")
    assert len(outcome.error) == 500 + len("\n[truncated: 520 more characters]")


def test_call_tool_timeout_returns_promptly() -> None:
    start = time.perf_counter()
    outcome = call_tool(TOOLS, ToolCall("sleepy", {"x": ""}))
    assert outcome.text == "Error: timed out after 0.2s"
    assert time.perf_counter() - start < 1.8  # not the tool's 2 s


def test_call_tool_truncates_long_results() -> None:
    def long(n: int) -> str:
        """Long."""
        return "ab" * n

    tools = {"long": make_tool(long)}
    outcome = call_tool(tools, ToolCall("long", {"n": 1500}))
    assert outcome.ok and outcome.text == "ab" * 1000 + "\n[truncated: 1000 more characters]"
    assert call_tool(tools, ToolCall("long", {"n": 5}), max_chars=4).text == (
        "abab\n[truncated: 6 more characters]"
    )
    assert call_tool(tools, ToolCall("long", {"n": 1000})).text == "ab" * 1000


def test_call_tool_tool_exiting_is_an_error() -> None:
    def leave(code: int) -> str:
        """Leave."""
        raise SystemExit(code)

    outcome = call_tool({"leave": make_tool(leave)}, ToolCall("leave", {"code": 3}))
    assert outcome == ToolOutcome("Error: SystemExit: 3", ok=False, error="SystemExit: 3")


def test_tool_validates_name_and_timeout() -> None:
    with pytest.raises(ToolError, match="tool name 'bad name'"):
        Tool("bad name", "d", {"type": "object", "properties": {}}, print)
    with pytest.raises(ToolError, match="timeout_s must be > 0"):
        Tool("ok", "d", {"type": "object", "properties": {}}, print, timeout_s=0)


def test_python_tool_runs_in_the_sandbox() -> None:
    tool = python_tool(timeout_s=5.0)
    assert tool.name == "python" and tool.parameters["required"] == ["code"]
    code = "import sys\nprint(sum(range(10)))\nsys.exit('bad ' + str(2 + 2))"
    outcome = call_tool({"python": tool}, ToolCall("python", {"code": code}))
    assert outcome.ok
    assert outcome.text == "45\nbad 4\n[exit code 1]"


# --- parsers ------------------------------------------------------------------------------


def test_parse_hermes() -> None:
    text = (
        "Let me compute.\n"
        '<tool_call>\n{"name": "calc", "arguments": {"expression": "2+2"}}\n</tool_call>\n'
        '<tool_call>{"name": "add", "arguments": "{\\"a\\": 1}"}</tool_call>\n'
        '<tool_call>\n```json\n{"name": "ping", "parameters": {}}\n```\n</tool_call>\n'
        '<tool_call>{"name": "ping"}</tool_call>'
    )
    assert parse_hermes(text) == ParsedAction(
        calls=[
            ToolCall("calc", {"expression": "2+2"}),
            ToolCall("add", {"a": 1}),
            ToolCall("ping", {}),
            ToolCall("ping", {}),
        ],
        errors=[],
        answer=None,
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('<tool_call>{"name": "calc", </tool_call>', "tool call 1: invalid JSON ("),
        ("<tool_call>[1, 2]</tool_call>", 'tool call 1: expected a JSON object {"name"'),
        ('<tool_call>{"arguments": {}}</tool_call>', 'tool call 1: missing "name" (a string)'),
        ('<tool_call>{"name": 3}</tool_call>', 'tool call 1: missing "name" (a string)'),
        (
            '<tool_call>{"name": "a", "arguments": [1]}</tool_call>',
            "tool call 1: \"arguments\" of 'a' must be a JSON object",
        ),
        (
            '<tool_call>{"name": "a", "arguments": "{oops"}</tool_call>',
            "tool call 1: \"arguments\" of 'a' is a string that is not valid JSON",
        ),
        (
            '<tool_call>{"name": "a", "arguments": "[1]"}</tool_call>',
            "tool call 1: \"arguments\" of 'a' must be a JSON object",
        ),
        ('<tool_call>{"name": "a"}', "tool call 1: <tool_call> is not closed by </tool_call>"),
        ("<tool_call>" + "[" * 100_000 + "</tool_call>", "tool call 1: invalid JSON"),
    ],
)
def test_parse_hermes_malformed(text: str, error: str) -> None:
    parsed = parse_hermes(text)
    assert parsed.calls == [] and len(parsed.errors) == 1
    assert parsed.errors[0].startswith(error), parsed.errors[0]


def test_parse_hermes_unclosed_then_good() -> None:
    text = '<tool_call>{"name": "a"}\n<tool_call>{"name": "b"}</tool_call>\nAnswer: 7 \n'
    assert parse_hermes(text) == ParsedAction(
        calls=[ToolCall("b", {})],
        errors=["tool call 1: <tool_call> is not closed by </tool_call>"],
        answer="7",
    )


def test_parse_action() -> None:
    text = (
        "Thought: I need the product.\n"
        "Action: calc[(2 + 3) * [4][0]]\n"
        "  Action: search [capital of France]\n"
        "Action: ping[]\n"
        "Action: calc 2+2\n"
        "Action:\n"
        "Action Input: not an action line\n"
        "Answer: first\n"
        "Answer: the answer\nis long\n"
    )
    assert parse_action(text) == ParsedAction(
        calls=[
            ToolCall("calc", {}, raw="(2 + 3) * [4][0]"),
            ToolCall("search", {}, raw="capital of France"),
            ToolCall("ping", {}, raw=""),
        ],
        errors=[
            "malformed action 'calc 2+2': write Action: tool_name[argument]",
            "malformed action '': write Action: tool_name[argument]",
        ],
        answer="the answer\nis long",
    )
    assert parse_action("no calls here") == ParsedAction([], [], None)
    assert PARSERS == {"hermes": parse_hermes, "action": parse_action}


def test_format_call_round_trips() -> None:
    hermes = ToolCall("add", {"a": 1, "b": "é"})
    assert format_call(hermes, "hermes") == (
        '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": "é"}}\n</tool_call>'
    )
    assert parse_hermes(format_call(hermes, "hermes")).calls == [hermes]
    assert format_call(ToolCall("calc", {}, raw="1+1"), "action") == "Action: calc[1+1]"
    assert format_call(ToolCall("calc", {"expression": "1+1"}), "action") == "Action: calc[1+1]"
    assert format_call(ToolCall("square", {"n": 12}), "action") == "Action: square[12]"
    assert format_call(ToolCall("ping", {}), "action") == "Action: ping[]"
    assert parse_action("Action: square[12]").calls == [ToolCall("square", {}, raw="12")]
    with pytest.raises(ToolError, match="the action format passes one"):
        format_call(hermes, "action")
    with pytest.raises(ToolError, match=r"unknown tool-call format 'xml'; use one of \['action'"):
        format_call(hermes, "xml")


def test_parsed_calls_run() -> None:
    """Parser -> call_tool end to end, both formats."""
    text = "Action: calc[2**10]\nAction: square[7]"
    texts = [call_tool(TOOLS, c).text for c in parse_action(text).calls]
    assert texts == ["1024", "49"]
    call = parse_hermes(format_call(ToolCall("add", {"a": 40, "b": 2}), "hermes")).calls[0]
    assert call_tool(TOOLS, call).text == "42"


def test_tools_prompt() -> None:
    tools = [TOOLS["add"], TOOLS["calc"]]
    hermes = tools_prompt(tools, "hermes")
    assert hermes.splitlines()[:5] == [
        "You can use these tools:",
        "- add(a: integer, b?: number): Add two numbers.",
        "    a: the first.",
        "    b: the second.",
        "- calc(expression: string): Evaluate an arithmetic expression.",
    ]
    assert '<tool_call>\n{"name": "<tool name>", "arguments": {"<argument>": <value>}}\n' in hermes
    assert hermes.endswith("write it on a last line: Answer: <answer>")
    action = tools_prompt(tools, "action", answer_line=False)
    assert "\nAction: <tool name>[<argument>]\n" in action
    assert "Answer:" not in action
    with pytest.raises(ToolError, match="unknown tool-call format"):
        tools_prompt(tools, "json")


# ---------------------------------------------------------------- tool environments


def add(a: int, b: int) -> str:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return str(a + b)


def test_an_action_environment_refuses_tools_of_several_parameters_when_built() -> None:
    from rlvr.envs.base import EnvError
    from rlvr.envs.tool_env import ToolEnv

    tool = make_tool(add)
    with pytest.raises(EnvError, match=r"tool 'add' takes 2 parameters \(a, b\), but tool_format"):
        ToolEnv([tool], "action")
    assert ToolEnv([tool], "hermes").tools == [tool]  # JSON arguments carry both


@pytest.mark.parametrize(
    ("fmt", "call"),
    [
        ("action", "Action: calc[6 * 7]"),
        (
            "hermes",
            '<tool_call>\n{"name": "calc", "arguments": {"expression": "6 * 7"}}\n</tool_call>',
        ),
    ],
)
def test_worked_examples_go_before_the_problem_with_real_tool_results(fmt: str, call: str) -> None:
    from rlvr.data import Problem
    from rlvr.envs.calculator import CalculatorEnv

    example = [
        {"role": "user", "content": "What is 6 * 7?"},
        {"role": "assistant", "tool_call": {"name": "calc", "arguments": {"expression": "6 * 7"}}},
        {"role": "tool"},
        {"role": "assistant", "content": "Answer: 42"},
    ]
    env = CalculatorEnv(fmt, system_prompt="Use the tool.", examples=[example])
    chat = env.reset(Problem("p", "What is 3 * 5?", "15"), seed=0)
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert chat[2]["content"] == call and chat[3]["content"] == "42"  # the tool really ran
    assert chat[-1]["content"] == "What is 3 * 5?"
    both = CalculatorEnv(fmt, demonstration=True, examples=[example])
    assert len(both.reset(Problem("p", "Hi", "1"), seed=0)) == 9  # the built-in one, then ours


@pytest.mark.parametrize(
    ("example", "error"),
    [
        ([{"role": "assistant", "content": "Answer: 1"}], "starts with a user"),
        ([{"role": "user", "content": "?"}, {"role": "tool"}], "follows no call"),
        (
            [{"role": "user", "content": "?"}, {"role": "assistant", "tool_call": {"name": "add"}}],
            "no tool 'add'",
        ),
        (
            [
                {"role": "user", "content": "?"},
                {
                    "role": "assistant",
                    "tool_call": {"name": "calc", "arguments": {"expression": "1/0"}},
                },
                {"role": "tool"},
            ],
            "the example's call failed",
        ),
        ("What is 1 + 1?", "expected a non-empty list of messages"),
    ],
)
def test_worked_examples_that_cannot_be_shown_are_refused_when_built(example, error) -> None:
    from rlvr.envs.base import EnvError
    from rlvr.envs.calculator import CalculatorEnv

    with pytest.raises(EnvError, match=error):
        CalculatorEnv("action", examples=[example])
