"""The code reward never raises because of what a program did (issue 13, item 4).

Each adversarial program here (written for its class: signals, garbage on the result channel,
huge file trees, time-budget exhaustion, hung grandchildren) must score 0 (never 1) with a
reason that says what happened, raise nothing, and leave no process, thread or work directory
behind.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time

import pytest
from test_sandbox_attacks import descendants, leaked_sandbox_processes, recorded_workdirs

from rlvr.data.base import Problem
from rlvr.rewards import CombinedReward
from rlvr.rewards.code import BUDGET_SPENT, parse_harness_output, python_unit_tests
from rlvr.sandbox import sandbox
from rlvr.sandbox.sandbox import remove_tree, run_python

LIMITS = {"wall_seconds": 4.0, "cpu_seconds": 2.0, "memory_bytes": 256 << 20}
ADD_TESTS = ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]


def _completion(code: str) -> str:
    return f"```python\n{code}\n```"


def _problem(tests) -> Problem:
    return Problem("adversarial", "Write add(a, b).", json.dumps(tests))


@pytest.fixture
def nothing_left():
    """After the test: no process of its runs (new descendant of this process, or process of a
    sandbox uid no run holds), no new thread, no work directory of its runs. Runs of other
    processes on the machine (the other pytest-xdist worker's) are not counted."""
    threads, before = set(threading.enumerate()), set(descendants(os.getpid()))
    with recorded_workdirs() as workdirs:
        yield
    assert [p for p in descendants(os.getpid()) if p not in before] == []
    assert leaked_sandbox_processes() == []
    assert [p for p in workdirs if os.path.lexists(p)] == []
    assert [t.name for t in threading.enumerate() if t not in threads] == []


# --- 1. signals of any number -----------------------------------------------------------------

SIGNALS = [
    pytest.param(signal.SIGRTMIN + 3, str(signal.SIGRTMIN + 3), id="SIGRTMIN+3"),
    pytest.param(signal.SIGRTMAX, "SIGRTMAX", id="SIGRTMAX"),
    pytest.param(signal.SIGUSR2, "SIGUSR2", id="SIGUSR2"),
]


@pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "fallback"])
@pytest.mark.parametrize(("signum", "name"), SIGNALS)
def test_death_by_any_signal_is_a_result(signum, name, namespaces, nothing_left):
    result = run_python(f"import os\nos.kill(os.getpid(), {int(signum)})", namespaces=namespaces)
    assert result.returncode == -signum and not result.ok
    assert result.killed_reason == f"signal:{name}"


@pytest.mark.parametrize("kill", ["os.kill(os.getpid(), {n})", "os.killpg(0, {n})"])
def test_a_solution_killing_itself_with_a_realtime_signal_scores_zero(kill, nothing_left):
    signum = int(signal.SIGRTMIN) + 5
    code = _completion(f"import os\n{kill.format(n=signum)}\ndef add(a, b):\n    return a + b")
    for tests in (ADD_TESTS, [{"input": "1 2\n", "output": "3\n"}]):
        score = python_unit_tests(code, _problem(tests), limits=LIMITS)
        assert score == 0.0
        assert f"signal:{signum}" in score.reason or "supervisor_died" in score.reason


# --- 2. garbage on the result channel ---------------------------------------------------------

NONCE = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    "line",
    [
        f"{NONCE} \u0663 pass",  # Arabic-Indic three
        f"{NONCE} \uff11 pass",  # fullwidth one
        f"{NONCE} {'9' * 5000} pass",  # past int()'s digit limit
        f"{NONCE} 99999999999999999999 pass",
        f"{NONCE} 3 pass",  # one past the last of 3 tests
        f"{NONCE} 01 pass",  # leading zero
        f"{NONCE} -1 pass",
        f"{NONCE} 1 pass extra",
        f"{NONCE}  1 pass",
        f"{NONCE[:-1]}0 1 pass",  # another nonce
        f"x{NONCE} 1 pass",
        f"{NONCE} 1 PASS",
    ],
)
def test_malformed_pass_lines_give_no_credit(line):
    assert parse_harness_output(f"\n{line}\n", NONCE, 3) == (frozenset(), "")


def test_malformed_fail_lines_are_ignored_and_never_raise():
    junk = bytes(range(256)).decode("latin-1")
    stdout = "\n".join(
        [
            f"{NONCE} 0 fail {{not json",
            f"{NONCE} 0 fail " + "[" * 100_000,  # would overflow a recursive decoder
            f'{NONCE} 0 fail "unterminated',
            f"{NONCE} 0 fail 12",  # JSON, but not a string
            f"{NONCE} load fail {junk}",
            junk * 10,
            f"{NONCE} 2 pass",
        ]
    )
    assert parse_harness_output(stdout, NONCE, 3) == (frozenset({2}), "")


def test_a_test_with_a_pass_and_a_fail_line_failed():
    stdout = f'{NONCE} 0 pass\n{NONCE} 0 fail "AssertionError: \\u0000\\ud800"\n{NONCE} 1 pass\n'
    passed, first = parse_harness_output(stdout, NONCE, 2)
    assert passed == frozenset({1})
    assert first == "test 0: AssertionError: ??"  # control and surrogate characters shown as ?


def test_garbage_on_every_channel_scores_zero(nothing_left):
    """The solution writes malformed lines (non-ASCII digits, huge numbers, JSON nested past
    any recursion limit, a fake answer with the wrong id) and binary junk on every fd it holds,
    the pipe to the checker included, then exits before any test runs."""
    forger = (
        "import os\n"
        "lines = ['\\u0663 pass', '0' * 5000 + '1 pass', '{\"id\": 7, \"ok\": 1}',\n"
        "         '[' * 50000, '{\"names\": 5}', '\\uff10 pass']\n"
        "for fd in range(1, 64):\n"
        "    for line in lines:\n"
        "        try:\n"
        "            os.write(fd, f'\\n{line}\\n'.encode())\n"
        "            os.write(fd, bytes(range(256)) * 64)\n"
        "        except OSError:\n"
        "            pass\n"
        "os._exit(0)\n"
    )
    score = python_unit_tests(_completion(forger), _problem(ADD_TESTS), limits=LIMITS)
    assert score == 0.0
    assert score.reason.startswith("0/2 tests passed; ")


def test_binary_junk_instead_of_the_answer_scores_zero(nothing_left):
    junk = _completion(
        "import os\nos.write(1, bytes(range(256)))\nos.write(2, b'\\xff\\x00\\x1b[2J')"
    )
    score = python_unit_tests(junk, _problem([{"input": "", "output": "3\n"}]), limits=LIMITS)
    assert score == 0.0
    assert score.reason.startswith("0/1 tests passed; case 0: expected '3', got '?")


# --- 3. deep and wide file trees --------------------------------------------------------------

TREE_BUILDER = """
import os
print(os.getcwd(), flush=True)
for i in range(500):
    open(f"wide{i}", "w").close()
os.mkdir("locked")
open("locked/f", "w").close()
os.chmod("locked", 0)
for depth in range(5000):
    os.mkdir("d")
    os.chdir("d")
    if depth % 1000 == 0:
        open("f", "w").close()
        os.chmod("..", 0o500)  # not writable: its entries cannot be deleted as is
"""


@pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "fallback"])
def test_a_deep_wide_tree_without_permissions_is_removed(namespaces, nothing_left):
    # a wall limit far past the CPU limit: on a busy machine (a parallel test worker) 2 s of CPU
    # take more than LIMITS' 4 s of wall time
    limits = sandbox.SandboxLimits(**{**LIMITS, "wall_seconds": 20.0}, max_files=20000)
    result = run_python(TREE_BUILDER, limits=limits, namespaces=namespaces)
    # the fallback's audit hook resolves every path, so there the tree may stop at the CPU limit
    assert result.ok or result.killed_reason == "cpu_time", result.stderr
    workdir = result.stdout.split()[0]
    if "tmpfs" not in result.isolation:  # else the tree was in a tmpfs gone with its namespace
        assert not os.path.lexists(workdir)


def test_a_solution_building_a_deep_tree_scores_zero(nothing_left):
    code = _completion(TREE_BUILDER.replace("print(os.getcwd(), flush=True)", "") + "add = 0")
    score = python_unit_tests(code, _problem(ADD_TESTS), limits={**LIMITS, "max_files": 20000})
    assert score == 0.0 and "TypeError: 'int' object is not callable" in score.reason


def test_remove_tree_deeper_than_the_recursion_limit_and_path_max(tmp_path):
    root = tmp_path / "tree"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(3000):  # about 12 KB of path, past PATH_MAX
        os.mkdir("dir", dir_fd=fd)
        child = os.open("dir", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(os.open("file", os.O_CREAT | os.O_WRONLY, 0, dir_fd=fd))
    os.close(fd)
    os.chmod(root, 0)
    remove_tree(root)
    assert not os.path.lexists(root)


def test_remove_tree_falls_back_to_rm_and_never_raises(tmp_path, monkeypatch, caplog):
    def fail(_path):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(sandbox, "_remove_iteratively", fail)
    removable = tmp_path / "a"
    (removable / "b").mkdir(parents=True)
    remove_tree(removable)
    assert not removable.exists()

    def no_rm(*_args, **_kwargs):
        raise OSError("rm: not found")

    monkeypatch.setattr(sandbox.subprocess, "run", no_rm)
    stuck = tmp_path / "stuck"
    stuck.mkdir()
    with caplog.at_level(logging.WARNING, logger="rlvr.sandbox.sandbox"):
        remove_tree(stuck)  # nothing can remove it: logged, not raised
    assert f"could not remove the workdir {stuck}" in caplog.text


# --- 4. one wall-time budget per sample -------------------------------------------------------

SLEEPER = _completion("import time\ntime.sleep(3)\nprint(int(input()) * 2)")


def test_sleeping_cases_share_one_budget_per_sample(nothing_left):
    cases = [{"input": f"{k}\n", "output": f"{2 * k}\n"} for k in range(8)]
    start = time.monotonic()
    score = python_unit_tests(SLEEPER, _problem(cases), limits={**LIMITS, "wall_seconds": 1.0})
    assert time.monotonic() - start < 7.0  # not 8 x 1 s back to back
    assert score == 0.0
    assert score.reason == (
        f"0/8 tests passed; case 0: killed (wall_time); cases 1-7 not run: {BUDGET_SPENT}"
    )


def test_budget_is_shared_with_the_assert_run_and_partial_credit_is_kept(nothing_left):
    code = _completion("import time\ntime.sleep(0.3)\nprint(int(input()) * 2)")
    cases = [{"input": f"{k}\n", "output": f"{2 * k}\n"} for k in range(30)]
    start = time.monotonic()
    score = python_unit_tests(code, _problem(cases), limits={**LIMITS, "wall_seconds": 1.5})
    assert time.monotonic() - start < 8.0  # not 30 x 0.3 s
    assert 0.0 < score < 1.0  # the first cases pass, the rest are cut
    assert score.reason.endswith(f"not run: {BUDGET_SPENT}")

    hanging = _problem(["while True: pass", {"input": "1\n", "output": "2\n"}])
    code = _completion("def add(a, b):\n    return a + b")
    start = time.monotonic()
    score = python_unit_tests(code, hanging, limits={**LIMITS, "wall_seconds": 1.0})
    assert time.monotonic() - start < 10
    assert score == 0.0
    assert score.reason == (
        f"0/2 tests passed; test 0 did not finish: killed (wall_time); "
        f"cases 0-0 not run: {BUDGET_SPENT}"
    )


def test_in_combined_reward_the_sample_ends_before_its_timeout(nothing_left):
    cases = [{"input": f"{k}\n", "output": f"{2 * k}\n"} for k in range(20)]
    with CombinedReward(
        [("python_unit_tests", 1.0, {"limits": {**LIMITS, "wall_seconds": 1.0}})],
        on_error="raise",
        timeout_s=6.0,
    ) as reward:
        out = reward([SLEEPER, SLEEPER], [_problem(cases)] * 2)
    assert out.total == [0.0, 0.0]
    assert all(BUDGET_SPENT in r for r in out.reasons["python_unit_tests"])


# --- 5. hung grandchildren --------------------------------------------------------------------

GRANDCHILD = """
import os, signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        time.sleep(600)
    os._exit(0)
print("left it running", flush=True)
"""


@pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "fallback"])
def test_a_grandchild_ignoring_sigterm_is_killed_and_reaped(namespaces, nothing_left):
    start = time.monotonic()
    result = run_python(GRANDCHILD, namespaces=namespaces)
    assert time.monotonic() - start < 30  # not the grandchild's 600 s
    assert result.ok and result.stdout == "left it running\n"


def test_a_solution_waiting_on_a_hung_grandchild_scores_zero(nothing_left):
    code = _completion(GRANDCHILD + "os.wait()\ntime.sleep(600)\ndef add(a, b):\n    return a + b")
    score = python_unit_tests(code, _problem(ADD_TESTS), limits={**LIMITS, "wall_seconds": 1.5})
    assert score == 0.0
    assert (
        score.reason
        == "0/2 tests passed; tests 0-1 failed: the solution's run was killed (wall_time)"
    )
