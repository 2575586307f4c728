"""``eval.judge: reward``: held-out correctness decided by the run's reward (>= the threshold),
in the judge itself, in the trainer's evaluation, in ``rlvr eval --like RUN`` and in rescore."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.config import ConfigError, build_config
from rlvr.data import Problem, build_task
from rlvr.evaluation.harness import (
    compute_summary_metrics,
    load_records,
    rescore,
    save_eval,
    score_records,
)
from rlvr.grading.grader import build_grader
from rlvr.logging import read_metrics
from rlvr.rewards import register_reward

THRESHOLD = 0.3


@register_reward("eval_judge_test_letters")
def letters_per_token(completion: str, problem: Problem, num_tokens: int) -> float:
    """ASCII letters of the completion plus digits of the reference answer, per completion
    token, at most 1: reads the completion, its problem and the ``num_tokens`` field (the tiny
    model's greedy completions are all alike, so the answer makes held-out scores differ)."""
    letters = sum(ch.isascii() and ch.isalpha() for ch in completion)
    return min(1.0, (letters + len(problem.answer)) / max(num_tokens, 1))


@register_reward("eval_judge_test_group_size", kind="group")
def group_size(completions: list[str], problem: Problem) -> list[float]:
    """A tenth of the group's size for every sample: shows which samples form a group."""
    return [len(completions) / 10] * len(completions)


def judge_config(reward: str = "eval_judge_test_letters", **eval_keys: object):
    return build_config(
        {
            "task": {"name": "arithmetic", "level": 1, "n_eval": 4},
            "reward": {"terms": [{"name": reward}]},
            "eval": {"judge": "reward", **eval_keys},
        }
    )


def test_reward_judge_scores_with_the_reward_and_thresholds(tmp_path: Path) -> None:
    cfg = judge_config(reward_threshold=THRESHOLD)
    task = build_task(cfg.task)
    problems = task.eval_problems()[:2]
    answer = f"Answer: {problems[1].answer}"
    completions = [["abcd", "ab12", "1234"], ["xy", answer, "zz!!"]]
    tokens = [[4, 4, 8], [2, 2, 16]]
    finished = [[True] * 3, [True] * 3]
    judge = build_grader(cfg, task)
    try:
        records = score_records(task, problems, completions, tokens, finished, judge)
    finally:
        judge.close()
    assert [len(p.answer) for p in problems] == [1, 2]
    assert [r["score"] for r in records] == [1.0, 0.75, 0.125, 1.0, 1.0, 0.25]
    assert [r["correct"] for r in records] == [True, True, False, True, True, False]
    assert judge.describe()["name"] == "reward" and judge.describe()["threshold"] == THRESHOLD

    # the default threshold 1.0: only a full reward counts
    strict = build_grader(judge_config(), task)
    records_strict = score_records(task, problems, completions, tokens, finished, strict)
    strict.close()
    assert [r["correct"] for r in records_strict] == [True, False, False, True, True, False]

    # the task judge is unchanged: the task's check, correct at 1
    by_task = score_records(task, problems, completions, tokens, finished)
    assert [r["score"] for r in by_task] == [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert [r["correct"] for r in by_task] == [False, False, False, False, True, False]

    # a group reward is called once per problem, on that problem's samples
    grouped = build_grader(judge_config("eval_judge_test_group_size"), task)
    uneven = score_records(task, problems, [["a"] * 3, ["b"] * 2], tokens, finished, grouped)
    grouped.close()
    assert [r["score"] for r in uneven] == [0.3, 0.3, 0.3, 0.2, 0.2]

    # rescore re-judges with the summary's judge (the reward rebuilt from its config section)
    summary = {"judge": judge.describe(), "task": cfg.task.model_dump(mode="json")}
    save_eval(tmp_path, records, {**summary, **compute_summary_metrics(records, [1, 3])})
    rescored, changed = rescore(tmp_path)
    assert changed == 0 and rescored["judge"]["name"] == "reward"
    table = pq.read_table(tmp_path / "samples.parquet")
    rows = table.to_pylist()
    rows[2]["completion"] = "abcd"  # 5 / 8 tokens instead of 1 / 8
    pq.write_table(type(table).from_pylist(rows, schema=table.schema), tmp_path / "samples.parquet")
    rescored, changed = rescore(tmp_path)
    assert changed == 1
    assert [(r["score"], r["correct"]) for r in load_records(tmp_path)][2] == (0.625, True)
    assert rescored["metrics"]["accuracy"] == pytest.approx((3 / 3 + 2 / 3) / 2)


def test_training_and_held_out_accuracy_count_the_same_rewards_alike() -> None:
    """One threshold, eval.reward_threshold: the same rewards are as often correct in training's
    reward/accuracy as in the reward judge's held-out accuracy."""
    import torch

    from rlvr.grading.grader import grade_samples
    from rlvr.rewards.combined import RewardBreakdown
    from rlvr.trainer.batch import Samples
    from rlvr.trainer.metrics import step_metrics

    cfg = judge_config(reward_threshold=0.75)
    task = build_task(cfg.task)
    problems = task.eval_problems()[:2]
    texts = ["abcd", "ab12", "1234", "xy", f"Answer: {problems[1].answer}", "zz!!"]
    tokens, group_ids = [4, 4, 8, 2, 2, 16], [0, 0, 0, 1, 1, 1]
    judge = build_grader(cfg, task)
    try:
        scores, correct, _ = grade_samples(
            judge, task, texts, [problems[g] for g in group_ids], tokens, group_ids
        )
    finally:
        judge.close()
    assert scores == [1.0, 0.75, 0.125, 1.0, 1.0, 0.25] and sum(correct) == 4
    data = Samples(
        problems=problems,
        prompt_ids=[[1], [1]],
        columns={
            "completion_ids": [[2] * n for n in tokens],
            "sampler_logprobs": [[0.0] * n for n in tokens],
            "finished": [True] * 6,
            "texts": texts,
            "group_ids": torch.tensor(group_ids),
            "breakdown": RewardBreakdown.single("judge", scores),
            "rewards": torch.tensor(scores),
        },
        info={"tokens_per_s": 1.0},
    )
    metrics = step_metrics(data, task, cfg.eval.reward_threshold)
    assert metrics["reward/accuracy"] == pytest.approx(sum(correct) / len(correct))


def test_rewards_that_cannot_judge_are_refused() -> None:
    task = build_task(judge_config().task)
    with pytest.raises(ConfigError, match="'self_certainty' reads self_certainty, which held-out"):
        build_grader(judge_config("self_certainty"), task)
    python_fn = judge_config().model_copy(
        update={"reward": build_config({"reward": {"function": "<python callable>:m.f"}}).reward}
    )
    with pytest.raises(ConfigError, match="passed to rlvr.train"):
        build_grader(python_fn, task)


# ------------------------------------------------------- the trainer and `rlvr eval --like RUN`


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, dict]:
    """A one-step run judged by the letters reward (threshold 0.3), evaluated before and after."""
    from test_trainer import tiny_config

    from rlvr.trainer import train

    run_dir = tmp_path_factory.mktemp("judge") / "run"
    cfg = tiny_config(
        run_dir,
        steps=1,
        reward={"function": None, "terms": [{"name": "eval_judge_test_letters"}]},
        eval={
            "before": True,
            "after": True,
            "judge": "reward",
            "reward_threshold": THRESHOLD,
            "n_prompts": 4,
            "max_new_tokens": 6,
        },
    )
    return run_dir, train(build_config(cfg))


def assert_judged_by_reward(records: list[dict], threshold: float = THRESHOLD) -> None:
    """Every record's score is the reward's value on it, and correct is the threshold's call."""
    for r in records:
        problem = Problem(r["problem_id"], r["prompt"], r["answer"])
        assert r["score"] == letters_per_token(r["completion"], problem, r["num_tokens"])
        assert r["correct"] == (r["score"] >= threshold)


def test_trainer_eval_metrics_are_the_rewards(run, tmp_path: Path) -> None:
    from rlvr import evaluate

    run_dir, summary = run
    before = next(r for r in read_metrics(run_dir) if r["step"] == 0)
    for key in ("greedy_accuracy", "greedy_reward_mean", "sampled_accuracy", "sampled_reward_mean"):
        assert f"eval/{key}" in before and f"eval/{key}" in summary["after"]
    # the run's checkpoint evaluated with its own settings draws the trainer's greedy samples
    tuned = evaluate(run_dir, out=tmp_path / "tuned", progress=False)
    assert tuned["judge"]["name"] == "reward" and tuned["judge"]["threshold"] == THRESHOLD
    records = load_records(tmp_path / "tuned")
    assert_judged_by_reward(records)
    assert len({r["correct"] for r in records}) == 2  # some held-out samples pass, some not
    after = summary["after"]
    assert tuned["metrics"]["accuracy"] == pytest.approx(after["eval/greedy_accuracy"])
    mean_reward = sum(r["score"] for r in records) / len(records)
    assert mean_reward == pytest.approx(after["eval/greedy_reward_mean"])


def test_rlvr_eval_like_run_judges_with_the_runs_reward(run, tmp_path: Path) -> None:
    run_dir, _ = run

    def rlvr_eval(out: str, *args: str) -> dict:
        result = CliRunner().invoke(
            app,
            ["eval", "tiny-random-llama", "--like", str(run_dir), "--out", str(tmp_path / out),
             "--n", "2", *args],
            prog_name="rlvr",
        )  # fmt: skip
        assert result.exit_code == 0, result.output + repr(result.exception)
        text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", result.output)
        assert (
            json.loads(text[text.rindex("\n{") + 1 :])["judge"]
            == json.loads((tmp_path / out / "summary.json").read_text())["judge"]["name"]
        )
        return json.loads((tmp_path / out / "summary.json").read_text())

    like = rlvr_eval("like")
    assert like["judge"]["name"] == "reward" and like["judge"]["threshold"] == THRESHOLD
    assert like["judge"]["reward"]["terms"][0]["name"] == "eval_judge_test_letters"
    assert_judged_by_reward(load_records(tmp_path / "like"))

    stricter = rlvr_eval("strict", "--set", "eval.reward_threshold=0.9")
    assert stricter["judge"]["threshold"] == 0.9
    assert_judged_by_reward(load_records(tmp_path / "strict"), threshold=0.9)
    assert stricter["metrics"]["accuracy"] <= like["metrics"]["accuracy"]

    rescored = CliRunner().invoke(app, ["eval", "--rescore", str(tmp_path / "like")])
    assert rescored.exit_code == 0 and "0 score(s) changed" in rescored.output
    refused = CliRunner().invoke(
        app, ["eval", "--rescore", str(tmp_path / "like"), "--judge", "task"]
    )
    assert refused.exit_code == 2 and "--judge applies when generating" in refused.output

    by_task = rlvr_eval("task", "--judge", "task")
    assert by_task["judge"] == {"name": "task", "threshold": 1.0}
    task = build_task(build_config({"task": by_task["task"]}).task)
    for r in load_records(tmp_path / "task"):
        problem = Problem(r["problem_id"], r["prompt"], r["answer"])
        assert r["score"] == task.score(r["completion"], problem)
