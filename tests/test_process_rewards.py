"""Process rewards: steps by hand, DeepSeekMath's process-supervised GRPO advantages on a
hand-computed group, a judge's per-step verdicts, a process reward model trained with
``rlvr rm train`` on arithmetic's step labels, step rewards placed on their tokens, and a run
from YAML that trains on them and resumes exactly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from test_judges import scripted_judge
from test_trainer import COMPARED, step_rows, tiny_config

from rlvr import algorithms
from rlvr.config import load_config
from rlvr.data import Problem
from rlvr.data.arithmetic import ArithmeticTask
from rlvr.models import load_tokenizer
from rlvr.reward_models.train import RewardModelConfig, train_reward_model
from rlvr.rewards.combined import CombinedReward
from rlvr.rewards.process import corrupt_step, judge_steps, prm_pairs, prm_steps
from rlvr.trainer import train
from rlvr.trainer.rollouts import step_tokens

PROBLEM = Problem("p0", "What is 3 + 4 * 7?", "31")


def test_steps_are_the_non_empty_lines():
    text = "4 * 7 = 28\n\n3 + 28 = 31\nAnswer: 31\n"
    spans = algorithms.step_spans(text)
    assert [text[a:b] for a, b in spans] == ["4 * 7 = 28", "3 + 28 = 31", "Answer: 31"]
    assert algorithms.step_spans("") == [] and algorithms.step_spans("  \n") == []


def test_process_grpo_on_a_hand_computed_group():
    """R = {1, 0, 1}: mean 2/3, unbiased std sqrt(1/3); r~ = +-; A_{i,t} sums the normalised
    rewards of the steps ending at t or later (DeepSeekMath Sec. 4.1.3)."""
    nan = float("nan")
    steps = torch.tensor([[nan, 1.0, nan, 0.0], [nan, nan, 1.0, nan]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    adv = algorithms.process_grpo(steps, torch.tensor([0, 0]), mask, eps=0.0)
    up, down = (1 / 3) / math.sqrt(1 / 3), (-2 / 3) / math.sqrt(1 / 3)
    expected = torch.tensor([[up + down, up + down, down, down], [up, up, up, 0.0]])
    assert torch.allclose(adv, expected, atol=1e-6)
    # batched with other groups (ids need not be 0..K-1): a group of one step reward gets 0, a
    # group without any gets 0, and the first group's advantages are unchanged
    more = torch.tensor([[nan, nan, 3.0, nan], [nan, nan, nan, nan]])
    both = algorithms.process_grpo(
        torch.cat([steps, more]), torch.tensor([7, 7, 2, 9]), torch.cat([mask, mask]), eps=0.0
    )
    assert torch.allclose(both[:2], expected, atol=1e-6) and not both[2:].any()
    # through the registry, with the outcome advantage added at weight 0.5
    inputs = algorithms.AdvantageInputs(
        torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), mask=mask, step_rewards=steps
    )
    out = algorithms.compute_advantages("process_grpo", inputs, eps=0.0, outcome_weight=0.5)
    outcome = torch.tensor([1.0, -1.0]) * math.sqrt(0.5)  # grpo of [1, 0]: 0.5 / sqrt(0.5)
    assert torch.allclose(out.advantages, expected + 0.5 * outcome[:, None] * mask, atol=1e-5)
    with pytest.raises(ValueError, match="step_rewards"):
        algorithms.compute_advantages(
            "process_grpo", algorithms.AdvantageInputs(torch.ones(2), torch.zeros(2), mask=mask)
        )


def test_clip_and_delta_by_hand():
    """Gao et al. 2024: clip r <- min(r - eta, 0); delta r_k <- r_k - r_{k+1}, the last kept."""
    nan = float("nan")
    steps = torch.tensor([[0.9, nan, 0.4, 0.7], [nan, nan, 0.2, nan]])
    clipped = algorithms.transform_steps(steps, "clip", eta=0.5)
    assert torch.allclose(
        clipped, torch.tensor([[0.0, nan, -0.1, 0.0], [nan, nan, -0.3, nan]]), equal_nan=True
    )
    delta = algorithms.transform_steps(steps, "delta")
    assert torch.allclose(
        delta,
        torch.tensor([[0.5, nan, -0.3, 0.7], [nan, nan, 0.2, nan]]),
        equal_nan=True,
        atol=1e-6,
    )
    assert algorithms.transform_steps(steps, "none") is steps
    with pytest.raises(ValueError, match="one of"):
        algorithms.transform_steps(steps, "min")


def test_a_judge_scores_each_step_given_the_steps_before_it():
    seen = []

    def probs(question, choices):
        seen.append(question)
        step = question.split("New step:\n")[1].split("\n")[0]
        return [0.9, 0.1] if step != "3 + 28 = 30" else [0.2, 0.8]

    judge, model = scripted_judge(probs=probs)
    right, wrong = "4 * 7 = 28\n3 + 28 = 31\nAnswer: 31", "4 * 7 = 28\n3 + 28 = 30\nAnswer: 30"
    scores = judge_steps([right, wrong, ""], PROBLEM, judge)
    # three steps each, the shared first one asked once (the judge's cache); an empty
    # completion asks nothing
    assert model.questions == 5
    assert [s.steps for s in scores] == [
        ((10, 0.9), (22, 0.9), (33, 0.9)),
        ((10, 0.9), (22, 0.2), (33, 0.9)),
        (),
    ]
    assert [float(s) for s in scores] == [0.9, 0.2, 0.0]  # the least step's
    assert "Steps so far:\n4 * 7 = 28\n\nNew step:\n3 + 28 = 30" in seen[3]
    assert "Steps so far:\n(none)" in seen[0]


def test_step_rewards_land_on_the_tokens_where_their_steps_end():
    tok = load_tokenizer("smollm2-135m-instruct")
    text = "4 * 7 = 28\n3 + 28 = 31\nAnswer: 31"
    ids = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]

    calls = []

    def decode(x):
        calls.append(len(x))
        return tok.decode(x, skip_special_tokens=True)

    placed = step_tokens(decode, ids, [(10, 1.0), (22, 0.5), (33, 0.25), (99, 0.0)])
    assert len(calls) <= 3 * math.ceil(math.log2(len(ids)))  # a binary search per step
    for (token, _), end in zip(placed[:3], (10, 22, 33), strict=True):
        assert len(decode(ids[: token + 1])) >= end > len(decode(ids[:token]))
    assert placed[3] == (len(ids) - 1, 0.0)  # a step ending past the text: the last token
    assert [v for _, v in placed] == [1.0, 0.5, 0.25, 0.0]
    assert step_tokens(decode, [], [(3, 1.0)]) == []
    # summed over the process terms with their weights, through the breakdown
    judge, _ = scripted_judge(probs=lambda q, c: [0.5, 0.5])
    reward = CombinedReward(
        [
            {"name": "judge_steps", "weight": 2.0, "params": {"judge": judge}},
            {"name": "judge_steps", "label": "again", "params": {"judge": judge}},
        ]
    )
    breakdown = reward([text], [PROBLEM])
    assert breakdown.step_rewards() == [[(10, 1.5), (22, 1.5), (33, 1.5)]]


def test_prm_pairs_corrupt_one_step_and_a_trained_prm_scores_each_step(tmp_path):
    assert corrupt_step("3 + 28 = 31", _Fixed()) == "3 + 28 = 34"
    assert corrupt_step("Answer: 31", _Fixed()) == "Answer: 34"
    assert corrupt_step("Let me think", _Fixed()) is None
    task = ArithmeticTask(level=5, n_eval=0)
    rows = prm_pairs([task.train_problem(i) for i in range(40)], seed=0)
    assert len(rows) == 40 * 3  # two operations and the answer line: three steps each
    first = rows[1]
    assert first["chosen"].split("\n")[0] == first["rejected"].split("\n")[0]  # one step differs
    assert first["chosen"].split("\n")[1] != first["rejected"].split("\n")[1]
    data = tmp_path / "prm.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "prm"
    train_reward_model(
        RewardModelConfig(data=str(data), model="tiny-random-llama", out=str(out), lr=1e-3),
        progress=False,
    )
    text = "4 * 7 = 28\n3 + 28 = 31\nAnswer: 31"
    (score,) = prm_steps([text], PROBLEM, str(out))
    assert [end for end, _ in score.steps] == [10, 22, 33]
    assert all(0 < v < 1 for _, v in score.steps) and float(score) == min(v for _, v in score.steps)


class _Fixed:
    """A stand-in random stream: + and 3."""

    def choice(self, options):
        return options[-1]

    def randint(self, a, b):
        return 3


def process_config(run_dir: Path, steps: int) -> dict:
    cfg = tiny_config(
        run_dir,
        steps=steps,
        algorithm={"preset": "grpo", "advantage": {"name": "process_grpo", "outcome_weight": 0.5}},
    )
    cfg["reward"] = {
        "judges": {"tiny": {"model": "tiny-random-llama"}},
        "terms": [{"name": "judge_steps", "params": {"judge": "tiny"}}],
    }
    cfg["rollout"]["dtype"] = "fp32"
    return cfg


def test_a_process_supervised_run_from_yaml_trains_and_resumes_exactly(tmp_path):
    straight = tmp_path / "straight" / "run"
    path = tmp_path / "process.yaml"
    path.write_text(yaml.safe_dump(process_config(straight, 3)))
    train(load_config(path))
    rows = step_rows(straight)
    assert all(math.isfinite(rows[s]["policy/loss"]) for s in (1, 2, 3))
    assert rows[3]["policy/loss"] != rows[1]["policy/loss"]
    resumed = tmp_path / "resumed" / "run"
    train(load_config(path, [f"logging.run_dir={resumed}", "train.steps=2"]))
    train(load_config(path, [f"logging.run_dir={resumed}"]), resume=resumed)
    again = step_rows(resumed)
    for key in COMPARED:
        assert again[3][key] == rows[3][key], key


def test_process_grpo_without_a_process_reward_names_the_rewards_that_give_steps(tmp_path):
    cfg = process_config(tmp_path / "run", 1)
    cfg["reward"] = {"function": "rewards_for_tests:letter_fraction"}
    with pytest.raises(Exception, match="judge_steps or prm_steps"):
        train(load_config(_written(tmp_path, cfg)))


def _written(tmp_path: Path, cfg: dict) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path
