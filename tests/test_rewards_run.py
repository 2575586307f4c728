"""The run's reward (build_reward): the task's verifier, a user function or weighted terms, all
with the same timeout, value checks and start-up probe; user modules import from the current
directory."""

from __future__ import annotations

import math
import sys
import threading
import time

import numpy as np
import pytest

from rlvr.data.arithmetic import ArithmeticTask
from rlvr.data.base import Problem
from rlvr.errors import RlvrError
from rlvr.rewards import (
    CombinedReward,
    RewardConfigError,
    RewardError,
    build_reward,
    load_function,
)
from rlvr.rewards.structure import format_reward

SIGNATURE = "f(completion: str, problem: rlvr.data.Problem, **fields) -> float"


@pytest.fixture(scope="module")
def task() -> ArithmeticTask:
    return ArithmeticTask(level=1, n_eval=4)


def _batch(task: ArithmeticTask) -> tuple[list[str], list[Problem]]:
    """Four completions of two problems: right, wrong, right in tags, no answer."""
    p0, p1 = task.train_problem(0), task.train_problem(1)
    texts = [
        f"Answer: {p0.answer}",
        f"Answer: {int(p0.answer) + 1}",
        f"<think>easy</think><answer>{p1.answer}</answer>",
        "no idea",
    ]
    return texts, [p0, p0, p1, p1]


# --- the three sources -------------------------------------------------------------------------


def test_default_is_the_task_verifier(task):
    texts, problems = _batch(task)
    with build_reward(task) as reward:
        out = reward(texts, problems, num_tokens=[3, 3, 9, 2])
    assert out.total == [1.0, 0.0, 1.0, 0.0]
    assert out.total == [task.score(t, p) for t, p in zip(texts, problems, strict=True)]
    assert out.metrics() == {"reward/task/mean": 0.5, "reward/task/errors": 0.0, "reward/errors": 0}


def test_task_term_with_shaping_on_top(task):
    texts, problems = _batch(task)
    terms = [{"name": "task"}, {"name": "format", "weight": 0.1}]
    with build_reward(task, terms=terms) as reward:
        out = reward(texts, problems)
    assert out.components["task"] == [
        task.score(t, p) for t, p in zip(texts, problems, strict=True)
    ]
    assert out.components["format"] == [
        format_reward(t, p) for t, p in zip(texts, problems, strict=True)
    ]
    assert out.components["format"] == [1.0, 1.0, 0.0, 0.0]  # an "Answer: ..." last line
    assert out.total == [1.1, 0.1, 1.0, 0.0]
    with build_reward(task, terms=[("verifier", 2.0)]) as alias:
        assert alias(texts, problems).total == [2.0, 0.0, 2.0, 0.0]


def test_task_term_needs_the_task():
    with pytest.raises(RewardConfigError, match="'task' is the task's own verifier"):
        CombinedReward(["task"])


def test_task_verifier_runs_inline_without_pickling_the_task(task):
    class UnpicklableTask(ArithmeticTask):
        lock = threading.Lock()  # a process pool could not pickle this task's verifier

    local = UnpicklableTask(level=1, n_eval=4)
    texts, problems = _batch(local)
    with build_reward(local, executor="process") as reward:
        assert reward(texts, problems).total == [1.0, 0.0, 1.0, 0.0]


def test_function_and_terms_are_exclusive(task):
    with pytest.raises(RewardConfigError, match="not both"):
        build_reward(task, "rewards_for_tests:letter_fraction", [("format", 1.0)])


def test_module_function_and_callable(task):
    texts, problems = _batch(task)
    with build_reward(task, "rewards_for_tests:letter_fraction") as reward:
        out = reward(texts, problems)
    assert out.components["rewards_for_tests:letter_fraction"][3] == pytest.approx(6 / 7)
    with build_reward(task, lambda c, p: float(c.startswith("Answer"))) as reward:
        out = reward(texts, problems)
    assert out.components == {"function": [1.0, 1.0, 0.0, 0.0]}

    def shorter_is_better(completion: str, problem: Problem, num_tokens: int) -> float:
        return 1.0 / num_tokens

    with build_reward(task, shorter_is_better) as reward:
        out = reward(texts, problems, num_tokens=[1, 2, 4, 8])
    assert out.components["shorter_is_better"] == [1.0, 0.5, 0.25, 0.125]


# --- timeouts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "function",
    ["rewards_for_tests:hangs_on_wait", lambda c, p: time.sleep(60) if "wait" in c else 1],
)
def test_hanging_user_function_times_out(task, function):
    problems = [task.train_problem(0)] * 3
    with build_reward(task, function, timeout_s=0.5) as reward:
        start = time.monotonic()
        with pytest.raises(RewardError) as info:
            reward(["ok", "please wait", "ok"], problems)
        assert time.monotonic() - start < 20  # the time limit, not the 60-s hang
    assert info.value.index == 1 and info.value.problem_id == problems[0].id
    assert "timed out after 0.5s" in str(info.value)
    with build_reward(task, function, on_error="zero", timeout_s=0.5) as reward:
        start = time.monotonic()
        out = reward(["wait", "ok"], problems[:2])
        assert time.monotonic() - start < 20
    assert out.total == [0.0, 1.0]
    assert out.metrics()["reward/errors"] == 1.0


def test_timed_out_calls_piling_up_in_threads_stop_the_run(task, monkeypatch):
    import rlvr.rewards.executor as executor

    monkeypatch.setattr(executor, "MAX_ABANDONED_THREADS", 3)
    problems = [task.train_problem(0)] * 2
    with build_reward(task, "rewards_for_tests:hangs_on_wait", on_error="zero", timeout_s=0.2) as r:
        r(["wait", "wait"], problems)  # 2 abandoned: still scored 0 each
        with pytest.raises(RewardError, match="more than 3 calls timed out"):
            r(["wait", "wait"], problems)


# --- value checks --------------------------------------------------------------------------------


def test_string_reward_is_rejected_naming_sample_problem_and_type(task):
    texts, problems = _batch(task)
    with build_reward(task, "rewards_for_tests:answer_as_string") as reward:
        with pytest.raises(RewardError) as info:
            reward(texts, problems)
    err = info.value
    assert isinstance(err, RlvrError)
    assert err.reward == "rewards_for_tests:answer_as_string" and err.index == 0
    assert err.problem_id == problems[0].id
    message = str(err)
    assert f"problem {problems[0].id!r}" in message and "sample 0" in message
    assert "returned str '1.0', expected a real number" in message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0.5", "returned str '0.5'"),
        (None, "returned NoneType None"),
        ([0.5], "returned list [0.5]"),
        (np.array(0.5), "returned ndarray"),
        (math.nan, "non-finite nan"),
        (-math.inf, "non-finite -inf"),
        (1e30, "returned 1e+30, beyond the bound max_abs=1e+06"),
        (-2e6, "returned -2e+06, beyond the bound max_abs=1e+06"),
    ],
)
def test_bad_values_are_errors(task, value, expected):
    spec = {"name": "rewards_for_tests:echo_value", "params": {"value": value}}
    problems = [task.train_problem(0), task.train_problem(1), task.train_problem(2)]
    with build_reward(task, terms=[spec]) as reward:
        with pytest.raises(RewardError) as info:
            reward(["a", "echo", "c"], problems)
    message = str(info.value)
    assert f"sample 1 (problem {problems[1].id!r}, completion starts 'echo')" in message
    assert expected in message
    with build_reward(task, terms=[spec], on_error="zero") as reward:
        out = reward(["a", "echo", "echo"], problems)
    assert out.total == [0.5, 0.0, 0.0] and out.errors == {"rewards_for_tests:echo_value": 2}


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, 1.0), (False, 0.0), (np.float32(0.25), 0.25), (np.int64(3), 3.0), (np.bool_(1), 1.0)],
)
def test_numbers_bools_and_numpy_scalars_are_accepted(task, value, expected):
    spec = {"name": "rewards_for_tests:echo_value", "params": {"value": value}}
    with build_reward(task, terms=[spec]) as reward:
        out = reward(["echo"], [task.train_problem(0)])
    assert out.total == [expected] and type(out.total[0]) is float


def test_max_abs_is_a_keyword(task):
    spec = {"name": "rewards_for_tests:echo_value", "params": {"value": 1e30}}
    with build_reward(task, terms=[spec], max_abs=1e31) as reward:
        assert reward(["echo"], [task.train_problem(0)]).total == [1e30]


def test_group_reward_length_and_arrays(task):
    problems = [task.train_problem(0)] * 3
    spec = {"name": "test_run_group_echo"}
    with build_reward(task, terms=[spec]) as reward:  # a numpy array of ones is accepted
        assert reward(["a", "b", "c"], problems).total == [1.0, 1.0, 1.0]
    spec = {"name": "rewards_for_tests:group_echo", "params": {"values": [1.0, 0.0]}}
    with build_reward(task, terms=[spec]) as reward:
        with pytest.raises(RewardError, match="returned 2 values for a group of 3"):
            reward(["a", "b", "c"], problems)
    spec = {"name": "test_run_group_echo", "params": {"values": "0.5"}}
    with build_reward(task, terms=[spec]) as reward:
        with pytest.raises(RewardError, match="group reward returned str '0.5'"):
            reward(["a", "b", "c"], problems)


# --- the start-up probe --------------------------------------------------------------------------


def test_check_of_good_rewards_returns_each_value(task):
    problem = task.train_problem(0)
    with build_reward(task) as reward:
        assert reward.check(problem) == {"task": 1.0}
    terms = [("task", 1.0), ("format", 0.1), ("rewards_for_tests:counts_tokens", 1.0)]
    with build_reward(task, terms=terms) as reward:
        assert reward.check(problem, text="no answer", num_tokens=4) == {
            "task": 0.0,
            "format": 0.0,
            "rewards_for_tests:counts_tokens": 0.25,
        }
    with build_reward(task, terms=["test_run_group_echo"]) as reward:
        assert reward.check(problem) == {"test_run_group_echo": 1.0}


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        ("rewards_for_tests:takes_one_argument", r"cannot be called as .*takes_one_argument\("),
        ("rewards_for_tests:needs_unknown_field", r"needs the field\(s\) \['difficulty'\]"),
        ("rewards_for_tests:answer_as_string", "returned str '1.0', expected a real number"),
        ("rewards_for_tests:fails_on_answers", "KeyError: 'answer'"),
        (lambda c, p: None, "returned NoneType None"),
    ],
)
def test_check_names_the_function_call_and_signature(task, function, expected):
    problem = task.train_problem(0)
    with build_reward(task, function, on_error="zero") as reward:  # the probe always raises
        with pytest.raises(RewardConfigError, match=expected) as info:
            reward.check(problem)
    message = str(info.value)
    label = function if isinstance(function, str) else "function"
    assert f"reward {label!r}" in message
    assert SIGNATURE in message and "kind='group'" in message  # both documented signatures
    if "needs the field" not in message:  # the call it was given
        assert f"{label}('Answer: {problem.answer}', <Problem {problem.id!r}>" in message


def test_check_times_out(task):
    with build_reward(task, "rewards_for_tests:hangs_on_wait", timeout_s=0.5) as reward:
        start = time.monotonic()
        with pytest.raises(RewardConfigError, match="timed out after 0.5s"):
            reward.check(task.train_problem(0), text="wait for it")
        assert time.monotonic() - start < 20  # the time limit, not the 60-s hang


# --- importing user modules ----------------------------------------------------------------------


def test_current_directory_is_importable(task, tmp_path, monkeypatch):
    (tmp_path / "cwd_user_reward.py").write_text(
        "def score(completion, problem):\n    return float(completion.endswith(problem.answer))\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cwd_user_reward", raising=False)
    problem = task.train_problem(0)
    with build_reward(task, "cwd_user_reward:score") as reward:
        assert reward([f"Answer: {problem.answer}", "x"], [problem] * 2).total == [1.0, 0.0]
    assert sys.path.count(str(tmp_path)) == 1
    load_function("cwd_user_reward:score")
    assert sys.path.count(str(tmp_path)) == 1  # added once
    monkeypatch.delitem(sys.modules, "cwd_user_reward")


def test_import_errors_name_module_and_cause(tmp_path, monkeypatch):
    (tmp_path / "broken_user_reward.py").write_text("import not_a_real_package_xyz\n")
    (tmp_path / "syntax_user_reward.py").write_text("def score(:\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(RewardConfigError, match="no module named 'nope_reward'") as info:
        load_function("nope_reward:score")
    assert f"current directory {tmp_path} (which is on sys.path)" in str(info.value)
    with pytest.raises(RewardConfigError, match="importing module 'broken_user_reward' failed"):
        load_function("broken_user_reward:score")
    with pytest.raises(RewardConfigError, match="raised SyntaxError"):
        load_function("syntax_user_reward:score")
    with pytest.raises(RewardConfigError, match="has no callable 'nope'"):
        load_function("rewards_for_tests:nope")
    with pytest.raises(RewardConfigError, match="expected 'module:function'"):
        load_function("rewards_for_tests")
