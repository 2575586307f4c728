"""Prompt lengths checked before any sampling (error naming the row, or drop and count), the
counts a run logs, and the default file-task prompt read by the verifier and format reward."""

import json
import re
import time

import pytest

from rlvr.config import build_config
from rlvr.data import (
    ArithmeticTask,
    FileTask,
    MixtureTask,
    build_task,
    data_stats,
    file_mixture,
    limit_prompt_length,
)
from rlvr.data.checks import HeldOutSubset
from rlvr.errors import DataError
from rlvr.models import byte_tokenizer, encode_messages
from rlvr.rewards.structure import format_reward


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def chars(problem) -> int:
    """A stand-in token count: one token per character of the user message."""
    return len(problem.prompt)


def long_file(tmp_path) -> str:
    """20 rows of 2-character prompts; rows 5 and 12 (lines 6 and 13) have 50 characters."""
    rows = [
        {"prompt": f"q{i:x}" if i not in (5, 12) else f"{i:02}" + "x" * 48, "answer": i}
        for i in range(20)
    ]
    return write_jsonl(tmp_path / "d.jsonl", rows)


def test_long_prompt_is_an_error_naming_row_tokens_limit_and_knobs(tmp_path):
    path = long_file(tmp_path)
    task = FileTask(path, prompt_template="{question}")
    with pytest.raises(DataError) as caught:
        limit_prompt_length(task, chars, 10)
    message = str(caught.value)
    assert message.startswith(f"{path}, line 6: the prompt is 50 tokens, over the limit of 10")
    assert "task.max_prompt_tokens" in message and "task.long_prompts: drop" in message
    assert limit_prompt_length(task, chars, 50) == (task, 0)  # at the limit is fine


def test_drop_removes_long_rows_from_both_splits_and_counts_them(tmp_path):
    task = FileTask(long_file(tmp_path), prompt_template="{question}", eval_fraction=0.5, seed=3)
    limited, dropped = limit_prompt_length(task, chars, 10, "drop")
    assert dropped == 2
    stream = [limited.train_problem(i) for i in range(3 * limited.n_train)]
    assert all(len(p.prompt) <= 10 for p in stream + limited.eval_problems())
    assert limited.n_train + limited.n_eval == 18 and task.n_train + task.n_eval == 20
    assert data_stats(limited)["data/long_prompts_dropped"] == 2
    assert data_stats(task)["data/long_prompts_dropped"] == 0  # the original is unchanged
    with pytest.raises(DataError, match=r"no training rows of .* left: every one is over 1 prompt"):
        limit_prompt_length(task, chars, 1, "drop")


def test_a_megabyte_prompt_never_reaches_the_engine(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("prompt,answer\nWhat is 1 + 1?,2\n" + "y" * 1_000_000 + ",3\n")
    cfg = build_config({"task": {"name": "file", "path": str(path), "eval_fraction": 0.0}})
    tokenizer = byte_tokenizer()

    def tokens(problem) -> int:
        return len(encode_messages(tokenizer, problem.messages()))

    start = time.perf_counter()
    with pytest.raises(DataError, match=re.escape(f"{path}, line 3: the prompt is 1,000,")):
        limit_prompt_length(build_task(cfg.task), tokens, 1024)
    assert time.perf_counter() - start < 30


def test_procedural_tasks_check_their_held_out_problems_only():
    task = ArithmeticTask(level=6, seed=0, n_eval=30, prompt_template="{question}")
    lengths = sorted(len(p.prompt) for p in task.eval_problems())
    limit = lengths[len(lengths) // 2]
    with pytest.raises(DataError, match=r"held-out problem 'arith-L6-eval-\d+' of task arithmetic"):
        limit_prompt_length(task, chars, limit)
    limited, dropped = limit_prompt_length(task, chars, limit, "drop")
    assert isinstance(limited, HeldOutSubset) and dropped == sum(n > limit for n in lengths)
    assert [p for p in task.eval_problems() if len(p.prompt) <= limit] == limited.eval_problems()
    assert limited.train_problem(7) == task.train_problem(7)  # training stream untouched
    assert limited.level == 6 and limited.name == "arithmetic"
    p = task.eval_problems()[0]
    assert limited.score(f"Answer: {p.answer}", p) == 1.0
    assert data_stats(limited) == {"data/long_prompts_dropped": dropped}


def test_mixtures_are_checked_per_category(tmp_path):
    rows = [
        {"prompt": f"{i:02}" + "x" * (48 if i in (4, 9) else 0), "answer": i, "src": "ab"[i % 2]}
        for i in range(20)
    ]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    mixture = file_mixture(path, "src", prompt_template="{question}", eval_fraction=0.0)
    with pytest.raises(DataError, match=re.escape(f"{path}, line 5: the prompt is 50 tokens")):
        limit_prompt_length(mixture, chars, 10)
    limited, dropped = limit_prompt_length(mixture, chars, 10, "drop")
    assert isinstance(limited, MixtureTask) and limited.categories == ("a", "b") and dropped == 2
    assert data_stats(limited)["data/long_prompts_dropped"] == 2
    assert data_stats(limited)["data/train_rows"] == 18
    levels = MixtureTask([ArithmeticTask(level=1), ArithmeticTask(level=2)], ["L1", "L2"])
    assert limit_prompt_length(levels, chars, 10_000) == (levels, 0)
    assert data_stats(levels) == {"data/long_prompts_dropped": 0}


# ---------------------------------------------------------------- the default prompt's answer


def test_default_file_prompt_and_verifier_read_the_same_answer(tmp_path):
    rows = [
        {"prompt": "Capital of France?", "answer": "Paris"},
        {"prompt": "Half of 5?", "answer": "2.5"},
        {"prompt": "Name the route.", "answer": "Route 66"},
    ]
    task = FileTask(write_jsonl(tmp_path / "d.jsonl", rows), eval_fraction=0.0)
    problems = {p.answer: p for p in (task.train_problem(i) for i in range(3))}
    paris, half, route = problems["Paris"], problems["2.5"], problems["Route 66"]
    assert "'Answer: <answer>'" in paris.prompt
    assert task.score("It is in France.\nAnswer: Paris", paris) == 1.0
    assert task.score("Answer: the **paris**.", paris) == 1.0  # normalised text
    assert task.score("Answer: Lyon", paris) == 0.0
    assert task.score("5 / 2\nAnswer: 5/2", half) == 1.0  # numbers compared as numbers
    assert task.score("Answer: 2.50 units", half) == 1.0
    assert task.score("Answer: 3", half) == 0.0
    assert task.extract_answer("so\nAnswer: Route 66", route) == "Route 66"  # not just "66"
    assert task.score("so\nAnswer: Route 66", route) == 1.0
    assert task.score("Answer: 66", route) == 0.0


def test_default_file_prompt_completion_passes_the_format_reward_defaults(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "Capital of France?", "answer": "Paris"}])
    problem = FileTask(path, eval_fraction=0.0).train_problem(0)
    completion = "The capital of France is Paris.\nAnswer: Paris"
    assert FileTask(path, eval_fraction=0.0).score(completion, problem) == 1.0
    assert format_reward(completion, problem) == 1.0
