"""Judges trained by RL (J1, arXiv:2505.10320): the judge task's labels checked against the
candidates they label, its pointwise questions exactly the ``judge_score`` reward's, the verdict
score by hand, and a run whose checkpoint ``rlvr judge probe`` then asks as the judge."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from test_trainer import tiny_config

from rlvr.config import ConfigError, build_config, load_config
from rlvr.data.arithmetic import ArithmeticTask
from rlvr.reward_models.chat_model import resolve_model_spec
from rlvr.reward_models.judge_task import JudgeTask
from rlvr.reward_models.questions import PAIRWISE_TEMPLATE
from rlvr.rewards.judged import POINTWISE_TEMPLATE, render
from rlvr.rewards.probe import probe_judge
from rlvr.trainer import train


def _final_number(response: str) -> str | None:
    numbers = re.findall(r"-?\d+", response)
    return numbers[-1] if numbers else None


@pytest.mark.parametrize("format", ["pointwise", "pairwise", "mixed"])
def test_every_label_is_the_truth_about_its_candidates(format):
    """Pointwise: Yes exactly when the response's final number is the reference answer.
    Pairwise: the labelled response's final number is the reference and the other's is not.
    The questions are the base problems' (train on train, held-out on held-out)."""
    task, base = JudgeTask(level=2, format=format), ArithmeticTask(level=2)
    pairs = [(task.train_problem(i), base.train_problem(i)) for i in range(300)]
    pairs += list(zip(task.eval_problems(), base.eval_problems(), strict=True))
    labels = set()
    for judged, problem in pairs:
        labels.add(judged.answer)
        if judged.answer in ("Yes", "No"):
            response = judged.prompt.split("Response:\n")[1].split("\n\nIs the response")[0]
            assert judged.prompt == render(POINTWISE_TEMPLATE, problem, response)
            assert (_final_number(response) == problem.answer) == (judged.answer == "Yes")
        else:
            a = judged.prompt.split("Response A:\n")[1].split("\n\nResponse B:")[0]
            b = judged.prompt.split("Response B:\n")[1].split("\n\nWhich response")[0]
            assert judged.prompt == render(PAIRWISE_TEMPLATE, problem, "", a=a, b=b)
            right, wrong = (a, b) if judged.answer == "A" else (b, a)
            assert _final_number(right) == problem.answer != _final_number(wrong)
    expected = {"pointwise": {"Yes", "No"}, "pairwise": {"A", "B"}}.get(
        format, {"Yes", "No", "A", "B"}
    )
    assert labels == expected  # both labels occur
    assert task.eval_problems() == JudgeTask(level=2, format=format).eval_problems()  # fixed


@pytest.mark.parametrize(
    ("reply", "label", "score"),
    [
        ("Yes", "Yes", 1.0),
        ("yes.", "Yes", 1.0),
        (" No, it is wrong", "No", 1.0),
        ("No", "Yes", 0.0),
        ("Yesterday", "Yes", 0.0),
        ("B", "B", 1.0),
        ("A or B", "B", 0.0),
        ("", "Yes", 0.0),
    ],
)
def test_the_verdict_is_the_replys_first_word(reply, label, score):
    task = JudgeTask()
    problem = task.train_problem(0)
    assert task.score(reply, problem.__class__(problem.id, problem.prompt, label)) == score


def test_a_judge_trained_from_yaml_is_the_judge_the_probe_asks(tmp_path):
    run = tmp_path / "judge"
    cfg = tiny_config(
        run,
        steps=2,
        task={"name": "judge", "level": 1, "n_eval": 4, "dataset_kwargs": {"format": "mixed"}},
        checkpoint={"every": 0},
    )
    del cfg["reward"]  # the task's verdicts are the reward
    cfg["rollout"]["max_new_tokens"] = 4
    path = tmp_path / "judge.yaml"
    path.write_text(yaml.safe_dump(cfg))
    train(load_config(path))
    checkpoint = resolve_model_spec(str(run))
    assert Path(checkpoint).name == "step_000002"
    report = probe_judge(
        ArithmeticTask(level=1, n_eval=2),
        "judge_score",
        {"judge": {"engine": "torch", "model": str(run)}},
        n=2,
    )
    assert report.correct_rejected.total == 2 and report.wrong_accepted.total == 2
    assert 0.0 <= report.separation <= 1.0


def test_judge_configs_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="format must be one of"):
        from rlvr.data.from_config import build_task

        build_task(
            build_config({"task": {"name": "judge", "dataset_kwargs": {"format": "x"}}}).task
        )
    with pytest.raises(ConfigError, match="level"):
        build_config({"task": {"name": "judge", "level": 9}})
