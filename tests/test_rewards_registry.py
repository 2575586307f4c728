"""The reward registry and CombinedReward: weights, per-component logging, fields, group
rewards, the on_error policy and per-call timeouts (thread and process workers)."""

from __future__ import annotations

import math
import time

import pytest

from rlvr.data.base import Problem
from rlvr.errors import RlvrError
from rlvr.rewards import (
    CombinedReward,
    RewardConfigError,
    RewardError,
    RewardSpec,
    Score,
    available_rewards,
    get_reward,
    register_reward,
)

# --- rewards used by these tests (module level: process workers import them by name) ------


@register_reward("test_length")
def length_reward(completion: str, problem: Problem, scale: float = 1.0) -> float:
    return scale * len(completion)


@register_reward("test_boom")
def boom_reward(completion: str, problem: Problem) -> float:
    if "boom" in completion:
        raise ZeroDivisionError("exploded")
    return 1.0


@register_reward("test_nan")
def nan_reward(completion: str, problem: Problem) -> float:
    return math.nan if completion == "nan" else 0.5


@register_reward("test_sleepy")
def sleepy_reward(completion: str, problem: Problem) -> float:
    if completion.startswith("slow"):
        time.sleep(30)
    return 1.0


@register_reward("test_spin")
def spin_reward(completion: str, problem: Problem) -> float:
    while completion == "spin":  # a hang that holds a CPU: only a process can be stopped
        pass
    return 1.0


@register_reward("test_tokens")
def tokens_reward(completion: str, problem: Problem, num_tokens: int) -> float:
    return float(num_tokens)


@register_reward("test_majority", kind="group")
def majority_reward(completions: list[str], problem: Problem) -> list[float]:
    """TTRL-style label-free reward: 1 for agreeing with the group's most common answer."""
    top = max(set(completions), key=completions.count)
    return [1.0 if c == top else 0.0 for c in completions]


@register_reward("test_bad_group", kind="group")
def bad_group_reward(completions: list[str], problem: Problem) -> list[float]:
    return [1.0]


def _problems(n: int, pid: str = "p0") -> list[Problem]:
    return [Problem(pid, "question", "42")] * n


# --- registry -------------------------------------------------------------------------------


def test_builtins_are_registered():
    names = available_rewards()
    for name in [
        "math",
        "numeric",
        "exact_match",
        "multiple_choice",
        "format",
        "json_schema",
        "bleu",
        "chrf",
        "overlong",
        "length_truncation",
        "python_unit_tests",
    ]:
        assert name in names
    assert get_reward("math").kind == "sample"
    assert get_reward("test_majority").kind == "group"


def test_unknown_reward_lists_known_ones():
    with pytest.raises(ValueError, match="unknown reward 'nope'.*exact_match"):
        get_reward("nope")


def test_config_mistakes_are_user_facing_errors():
    for make in (
        lambda: get_reward("nope"),
        lambda: CombinedReward([("test_length", 1.0, {"scael": 2})]),
        lambda: CombinedReward([("test_length", math.inf)]),
        lambda: RewardSpec.coerce({"name": "bleu", "wieght": 3}),
    ):
        with pytest.raises(RewardConfigError) as info:
            make()
        assert isinstance(info.value, RlvrError) and isinstance(info.value, ValueError)


def test_task_names_are_reserved():
    assert "task" in str(pytest.raises(ValueError, get_reward, "nope").value)
    for name in ("task", "verifier"):
        with pytest.raises(ValueError, match="reserved for the task's own verifier"):
            register_reward(name)


def test_register_conflict_and_bad_kind():
    with pytest.raises(ValueError, match="already registered"):
        register_reward("test_length")(lambda c, p: 0.0)
    with pytest.raises(ValueError, match="kind must be"):
        register_reward("x", kind="batch")


def test_module_function_spec_keeps_registered_kind():
    assert get_reward("test_rewards_registry:majority_reward").kind == "group"
    entry = get_reward("rewards_for_tests:letter_fraction")
    assert entry.kind == "sample"


def test_spec_coercion():
    assert RewardSpec.coerce("math") == RewardSpec("math")
    assert RewardSpec.coerce(("math", 2)) == RewardSpec("math", 2.0)
    assert RewardSpec.coerce(("format", 0.5, {"strict": False})).params == {"strict": False}
    assert RewardSpec.coerce({"name": "bleu", "weight": 3}).weight == 3.0
    with pytest.raises(ValueError, match="expected keys"):
        RewardSpec.coerce({"name": "bleu", "wieght": 3})
    assert RewardSpec.coerce(length_reward) == RewardSpec(length_reward)
    assert RewardSpec.coerce((length_reward, 2.0)) == RewardSpec(length_reward, 2.0)


def test_callable_terms_are_labelled_by_name_and_keep_their_kind():
    with CombinedReward([length_reward, (majority_reward, 2.0), lambda c, p: 1.0]) as reward:
        out = reward(["a", "a", "bcd"], _problems(3))
    assert out.components == {
        "test_length": [1.0, 1.0, 3.0],  # registered: its registered name and kind
        "test_majority": [1.0, 1.0, 0.0],
        "function": [1.0, 1.0, 1.0],  # a lambda
    }
    assert out.total == [4.0, 4.0, 4.0]


# --- combination ----------------------------------------------------------------------------


def test_weighted_total_and_components():
    completions = ["ab", "abcd", "<think>x</think><answer>y</answer>"]
    terms = [("test_length", 0.5, {"scale": 2.0}), ("format", 3.0, {"tags": ["think", "answer"]})]
    with CombinedReward(terms) as reward:
        out = reward(completions, _problems(3))
    assert out.components["test_length"] == [4.0, 8.0, 2.0 * len(completions[2])]
    assert out.components["format"] == [0.0, 0.0, 1.0]
    assert out.total == [2.0, 4.0, 0.5 * 2.0 * len(completions[2]) + 3.0]
    assert out.weights == {"test_length": 0.5, "format": 3.0}
    assert out.reasons["format"][2] == "tags in order"
    metrics = out.metrics()
    assert metrics["reward/format/mean"] == pytest.approx(1 / 3)
    assert metrics["reward/errors"] == 0.0


def test_same_reward_twice_needs_labels():
    with pytest.raises(ValueError, match="appears twice"):
        CombinedReward([("test_length", 1.0), ("test_length", 2.0)])
    specs = [RewardSpec("test_length", 1.0), RewardSpec("test_length", 2.0, label="len2")]
    with CombinedReward(specs) as reward:
        out = reward(["abc"], _problems(1))
    assert out.total == [9.0]
    assert set(out.components) == {"test_length", "len2"}


def test_unknown_param_and_missing_field_are_config_errors():
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['scael'\]"):
        CombinedReward([("test_length", 1.0, {"scael": 2})])
    with CombinedReward([("test_tokens", 1.0)]) as reward:
        with pytest.raises(ValueError, match=r"needs the field\(s\) \['num_tokens'\]"):
            reward(["a"], _problems(1))
        with pytest.raises(ValueError, match="field 'num_tokens' must be a list"):
            reward(["a", "b"], _problems(2), num_tokens=[1])


def test_fields_go_only_to_rewards_that_accept_them():
    with CombinedReward([("test_tokens", 1.0), ("test_length", 1.0)]) as reward:
        out = reward(["a", "bb"], _problems(2), num_tokens=[7, 9], unused=["x", "y"])
    assert out.components["test_tokens"] == [7.0, 9.0]
    assert out.total == [8.0, 11.0]


def test_group_reward_by_problem_and_by_group_ids():
    completions = ["4", "4", "5", "7", "7", "7"]
    problems = _problems(3, "a") + _problems(3, "b")
    with CombinedReward([("test_majority", 1.0)]) as reward:
        out = reward(completions, problems)
        assert out.total == [1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
        out = reward(completions, _problems(6), group_ids=[0, 0, 0, 0, 1, 1])
        assert out.total == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]


def test_group_reward_of_wrong_length_is_an_error():
    with CombinedReward([("test_bad_group", 1.0)], on_error="zero") as reward:
        out = reward(["a", "b"], _problems(2))
    assert out.errors == {"test_bad_group": 1}
    assert "returned 1 values for a group of 2" in out.reasons["test_bad_group"][0]


def test_on_error_raise_names_reward_sample_and_completion():
    long_text = "boom " + "x" * 200
    with CombinedReward([("test_boom", 1.0)], on_error="raise") as reward:
        with pytest.raises(RewardError) as info:
            reward(["fine", "fine", long_text], _problems(3))
    err = info.value
    assert err.reward == "test_boom" and err.index == 2
    assert err.completion_head == long_text[:80]
    message = str(err)
    assert "'test_boom'" in message and "sample 2" in message and "ZeroDivisionError" in message
    assert long_text[:80] in message and long_text[:81] not in message


def test_on_error_zero_scores_zero_and_counts():
    completions = ["ok", "boom", "nan", "boom!"]
    specs = [("test_boom", 1.0), ("test_nan", 2.0)]
    with CombinedReward(specs, on_error="zero") as reward:
        out = reward(completions, _problems(4))
    assert out.components["test_boom"] == [1.0, 0.0, 1.0, 0.0]
    assert out.components["test_nan"] == [0.5, 0.5, 0.0, 0.5]
    assert out.errors == {"test_boom": 2, "test_nan": 1}
    assert out.num_errors == 3
    assert "non-finite nan" in out.reasons["test_nan"][2]
    assert out.total == [2.0, 1.0, 1.0, 1.0]


def test_non_finite_raises_by_default():
    with CombinedReward([("test_nan", 1.0)]) as reward:
        with pytest.raises(RewardError, match="sample 1.*non-finite"):
            reward(["x", "nan"], _problems(2))


def test_thread_timeout_abandons_the_call():
    completions = ["slow", "fast", "fast", "slow too"]
    with CombinedReward([("test_sleepy", 1.0)], on_error="zero", timeout_s=0.5) as reward:
        start = time.monotonic()
        out = reward(completions, _problems(4))
        elapsed = time.monotonic() - start
    assert elapsed < 15  # the time limit, not 2 x 30 s
    assert out.components["test_sleepy"] == [0.0, 1.0, 1.0, 0.0]
    assert out.errors["test_sleepy"] == 2
    assert "timed out after 0.5s" in out.reasons["test_sleepy"][0]
    with CombinedReward([("test_sleepy", 1.0)], timeout_s=0.3) as reward:
        with pytest.raises(RewardError, match="sample 0.*timed out"):
            reward(["slow"], _problems(1))


def test_process_timeout_kills_the_worker_and_keeps_scoring():
    completions = ["spin", "a", "b", "c", "d"]
    with CombinedReward(
        [("test_spin", 1.0)], on_error="zero", timeout_s=2.0, executor="process", max_workers=2
    ) as reward:
        start = time.monotonic()
        out = reward(completions, _problems(5))
        elapsed = time.monotonic() - start
        assert out.components["test_spin"] == [0.0, 1.0, 1.0, 1.0, 1.0]
        assert out.errors["test_spin"] == 1
        assert elapsed < 15
        # the pool was replaced: the next batch runs normally
        assert reward(["e"], _problems(1)).total == [1.0]


def test_score_is_a_float_with_a_reason():
    score = Score(0.5, "half")
    assert score == 0.5 and isinstance(score, float) and score.reason == "half"
    import pickle

    again = pickle.loads(pickle.dumps(score))
    assert again == 0.5 and again.reason == "half"


def test_score_events_are_counted_per_sample_in_the_breakdown():
    import pickle

    score = Score(0.0, "killed", ("sandbox/killed/memory",))
    assert pickle.loads(pickle.dumps(score)).events == ("sandbox/killed/memory",)

    def flagged(completion: str, problem: Problem) -> Score:
        events = ("sandbox/samples",) + (("sandbox/killed/memory",) if "hog" in completion else ())
        return Score(0.0 if "hog" in completion else 1.0, "", events)

    register_reward("test_flagged_events")(flagged)
    reward = CombinedReward(
        [RewardSpec("test_flagged_events", 1.0), RewardSpec("test_flagged_events", 0.5, label="b")]
    )
    breakdown = reward(["hog", "fine", "hog"], _problems(3))
    # two terms report the same event on the same sample: counted once per sample
    assert breakdown.events == {"sandbox/samples": 3, "sandbox/killed/memory": 2}
    metrics = breakdown.metrics()
    assert metrics["sandbox/killed/memory"] == 2.0 and metrics["sandbox/samples"] == 3.0
