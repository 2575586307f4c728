"""Countdown task: generation, held-out split, and the ast-based verifier."""

from __future__ import annotations

import builtins
import json
import random
from fractions import Fraction

import pytest

from rlvr.config import ConfigError, build_config
from rlvr.data import TASKS, CountdownTask, Problem, build_task, make_task
from rlvr.data.countdown import (
    LEVELS,
    check_expression,
    countdown_reward,
    decode_answer,
    draw_instance,
    extract_expression,
    is_held_out,
    parse_expression,
)

# The running example: (50 - 25) * (7 - 3) == 100 uses each of the numbers exactly once.
NUMBERS = [3, 7, 25, 50]
TARGET = 100


def _canonical(problem: Problem) -> str:
    numbers, target = decode_answer(problem.answer)
    return f"{','.join(map(str, numbers))}->{target}"


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_deterministic_and_solvable(level: int) -> None:
    a, b = CountdownTask(level=level, seed=3, n_eval=40), CountdownTask(level=level, seed=3)
    train = [a.train_problem(i) for i in range(200)]
    assert train == [b.train_problem(i) for i in range(200)]
    assert a.train_problem(7) == a.train_problem(7)
    assert a.eval_problems() == CountdownTask(level=level, seed=3, n_eval=40).eval_problems()
    other = CountdownTask(level=level, seed=4, n_eval=1)
    assert train != [other.train_problem(i) for i in range(200)]
    spec = LEVELS[level]
    for problem in train + a.eval_problems():
        data = json.loads(problem.answer)
        numbers, target = data["numbers"], data["target"]
        assert len(numbers) == spec.n_numbers == len(set(numbers))
        assert all(spec.lo <= n <= spec.hi for n in numbers) and numbers == sorted(numbers)
        assert spec.target_lo <= target <= spec.target_hi
        assert f"equals {target}" in problem.prompt and str(numbers) in problem.prompt
        assert check_expression(data["solution"], numbers, target), problem
        assert a.score(f"Answer: {data['solution']}", problem) == 1.0


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_eval_split_disjoint_from_training(level: int) -> None:
    task = CountdownTask(level=level, seed=0, n_eval=60)
    evals = task.eval_problems()
    assert len(evals) == 60 and len({p.prompt for p in evals}) == 60
    held = {_canonical(p) for p in evals}
    assert all(is_held_out(c) for c in held)
    train = {_canonical(task.train_problem(i)) for i in range(1500)}
    assert not train & held
    assert not any(is_held_out(c) for c in train)
    assert task.train_problem(0).id == f"countdown-L{level}-train-0"
    assert evals[0].id == f"countdown-L{level}-eval-0"


def test_draw_instance_reaches_integer_targets() -> None:
    rng = random.Random(0)
    for _ in range(200):
        instance = draw_instance(rng, LEVELS[3])
        value, leaves = parse_expression(instance.solution)
        assert value == instance.target and sorted(leaves) == list(instance.numbers)


@pytest.mark.parametrize(
    "completion",
    [
        "Answer: (50 - 25) * (7 - 3)",
        "<think>25 * 4 = 100</think>\n<answer>(50 - 25) * (7 - 3)</answer>",
        "<answer>(50 - 25) * (7 - 3)</answer>\nAnswer: 1 + 1",
        "<answer></answer>\nAnswer: (50 - 25) * (7 - 3)",
        "Let me try.\n**Answer:** (50 - 25) * (7 - 3)",
        "**Answer**: (50 - 25) * (7 - 3)",
        "The answer is (7 - 3) * (50 - 25).",
        "Answer: (50 - 25) * (7 - 3) = 100",
        "answer: `(50-25)*(7-3)`.",
        "so we get\n$(50 - 25) \\times (7 - 3)$",
        "Answer:\n(50 - 25) × (7 − 3) = 100.",
        "Final answer: \\boxed{(50 - 25) \\cdot (7 - 3)}",
        "Try (50 - 25) * 3: no.\n(50-25)*(7-3)",
    ],
)
def test_verifier_accepts(completion: str) -> None:
    assert countdown_reward(completion, NUMBERS, TARGET) == 1.0


def test_verifier_exact_arithmetic() -> None:
    assert check_expression("-3 + 7 * 25 - 50", NUMBERS, 122)  # unary minus
    assert check_expression("50 / (3 - 7 / 7)", [3, 7, 7, 50], 25)  # a repeated given number
    assert check_expression("(3 + 7 / 25) * 50", NUMBERS, 164)  # a fractional intermediate
    assert not check_expression("50 / (3 - 7 / 7)", [3, 7, 50], 25)  # 7 given once, used twice


@pytest.mark.parametrize(
    "expression",
    [
        "(50 - 25) * (7 + 3)",  # wrong value (250)
        "(50 - 25) * (7 - 3) = 99",  # claims another target
        "50 - 50 + 25 * (7 - 3)",  # 50 used twice
        "25 * (7 - 3)",  # 50 missing
        "(50 - 25) * (7 - 3) * 1",  # 1 is not given
        "(50 - 25) * 4",  # 4 is not given, 3 and 7 missing
        "(50 - 25) ** (7 - 3)",  # power
        "(50 - 25) * (7 - 3) // 1",  # floor division
        "__import__('os').system('true')",
        "abs(-100)",
        "x * 100",
        "(50.0 - 25) * (7 - 3)",  # float literal
        "(50 - 25) * (7 - 3) / 0",  # division by zero
        "((50 - 25) * (7 - 3)",  # unbalanced
        "(50 - 25)(7 - 3)",  # call of an int
        "100",
        "",
        "(" * 400 + "3" + ")" * 400,  # too long
        "(" * 140 + "100" + ")" * 140,  # nested deeper than Python's parser allows
        "- " * 140 + "100",
        "1_00",
        "0x64",
        "(50 - 25) * (7 - 3) if 1 else 0",
        "[100][0]",
        "+100",
    ],
)
def test_verifier_rejects(expression: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args, **kwargs):
        raise AssertionError("the verifier must not execute model text")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    assert not check_expression(expression, NUMBERS, TARGET)
    for completion in (f"Answer: {expression}", f"<answer>{expression}</answer>"):
        assert countdown_reward(completion, NUMBERS, TARGET) == 0.0


def test_parse_expression_is_exact() -> None:
    assert parse_expression("1 / 3 + 2 / 3") == (Fraction(1), [1, 3, 2, 3])
    assert parse_expression("-(3 - 10)") == (Fraction(7), [3, 10])
    assert parse_expression("2 ** 3") is None
    assert extract_expression("no expression here") is None
    assert countdown_reward("I give up.", [1, 2, 3], 6) == 0.0


def test_task_score_and_answer_format() -> None:
    problem = Problem("p", "q", json.dumps({"numbers": NUMBERS, "target": TARGET}))
    task = CountdownTask(level=1, n_eval=1)
    assert task.score("Answer: (50 - 25) * (7 - 3)", problem) == 1.0
    assert task.score("Answer: (50 - 25) * (7 - 3) + 3", problem) == 0.0
    with pytest.raises(ValueError, match="countdown answer must be JSON"):
        task.score("Answer: 1", Problem("p", "q", "100"))


def test_prompt_template_fields() -> None:
    task = CountdownTask(level=1, n_eval=1, prompt_template="{numbers} -> {target}")
    numbers, target = decode_answer(task.train_problem(0).answer)
    assert task.train_problem(0).prompt == f"{numbers} -> {target}"


def test_levels_and_registry() -> None:
    assert "countdown" in TASKS
    task = make_task("countdown", level=1, seed=2, n_eval=5)
    assert isinstance(task, CountdownTask) and task.level == 1 and len(task.eval_problems()) == 5
    for bad in (0, 4):
        with pytest.raises(ValueError, match=r"countdown level must be an integer in 1\.\.3"):
            make_task("countdown", level=bad)
    with pytest.raises(ValueError, match=r"countdown level must be one of \[1, 2, 3\]"):
        CountdownTask(level=7)
    with pytest.raises(ValueError, match="has no difficulty levels"):
        make_task("reasoning_gym:chain_sum", level=2)
    with pytest.raises(ValueError, match=r"unknown task 'count'.*countdown"):
        make_task("count")


def test_config_and_build_task() -> None:
    cfg = build_config({"task": {"name": "countdown", "level": 3, "n_eval": 4, "seed": 1}})
    task = build_task(cfg.task)
    assert isinstance(task, CountdownTask) and task.level == 3 and task.seed == 1
    assert len(task.eval_problems()) == 4
    with pytest.raises(ConfigError, match="task.level must be 1 to 3 for countdown"):
        build_config({"task": {"name": "countdown", "level": 5}})
    with pytest.raises(ConfigError, match=r"task\.name must be one of arithmetic, file, countdown"):
        build_config({"task": {"name": "gsm8k"}})
    assert build_config({"task": {"name": "arithmetic", "level": 6}}).task.level == 6
