"""Tests of any form judged by a checker process that calls the solution in another process
(rlvr.rewards.remote): HumanEval's check(candidate), loops, helper code, objects whose methods a
test calls; each class of reward hacking scores 0 with a reason, correct solutions score 1."""

from __future__ import annotations

import json

import pytest

from rlvr.data.base import Problem
from rlvr.rewards.code import python_unit_tests, run_unit_tests
from rlvr.sandbox.sandbox import SandboxLimits

LIMITS = {"wall_seconds": 5.0, "cpu_seconds": 3.0}
# The commonest form, and an assignment with a generator over calls. The expected 987654321
# appears only here: no program may find it in its process.
PLAIN = ["assert add(1, 2) == 3", "assert add(987654000, 321) == 987654321"]
TESTS = [
    "x = add(1, 2)\nassert x == 3",
    "assert all(add(987654000, k) == 987654000 + k for k in [321])",
]
HUMANEVAL = [
    "def check(candidate):\n"
    "    assert candidate([1, 2, 3]) == 6\n"
    "    assert candidate([]) == 0\n"
    "    for n in range(30):\n"
    "        assert candidate(list(range(n))) == n * (n - 1) // 2\n"
    "check(total)"
]


def _score(code: str, tests=TESTS):
    completion = f"```python\n{code}\n```"
    problem = Problem("p", "Write add.", json.dumps(tests))
    return python_unit_tests(completion, problem, limits=LIMITS)


def test_humaneval_check_and_loops():
    assert _score("def total(xs):\n    return sum(xs)", HUMANEVAL) == 1.0
    wrong = _score("def total(xs):\n    return len(xs)", HUMANEVAL)
    assert wrong == 0.0 and wrong.reason.startswith("0/1 tests passed; test 0: AssertionError")
    assert _score("def add(a, b):\n    return a + b") == 1.0


def test_objects_of_the_solution_are_driven_through_handles():
    code = (
        "class MinStack:\n    def __init__(self):\n        self.items = []\n"
        "    def push(self, x):\n        self.items.append(x)\n"
        "    def top(self):\n        return self.items[-1]\n"
        "    def get_min(self):\n        return min(self.items)\n"
    )
    tests = [
        "s = MinStack()\nfor v in [5, 2, 7]:\n    s.push(v)\nassert s.top() == 7",
        "assert s.get_min() == 2",
    ]
    assert _score(code, tests) == 1.0
    # the solution's objects compare equal only to themselves
    assert _score(code, ["assert MinStack() == MinStack()"]) == 0.0


def test_exceptions_keep_their_builtin_type_and_exit_is_not_raised():
    code = (
        "def root(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x ** 0.5\n"
        "def leave():\n    raise SystemExit(0)\n"
    )
    raises = "try:\n    root(-1)\nexcept ValueError as err:\n    assert 'negative' in str(err)\nelse:\n    raise AssertionError('no error')"
    assert _score(code, [raises]) == 1.0
    left = _score(code, ["leave()", "assert root(4) == 2"])
    assert left == 0.5 and "the solution raised SystemExit" in left.reason


def test_a_solution_cannot_shadow_builtins_seen_by_the_tests():
    code = "def sorted(x):\n    return [1, 2, 3]\ndef f(x):\n    return x\n"
    score = _score(code, ["assert sorted(f([3, 2, 1])) == [1, 2, 3]", "y = f(0)\nassert y == 1"])
    assert score == 0.5  # the first test uses the real sorted (and passes honestly)
    cheat = _score(code, ["y = f([9])\nassert sorted(y) == [1, 2, 3]"])
    assert cheat == 0.0


ATTACKS = {
    "an object equal to everything": (
        "class Any:\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = object.__hash__\n"
        "def add(a, b):\n    return Any()"
    ),
    "an int subclass equal to everything": (
        "class I(int):\n    def __eq__(self, other):\n        return True\n"
        "def add(a, b):\n    return I(0)"
    ),
    "patched builtins and exit before the tests": (
        "import builtins, os\nbuiltins.AssertionError = type('Never', (Exception,), {})\n"
        "builtins.all = lambda *a: True\n"
        "def add(a, b):\n    return 0\n"
        "os.write(1, b'pass\\n')\nos._exit(0)"
    ),
    "the nonce searched in the caller's frame": (
        "import sys\nnonce = sys._getframe(1).f_locals['nonce']\ndef add(a, b):\n    return 0"
    ),
    "forged result lines and forged answers on every open fd": (
        "import os\n"
        "for fd in range(3, 64):\n"
        '    for line in [b\'\\n\' + b\'0\' * 32 + b\' 0 pass\\n\', b\'{"id": 1, "ok": {"t": "bool", "v": true}}\\n\']:\n'
        "        try:\n            os.write(fd, line)\n        except OSError:\n            pass\n"
        "def add(a, b):\n    return 0"
    ),
    "an atexit handler and a forked child printing passes": (
        "import atexit, os\natexit.register(lambda: print('0 pass'))\n"
        "if os.fork() == 0:\n    print('1 pass'); os._exit(0)\n"
        "def add(a, b):\n    return 0"
    ),
    "expected values searched in frames, gc, files and the channel": (
        "import gc, os, sys\n"
        "def find():\n"
        "    a, b = 987654000, 321\n"
        "    needle = str(a + b)  # built at run time: not a constant of this code\n"
        "    seen = [repr(o) for o in gc.get_objects() if isinstance(o, (dict, list, tuple))]\n"
        "    f = sys._getframe(1)\n"
        "    while f:\n        seen.append(repr(f.f_locals)); f = f.f_back\n"
        "    for root, _, names in os.walk('/tmp'):\n"
        "        seen += [open(os.path.join(root, n), errors='replace').read() for n in names]\n"
        "    return any(needle in s for s in seen)\n"
        "def add(a, b):\n    return a + b if find() else -1"
    ),
    "a harness function patched through gc": (
        "import gc\n"
        "for o in gc.get_objects():\n"
        "    if isinstance(o, dict) and 'encode' in o:\n"
        "        o['encode'] = lambda v: {'t': 'bool', 'v': True}\n"
        "def add(a, b):\n    return None"
    ),
}


@pytest.mark.parametrize("tests", [PLAIN, TESTS], ids=["plain", "forms"])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_reward_hacking_scores_zero(attack, tests):
    score = _score(ATTACKS[attack], tests)
    assert score == 0.0, score.reason
    assert score.reason.startswith("0/2 tests passed; ")


def test_a_wrong_solution_is_shown_with_what_it_returned():
    assert _score("def add(a, b):\n    return a + b", PLAIN) == 1.0
    wrong = _score("def add(a, b):\n    return a - b", PLAIN)
    assert wrong == 0.0 and "test 0: AssertionError: the solution returned -1" in wrong.reason


@pytest.mark.parametrize("tests", [PLAIN, TESTS], ids=["plain", "forms"])
def test_the_expected_value_is_not_in_the_solutions_process(tests):
    """The search above finds nothing, though it runs while the checker waits on the call."""
    score = _score(ATTACKS["expected values searched in frames, gc, files and the channel"], tests)
    assert score == 0.0 and "test 0: AssertionError" in score.reason


def test_a_solution_stuck_in_a_call_fails_every_test():
    """Answers given before a budget ran out do not count."""
    code = (
        "def add(a, b):\n    if a > 100:\n        while True:\n            pass\n    return a + b"
    )
    limits = SandboxLimits(wall_seconds=4.0, cpu_seconds=1.0)
    report = run_unit_tests(code, TESTS, limits)
    assert report.passed == 0 and "the solution's run was killed (cpu_time)" in report.reason
    assert "sandbox/killed/cpu_time" in report.events


def test_a_test_that_hangs_by_itself_keeps_earlier_results():
    """The checker runs out of time in the test's own loop: the solution, idle, is not charged."""
    tests = ["x = add(1, 2)\nassert x == 3", "add(0, 0)\nwhile True:\n    pass"]
    limits = SandboxLimits(wall_seconds=2.0)
    report = run_unit_tests("def add(a, b):\n    return a + b", tests, limits)
    assert report.passed == 1 and "test 1 did not finish: killed (wall_time)" in report.reason
    assert "sandbox/killed/wall_time" not in report.events


def test_comparing_an_object_of_the_solution_is_counted():
    score = _score(ATTACKS["an object equal to everything"])
    assert score == 0.0 and "sandbox/forbidden/non_plain_value" in score.events
    assert "the solution returned <the solution's Any object>" in score.reason
    honest = _score("def add(a, b):\n    return a + b")
    assert honest.events == ("sandbox/samples",)
