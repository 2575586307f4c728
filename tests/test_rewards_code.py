"""The python_unit_tests reward: code extraction, assert and stdin/stdout tests, partial
credit, all-or-nothing, failures with reasons, and parallel scoring in the sandbox."""

from __future__ import annotations

import json
import time

import pytest

from rlvr.data.base import Problem
from rlvr.rewards import CombinedReward
from rlvr.rewards.code import (
    extract_code,
    normalize_output,
    parse_tests,
    python_unit_tests,
    run_unit_tests,
    run_unit_tests_batch,
)
from rlvr.sandbox.sandbox import SandboxLimits

LIMITS = {"wall_seconds": 2.0, "cpu_seconds": 2.0}
ADD_TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]


def _completion(code: str) -> str:
    return f"Let me write it.\n```python\n{code}\n```\nThat should work."


def _problem(tests) -> Problem:
    return Problem("code-1", "Write add(a, b).", json.dumps(tests))


def test_extract_code_takes_the_last_python_block():
    text = "```python\nx = 1\n```\nbetter:\n```py\nx = 2\n```\n```text\nnot code\n```"
    assert extract_code(text) == "x = 2\n"
    assert extract_code("```\ny = 3\n```") == "y = 3\n"
    assert extract_code("no code") is None
    assert extract_code("```python\nunclosed = True\n") is None


def test_parse_tests_formats():
    assert parse_tests(ADD_TESTS).asserts == tuple(ADD_TESTS)
    apps = parse_tests({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]})
    assert [c.output for c in apps.io] == ["3\n", "7\n"]
    mixed = parse_tests(json.dumps({"tests": ["assert True", {"input": "x", "output": "y"}]}))
    assert mixed.total == 2
    assert parse_tests("assert f(1) == 1\nassert f(2) == 2").asserts == (
        "assert f(1) == 1\nassert f(2) == 2",
    )
    with pytest.raises(ValueError, match="empty"):
        parse_tests([])
    with pytest.raises(ValueError, match=r"tests\[0\]"):
        parse_tests([3])
    assert normalize_output("a  \r\nb\n\n") == "a\nb"


def test_correct_solution_scores_one():
    score = python_unit_tests(
        _completion("def add(a, b):\n    return a + b"), _problem(ADD_TESTS), limits=LIMITS
    )
    assert score == 1.0 and score.reason == "3/3 tests passed"


def test_partial_credit_and_all_or_nothing():
    wrong = _completion("def add(a, b):\n    return a + b if a > 0 else 99")
    score = python_unit_tests(wrong, _problem(ADD_TESTS), limits=LIMITS)
    assert score == pytest.approx(2 / 3)
    assert "2/3 tests passed" in score.reason and "test 1: AssertionError" in score.reason
    strict = python_unit_tests(wrong, _problem(ADD_TESTS), all_or_nothing=True, limits=LIMITS)
    assert strict == 0.0


def test_stdin_stdout_tests():
    tests = {"inputs": ["1 2\n", "5 7\n", "0 0\n"], "outputs": ["3\n", "12\n", "0\n"]}
    good = _completion("a, b = map(int, input().split())\nprint(a + b)")
    assert python_unit_tests(good, _problem(tests), limits=LIMITS) == 1.0
    off = _completion("a, b = map(int, input().split())\nprint(a + b + (a == 5))")
    score = python_unit_tests(off, _problem(tests), limits=LIMITS)
    assert score == pytest.approx(2 / 3) and "case 1: expected '12', got '13'" in score.reason


def test_failures_score_zero_with_a_reason():
    problem = _problem(ADD_TESTS)
    missing = python_unit_tests("I don't know how.", problem, limits=LIMITS)
    assert missing == 0.0 and "no ```python code block" in missing.reason
    broken = python_unit_tests(_completion("def add(a, b)\n    return a + b"), problem)
    assert broken == 0.0 and "solution: SyntaxError" in broken.reason
    exits = python_unit_tests(_completion("import sys\nsys.exit(0)"), problem, limits=LIMITS)
    assert exits == 0.0 and "SystemExit" in exits.reason


def test_hanging_solution_times_out_with_partial_credit_kept():
    tests = ["assert add(1, 2) == 3", "add(0, 0)\nwhile True: pass", "assert add(2, 2) == 4"]
    code = _completion("def add(a, b):\n    return a + b")
    start = time.monotonic()
    score = python_unit_tests(code, _problem(tests), limits={"wall_seconds": 1.5})
    assert time.monotonic() - start < 30  # the wall limit, not an endless loop
    assert score == pytest.approx(1 / 3)
    assert "test 1 did not finish: killed (wall_time)" in score.reason


def test_printed_fake_results_are_not_counted():
    forged = _completion(
        "for i in range(3):\n    print(f'{i} pass')\n    print(f'deadbeef {i} pass')\n"
        "import os\nos._exit(0)"
    )
    assert python_unit_tests(forged, _problem(ADD_TESTS), limits=LIMITS) == 0.0


def test_tests_from_a_field_and_limits_validation():
    code = _completion("def add(a, b):\n    return a + b")
    assert python_unit_tests(code, Problem("x", "q", "unused"), tests=ADD_TESTS[:1]) == 1.0
    with pytest.raises(ValueError, match="unknown limits"):
        python_unit_tests(code, _problem(ADD_TESTS), limits={"wall": 1})


def test_batch_runs_in_parallel():
    codes = ["def add(a, b):\n    return a + b", "def add(a, b):\n    return a - b", None] * 2
    # a generous wall limit: 4 sandboxes at once beside the suite's other workers on 2 cores
    # once took more than 3 s for a right program (reward 0); the outcomes are what is tested
    reports = run_unit_tests_batch(
        codes, [ADD_TESTS] * len(codes), SandboxLimits(wall_seconds=30.0), max_workers=4
    )
    rewards = [r.reward for r in reports]
    assert rewards == pytest.approx([1.0, 0.0, 0.0] * 2), [r.reason for r in reports]
    single = run_unit_tests(codes[0], ADD_TESTS)
    assert single.passed == single.total == 3


def test_in_combined_reward_with_format():
    good = "<think>easy</think><answer>\n" + _completion("def add(a, b):\n    return a + b")
    good += "\n</answer>"
    bad = _completion("def add(a, b):\n    return a * b")
    with CombinedReward(
        [
            ("python_unit_tests", 1.0, {"limits": LIMITS}),
            ("format", 0.1, {"tags": ["think", "answer"]}),
        ],
        on_error="raise",
        timeout_s=30,
    ) as reward:
        out = reward([good, bad, good, bad], [_problem(ADD_TESTS)] * 4)
    assert out.components["python_unit_tests"] == pytest.approx([1.0, 0.0, 1.0, 0.0])
    assert out.total == pytest.approx([1.1, 0.0, 1.1, 0.0])
    assert out.reasons["python_unit_tests"][1].startswith("0/3 tests passed")
