"""Code rewards: run the completion's Python against unit tests in the sandbox.

``python_unit_tests`` takes the last fenced ``python`` block of the completion and scores it
by the fraction of tests passed (or 1/0 with ``all_or_nothing``), the execution reward of
code RL recipes (e.g. DeepSeek-R1, DeepCoder). Tests are assert snippets (any Python that
raises on failure); stdin/stdout pairs, each run as the program's input; or function
calls, ``fn_name(*args)`` compared with an expected value. :func:`parse_tests` reads them as code
datasets ship them: assert lists (MBPP, HumanEval-style), APPS/TACO ``input_output``
(stdin/stdout, or function calls with ``fn_name``), LiveCodeBench test lists (``testtype``
``stdin`` or ``functional``, the function name given separately) and PrimeIntellect
``verification_info`` (``test_cases`` of type ``stdin_stdout`` or ``function_call``).
Everything runs in :func:`rlvr.sandbox.run_python`, never in the trainer's process.

Reward hacking: the verdict is computed where the solution cannot reach it, and no test runs
next to the solution. Assert snippets of any form (``assert f(x) == y``, helper code, loops,
HumanEval's ``check(candidate)``) run in a checker process that calls the solution in another
process through a channel, passing and receiving only plain data (:mod:`rlvr.rewards.remote`).
Function-call tests run in one sandboxed run that is given only the function names and
arguments; the parent compares the values it reports with the expected ones
(:func:`rlvr.rewards.verdict.same_value`). Stdin/stdout tests are compared by the parent. A run
ended by a budget counts none of its answers.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from rlvr.rewards._plain import decode
from rlvr.rewards.harnesses import harness_source
from rlvr.rewards.protocol import Score
from rlvr.rewards.registry import register_reward
from rlvr.rewards.remote import judge_remotely
from rlvr.rewards.verdict import (
    parse_value_lines,
    same_value,
    values_for_check,
)
from rlvr.sandbox import SandboxLimits, SandboxResult, run_python

if TYPE_CHECKING:
    from rlvr.data.base import Problem

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_PYTHON_LABELS = ("python", "py", "python3")


def extract_code(completion: str) -> str | None:
    """The last fenced block labelled python/py/python3, else the last unlabelled fenced
    block, else None (an unclosed fence does not count)."""
    blocks = _FENCE.findall(completion)
    for wanted in (_PYTHON_LABELS, ("",)):
        found = [body for label, body in blocks if label.lower() in wanted]
        if found:
            return found[-1]
    return None


@dataclass(frozen=True)
class IOCase:
    """A stdin/stdout test: the program, given ``input``, must print ``output``."""

    input: str
    output: str


@dataclass(frozen=True)
class CallCase:
    """A function-call test: ``fn_name(*args)`` (or ``Solution().fn_name(*args)``) must return
    ``expected``, compared by :func:`rlvr.rewards.verdict.same_value`. ``args`` and ``expected``
    are JSON data; ``unwrap`` also accepts the element of a one-element ``expected`` list (the
    APPS/TACO convention of storing ``v`` as ``[v]``)."""

    fn_name: str
    args: list[Any]
    expected: Any
    unwrap: bool = False


@dataclass(frozen=True)
class TestSuite:
    """Assert snippets, stdin/stdout cases and function-call cases of one problem."""

    __test__ = False  # not a pytest test class

    asserts: tuple[str, ...] = ()
    io: tuple[IOCase, ...] = ()
    calls: tuple[CallCase, ...] = ()

    @property
    def total(self) -> int:
        return len(self.asserts) + len(self.io) + len(self.calls)


def parse_tests(tests: Any, fn_name: str | None = None) -> TestSuite:
    """Read tests from a problem or field; ``fn_name`` names the function of function-call tests
    that do not name it themselves.

    Accepted, as Python data or JSON text:

    * a list of assert snippets (``["assert f(1) == 2", ...]``); other text is one snippet;
    * a list of ``{"input": ..., "output": ...}`` items: stdin/stdout cases, unless the item's
      ``testtype`` is ``"functional"`` (LiveCodeBench: ``input`` is one JSON argument per line,
      ``output`` JSON text) or its ``type`` is ``"function_call"`` (PrimeIntellect: ``input``
      the argument list, ``output`` the expected value, often wrapped as ``[v]``; an item may
      carry its own ``fn_name``); ``testtype: "stdin"`` and ``type: "stdin_stdout"`` items are
      stdin/stdout cases; items may be mixed with assert snippets;
    * ``{"inputs": [...], "outputs": [...]}`` (APPS/TACO): stdin/stdout cases, or with a
      function name (``"fn_name"`` in the mapping, or the parameter) argument lists and expected
      values (often wrapped as ``[v]``, see :class:`CallCase`);
    * ``{"tests": <a list above>}``, optionally with ``"fn_name"`` (or LiveCodeBench's
      ``"func_name"``);
    * ``{"test_cases": [...], "language": "python"}`` (PrimeIntellect ``verification_info``).

    Raises ``ValueError`` for anything else, for a function-call test without a function
    name, for arguments or expected values that are not JSON data, or for an empty suite.
    """
    try:
        return _parse(tests, fn_name)
    except (RecursionError, TypeError, AttributeError) as err:  # malformed beyond the checks
        raise ValueError(f"tests: malformed ({type(err).__name__}: {str(err)[:200]})") from None


def _parse(tests: Any, fn_name: str | None) -> TestSuite:
    if isinstance(tests, str) and not tests.strip():
        raise ValueError("tests: empty text tests nothing (it always passes)")
    if isinstance(tests, str):
        try:
            decoded = json.loads(tests)
        except json.JSONDecodeError:
            decoded = None
        except RecursionError:
            raise ValueError("tests: JSON nested too deeply") from None
        if decoded is None or isinstance(decoded, (int, float, str)):
            return _non_empty(TestSuite(asserts=(tests,)))
        tests = decoded
    if isinstance(tests, Mapping):
        return _non_empty(_parse_mapping(tests, fn_name))
    if isinstance(tests, Sequence):
        return _non_empty(_parse_items(tests, fn_name))
    raise ValueError(f"tests: unsupported type {type(tests).__name__}")


def _parse_mapping(tests: Mapping[str, Any], fn_name: str | None) -> TestSuite:
    name = tests.get("fn_name") or tests.get("func_name") or fn_name
    if "test_cases" in tests:
        language = str(tests.get("language", "python")).lower()
        if language not in _PYTHON_LABELS:
            raise ValueError(f"tests: language {language!r}; only Python tests can be run")
        return _parse(tests["test_cases"], name)
    if "tests" in tests:
        return _parse(tests["tests"], name)
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise ValueError(
            "tests: a mapping needs 'tests', 'test_cases', or 'inputs' and 'outputs' lists"
        )
    if len(inputs) != len(outputs):
        raise ValueError(f"tests: {len(inputs)} inputs but {len(outputs)} outputs")
    pairs = zip(inputs, outputs, strict=True)
    if name is None:
        return TestSuite(io=tuple(_io(i, o) for i, o in pairs))
    return TestSuite(
        calls=tuple(_call(f"tests inputs[{k}]", name, i, o, True) for k, (i, o) in enumerate(pairs))
    )


def _parse_items(tests: Sequence[Any], fn_name: str | None) -> TestSuite:
    asserts, io, calls = [], [], []
    for k, item in enumerate(tests):
        if isinstance(item, str):
            if not item.strip():
                raise ValueError(f"tests[{k}]: an empty snippet tests nothing (it always passes)")
            asserts.append(item)
            continue
        if not (isinstance(item, Mapping) and "input" in item and "output" in item):
            raise ValueError(
                f"tests[{k}]: expected an assert snippet or {{'input', 'output'}}, "
                f"got {type(item).__name__}"
            )
        kind = item.get("testtype", item.get("type", "stdin"))
        given, expected = item["input"], item["output"]
        name = item.get("fn_name") or fn_name
        if kind in ("stdin", "stdin_stdout"):
            io.append(_io(given, expected))
        elif kind == "functional":  # LiveCodeBench: JSON text, one argument per line
            args = _json_lines(f"tests[{k}] input", given)
            calls.append(_call(f"tests[{k}]", name, args, _json(f"tests[{k}] output", expected)))
        elif kind == "function_call":  # PrimeIntellect: the argument list, a wrapped value
            calls.append(_call(f"tests[{k}]", name, given, expected, True))
        else:
            raise ValueError(
                f"tests[{k}]: unknown test type {kind!r}; known: stdin, stdin_stdout, "
                "functional, function_call"
            )
    return TestSuite(tuple(asserts), tuple(io), tuple(calls))


def _json_lines(where: str, value: Any) -> Any:
    """LiveCodeBench's input: one JSON argument per line (blank lines skipped); a value that is
    not text is taken as the argument list."""
    if not isinstance(value, str):
        return value
    return [_json(where, line) for line in value.split("\n") if line.strip()]


def _json(where: str, text: Any) -> Any:
    """``text`` decoded as JSON (a value that is not text is taken as already decoded)."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError(f"{where}: not JSON text: {text[:60]!r}") from None


def _call(where: str, name: str | None, args: Any, expected: Any, unwrap: bool = False) -> CallCase:
    """A :class:`CallCase` with ``args`` and ``expected`` as plain JSON data (tuples as lists)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(
            f"{where}: a function-call test needs the function's name: give 'fn_name' in the "
            "test or in {'fn_name': ..., 'tests': [...]}, or the reward's fn_name parameter "
            f"(LiveCodeBench keeps it in metadata 'func_name'); got {name!r}"
        )
    if not isinstance(args, (list, tuple)):
        raise ValueError(f"{where}: the arguments must be a list, got {type(args).__name__}")
    try:
        args, expected = json.loads(json.dumps([list(args), expected]))
    except (TypeError, ValueError, RecursionError) as err:
        raise ValueError(f"{where}: arguments and output must be JSON data ({err})") from None
    return CallCase(name, args, expected, unwrap)


def _as_text(value: Any) -> str:
    """A test's input or output: text as is, a list as its lines."""
    return value if isinstance(value, str) else "\n".join(map(str, value)) + "\n"


def _io(given: Any, expected: Any) -> IOCase:
    return IOCase(_as_text(given), _as_text(expected))


def _non_empty(suite: TestSuite) -> TestSuite:
    if suite.total == 0:
        raise ValueError("tests: the suite is empty")
    return suite


def normalize_output(text: str) -> str:
    """Output as compared: trailing whitespace of each line and trailing blank lines dropped,
    CRLF as LF."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    return "\n".join(lines).rstrip("\n")


@dataclass(frozen=True)
class UnitTestReport:
    """Outcome of one program on one suite: ``passed`` of ``total``, the ``reward``, a
    one-line ``reason`` (first failure, timeout, missing code) and the reward-hacking
    ``events`` (see :func:`sandbox_events`; ``sandbox/samples`` whenever the program ran)."""

    passed: int
    total: int
    reward: float
    reason: str
    events: tuple[str, ...] = ()


def _clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, non-printable ones (control codes, binary junk
    the program printed) shown as ``?``, so a reason stays one readable line."""
    return "".join(c if c.isprintable() else "?" for c in text[:limit])


def _failure(result: SandboxResult) -> str:
    if result.killed_reason is not None:
        return f"killed ({result.killed_reason})"
    last = result.stderr.strip().splitlines()[-1:] or [f"exit status {result.returncode}"]
    return _clip(last[0], 200)


SAMPLES_EVENT = "sandbox/samples"
NON_PLAIN_EVENT = "sandbox/forbidden/non_plain_value"


def sandbox_events(result: SandboxResult) -> set[str]:
    """The reward-hacking counters a run of the solution adds: ``sandbox/killed/<budget>``
    (``memory``, ``cpu_time``, ``wall_time``, ``processes``, ``disk``, ``output_limit``,
    ``signal``, ...) or ``sandbox/forbidden/syscall`` (killed by the seccomp filter)."""
    reason = result.killed_reason
    if reason is None:
        return set()
    if reason == "forbidden_syscall":
        return {"sandbox/forbidden/syscall"}
    return {f"sandbox/killed/{reason.split(':')[0]}"}


def _solution_run(events: set[str], code: str, **kwargs: Any) -> SandboxResult:
    """:func:`run_python` for a run that holds the solution, its counters added to ``events``
    (the judge's runs, which never see the solution, are not counted)."""
    result = run_python(code, **kwargs)
    events |= sandbox_events(result)
    return result


def _note_value_error(why: str, events: set[str]) -> None:
    """Count a call that returned something other than plain data (e.g. an object whose
    ``__eq__`` always succeeds: the classic way to fake an assert)."""
    if "not plain data" in why:
        events.add(NON_PLAIN_EVENT)


def _over_budget(result: SandboxResult, what: str) -> str:
    """The failure of every test judged from ``result``'s run when that run was ended by a
    budget or a signal ("" otherwise): answers given before the kill do not count, so a program
    cannot answer correctly and then exhaust the machine's memory, disk, processes or time."""
    if result.killed_reason is None:
        return ""
    return f"{what} failed: the solution's run was {_failure(result)}"


BUDGET_SPENT = "sample time budget spent"
_INDEX = r"0|[1-9][0-9]{0,8}"  # ASCII digits only, no leading zeros, bounded


def parse_harness_output(stdout: str, nonce: str, count: int) -> tuple[frozenset[int], str]:
    """(indices of the assert tests that passed, first failure or "") from the harness's
    result lines (``_remote_check_harness.py``).

    Only lines that match exactly are read: ``<nonce> <index> pass`` or ``<nonce> <index|load>
    fail <JSON string>``, with the index in ASCII digits and below ``count``. Anything else
    (other digits, huge numbers, indices past the suite, bad JSON, binary junk) is ignored, so
    it never gives credit and never raises. A test with both a pass and a fail line failed.
    """
    line = re.compile(
        rf"^{re.escape(nonce)} (?P<index>{_INDEX}|load) "
        r'(?:(?P<pass>pass)|fail (?P<message>"[^\n]{0,2000}"))$',
        re.MULTILINE | re.ASCII,
    )
    passed, failed, first = set(), set(), ""
    for match in line.finditer(stdout):
        index = match["index"]
        if index != "load" and int(index) >= count:
            continue
        if match["pass"]:
            if index != "load":
                passed.add(int(index))
            continue
        try:
            message = json.loads(match["message"])
        except (ValueError, RecursionError):
            continue
        if not isinstance(message, str):
            continue
        if index == "load":
            return frozenset(), f"solution: {_clip(message, 300)}"
        failed.add(int(index))
        first = first or f"test {index}: {_clip(message, 300)}"
    return frozenset(passed - failed), first


MIN_RUN_S = 0.05
"""Less of a sample's budget left than this counts as spent: no interpreter starts in it."""


def _budget(limits: SandboxLimits, deadline: float) -> SandboxLimits | None:
    """``limits`` with the wall time cut to what is left of the sample's budget, or None when
    it is spent."""
    remaining = deadline - time.monotonic()
    if remaining < MIN_RUN_S:
        return None
    return replace(limits, wall_seconds=min(limits.wall_seconds, remaining))


def _run_asserts(
    code: str, asserts: Sequence[str], limits: SandboxLimits, deadline: float, events: set[str]
) -> tuple[int, str]:
    """(tests passed, first failure or "") for assert snippets of any form: run by a checker
    process that calls the solution in another process through a channel
    (:mod:`rlvr.rewards.remote`)."""
    run_limits = _budget(limits, deadline)
    if run_limits is None:
        return 0, f"tests 0-{len(asserts) - 1} not run: {BUDGET_SPENT}"

    def run_solution(harness: str, **kwargs: Any) -> SandboxResult:
        return _solution_run(events, harness, **kwargs)

    nonce, checker, solution = judge_remotely(code, asserts, run_limits, run_solution)
    if killed := _over_budget(solution, f"tests 0-{len(asserts) - 1}"):
        return 0, killed
    if re.search(rf"^{nonce} note compared_object$", checker.stdout, re.MULTILINE):
        events.add(NON_PLAIN_EVENT)
    passed, first = parse_harness_output(checker.stdout, nonce, len(asserts))
    if "ChannelError" in first:  # the solution's process ended: say how
        first += f" ({_failure(solution)})"
    if first:
        return len(passed), first
    if len(passed) < len(asserts):
        ended = checker if checker.killed_reason else solution
        return len(passed), f"test {len(passed)} did not finish: {_failure(ended)}"
    return len(passed), ""


#: Run before a function-call solution, as LeetCode and LiveCodeBench do: their starter code
#: annotates with ``List[int]``, ``Optional[...]`` without importing them.
_CALL_PRELUDE = "from typing import *"


def _run_calls(
    code: str, cases: Sequence[CallCase], limits: SandboxLimits, deadline: float, events: set[str]
) -> tuple[int, str]:
    """(cases passed, first failure or "") for the function-call cases: one sandboxed run of
    ``_call_harness.py``, given only each case's function name and arguments (never the
    expected values), reports the return values as plain data; the parent compares them."""
    run_limits = _budget(limits, deadline)
    if run_limits is None:
        return 0, f"calls 0-{len(cases) - 1} not run: {BUDGET_SPENT}"
    nonce = secrets.token_hex(16)
    spec = {
        "nonce": nonce,
        "prelude": _CALL_PRELUDE,
        "calls": [{"fn": case.fn_name, "args": case.args} for case in cases],
    }
    called = _solution_run(
        events,
        harness_source("_call_harness.py"),
        limits=run_limits,
        files={
            "solution.py": code,
            "_plain.py": harness_source("_plain.py"),
            "calls.json": json.dumps(spec),
        },
    )
    if killed := _over_budget(called, f"calls 0-{len(cases) - 1}"):
        return 0, killed
    reported = parse_value_lines(called.stdout, nonce, len(cases))
    failures = [_call_failure(k, case, reported, called) for k, case in enumerate(cases)]
    for why in failures:
        _note_value_error(why, events)
    return failures.count(""), next((why for why in failures if why), "")


def _call_failure(
    k: int, case: CallCase, reported: dict[int, tuple[bool, str]], called: SandboxResult
) -> str:
    """Why call ``k`` failed, or "" when its reported value is the expected one."""
    try:
        (tagged,) = values_for_check(reported, range(k, k + 1))
    except ValueError as err:
        why = _clip(str(err), 300)
        return f"{why} ({_failure(called)})" if "did not finish" in why else why
    got = decode(tagged)
    if same_value(got, case.expected, case.unwrap):
        return ""
    return (
        f"call {k}: {case.fn_name} returned {_clip(repr(got), 80)}, "
        f"expected {_clip(repr(case.expected), 80)}"
    )


def _run_io(
    code: str,
    cases: Sequence[IOCase],
    limits: SandboxLimits,
    stop_at_failure: bool,
    deadline: float,
    events: set[str],
) -> tuple[int, str]:
    """(cases passed, first failure or "") for the stdin/stdout cases, one run each, all
    within the sample's wall-time budget (cases after it is spent fail unrun)."""
    passed, first = 0, ""
    for k, case in enumerate(cases):
        run_limits = _budget(limits, deadline)
        if run_limits is None:
            spent = f"cases {k}-{len(cases) - 1} not run: {BUDGET_SPENT}"
            return passed, f"{first}; {spent}" if first else spent
        result = _solution_run(events, code, stdin=case.input, limits=run_limits)
        got = normalize_output(result.stdout)
        if result.ok and got == normalize_output(case.output):
            passed += 1
            continue
        if not first:
            detail = (
                _failure(result)
                if not result.ok
                else f"expected {_clip(normalize_output(case.output), 60)!r}, "
                f"got {_clip(got, 60)!r}"
            )
            first = f"case {k}: {detail}"
        if stop_at_failure:
            break
    return passed, first


def run_unit_tests(
    code: str | None,
    tests: Any,
    limits: SandboxLimits | None = None,
    all_or_nothing: bool = False,
    fn_name: str | None = None,
) -> UnitTestReport:
    """Run ``code`` against ``tests`` (see :func:`parse_tests`, with ``fn_name``) in the sandbox.

    The reward is ``passed / total``, or 1.0 only if every test passes with
    ``all_or_nothing``. ``code=None`` (no code found) scores 0. ``limits.wall_seconds`` is one
    budget for the whole sample: every run (the assert run, the function-call run, then each
    stdin/stdout case) gets what is left of it, and the tests still unrun when it is spent fail
    with the reason ``"sample time budget spent"``. Whatever the program does, this returns a
    report (about ``wall_seconds`` plus clean-up at the latest) and leaves no process or file
    behind; only a sandbox that cannot start raises (:class:`~rlvr.sandbox.SandboxError`).
    """
    suite = parse_tests(tests, fn_name)
    limits = limits or SandboxLimits()
    if code is None:
        return UnitTestReport(0, suite.total, 0.0, "no ```python code block in the completion")
    deadline = time.monotonic() + limits.wall_seconds
    passed, reasons, events = 0, [], {SAMPLES_EVENT}
    if suite.asserts:
        n, why = _run_asserts(code, suite.asserts, limits, deadline, events)
        passed += n
        reasons += [why] if why else []
    if suite.calls and not (all_or_nothing and reasons):
        n, why = _run_calls(code, suite.calls, limits, deadline, events)
        passed += n
        reasons += [why] if why else []
    if suite.io and not (all_or_nothing and reasons):
        n, why = _run_io(code, suite.io, limits, all_or_nothing, deadline, events)
        passed += n
        reasons += [why] if why else []
    if all_or_nothing:
        reward = 1.0 if passed == suite.total else 0.0
    else:
        reward = passed / suite.total
    summary = f"{passed}/{suite.total} tests passed"
    reason = "; ".join([summary, *reasons])
    return UnitTestReport(passed, suite.total, reward, reason, tuple(sorted(events)))


def run_unit_tests_batch(
    codes: Sequence[str | None],
    tests: Sequence[Any],
    limits: SandboxLimits | None = None,
    all_or_nothing: bool = False,
    max_workers: int | None = None,
) -> list[UnitTestReport]:
    """:func:`run_unit_tests` for many programs in parallel (threads that wait on sandbox
    processes), up to ``max_workers`` (default ``os.cpu_count()``) at a time."""
    if len(codes) != len(tests):
        raise ValueError(f"got {len(codes)} programs but {len(tests)} test suites")
    if not codes:
        return []
    workers = min(max_workers or os.cpu_count() or 1, len(codes))
    with ThreadPoolExecutor(workers, thread_name_prefix="rlvr-sandbox") as pool:
        futures = [
            pool.submit(run_unit_tests, code, suite, limits, all_or_nothing)
            for code, suite in zip(codes, tests, strict=True)
        ]
        return [f.result() for f in futures]


def _limits(limits: SandboxLimits | Mapping[str, Any] | None) -> SandboxLimits:
    if limits is None or isinstance(limits, SandboxLimits):
        return limits or SandboxLimits()
    known = {f.name for f in fields(SandboxLimits)}
    unknown = sorted(set(limits) - known)
    if unknown:
        raise ValueError(f"python_unit_tests: unknown limits {unknown}; known: {sorted(known)}")
    return SandboxLimits(**limits)


@register_reward("python_unit_tests")
def python_unit_tests(
    completion: str,
    problem: Problem,
    tests: Any = None,
    all_or_nothing: bool = False,
    limits: SandboxLimits | Mapping[str, Any] | None = None,
    fn_name: str | None = None,
) -> Score:
    """Fraction of unit tests the completion's last ```python block passes (1/0 with
    ``all_or_nothing``), with the reason. Tests come from ``tests`` (parameter or per-sample
    field) or else ``problem.answer``, in any format :func:`parse_tests` reads: assert
    snippets; stdin/stdout pairs; APPS/TACO ``{"inputs", "outputs"}`` (function calls with
    ``"fn_name"``); LiveCodeBench test lists (``testtype`` ``"stdin"`` or ``"functional"``, the
    function named by ``fn_name``, LiveCodeBench's metadata ``func_name``, or
    ``{"fn_name": ..., "tests": [...]}``); PrimeIntellect ``verification_info``
    (``{"test_cases": [...]}`` of type ``"stdin_stdout"`` or ``"function_call"``). A function
    call runs the solution's top-level ``fn_name``, else ``Solution().fn_name`` (LeetCode
    style), and must return the expected plain data (see
    :func:`rlvr.rewards.verdict.same_value`). ``limits`` are :class:`SandboxLimits` or a
    mapping of its fields; ``wall_seconds`` is one budget per sample, across all its test runs.

    In a :class:`CombinedReward`, samples run in parallel on its workers; its ``timeout_s``
    must exceed the worst case of one sample: ``wall_seconds`` plus a few seconds of clean-up.
    """
    source = problem.answer if tests is None else tests
    report = run_unit_tests(
        extract_code(completion), source, _limits(limits), all_or_nothing, fn_name
    )
    return Score(report.reward, report.reason, report.events)
