"""GRPO-LEAD (Zhang & Zuo 2025, arXiv:2504.09696): the length-dependent accuracy reward with its
explicit penalty, and the difficulty-aware advantage reweighting, by hand; a run from YAML."""

from __future__ import annotations

import math

import pytest
import torch
from test_trainer import step_rows, tiny_config

from rlvr import algorithms
from rlvr.config import build_config
from rlvr.data import Problem
from rlvr.rewards import CombinedReward
from rlvr.rewards.length import lead_accuracy_rewards
from rlvr.trainer import train


def test_the_length_dependent_accuracy_reward_by_hand():
    """Correct lengths 10, 20, 30: mu 20, unbiased sigma 10, z = -1, 0, 1, so exp(0.05), 1,
    exp(-0.05); the wrong one -1 wherever it is."""
    got = lead_accuracy_rewards([True, False, True, True], [10, 5, 20, 30], alpha=0.05)
    expected = [math.exp(0.05), -1.0, 1.0, math.exp(-0.05)]
    assert got == pytest.approx(expected, rel=1e-6)
    # one correct completion: sigma 1, z 0, reward 1; none: every one the penalty
    assert lead_accuracy_rewards([False, True], [3, 9]) == [-1.0, 1.0]
    assert lead_accuracy_rewards([False, False], [3, 9], penalty=0.0) == [0.0, 0.0]
    # the authors' gate: the three shortest average 15 <= 4000 tokens, so no shaping
    assert lead_accuracy_rewards([True, False, True, True], [10, 5, 20, 30], min_shortest=4000) == [
        1.0,
        -1.0,
        1.0,
        1.0,
    ]


def test_lead_accuracy_as_a_reward_term_reads_the_inner_reward_and_the_token_counts():
    problem = Problem("p", "What is 2 + 2?", "4")
    reward = CombinedReward([{"name": "lead_accuracy", "params": {"alpha": 0.5}}])
    texts = ["Answer: 4", "Answer: 5", "Answer: 4", "Answer: 4"]
    out = reward(texts, [problem] * 4, group_ids=[0] * 4, num_tokens=[40, 3, 20, 30])
    z = [1.0, 0.0, -1.0]  # lengths 40, 20, 30 of the correct ones: mu 30, sigma 10
    expected = [math.exp(-0.5 * z[0]), -1.0, math.exp(-0.5 * z[2]), math.exp(-0.5 * z[1])]
    assert out.total == pytest.approx(expected, rel=1e-6)


def test_the_difficulty_weight_and_the_reweighted_advantages_by_hand():
    """w(rho) = 0.4 + 1.1 / (1 + exp(10 (rho - 0.75))). One right of four (rho 0.25): GRPO's
    advantages 1.5 and -0.5 x 3 (mean -0.5, unbiased std 1); the right one weighs w(0.25), the
    wrong ones w(1 - 0.25) = w(0.75) = 0.95."""
    w = algorithms.difficulty_weight(torch.tensor([0.75, 0.25, 0.0], dtype=torch.float64))
    expected_w = [0.95, 0.4 + 1.1 / (1 + math.exp(-5)), 0.4 + 1.1 / (1 + math.exp(-7.5))]
    assert w.tolist() == pytest.approx(expected_w, rel=1e-9)
    rewards = torch.tensor([1.0, -1.0, -1.0, -1.0, 1.0, 1.0, 1.0, -1.0], dtype=torch.float64)
    ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    adv = algorithms.lead_advantages(rewards, ids, eps=0.0)
    hard = [1.5 * expected_w[1]] + [-0.5 * 0.95] * 3
    easy = [0.5 * 0.95] * 3 + [-1.5 * expected_w[1]]  # rho 0.75: the wrong one weighs w(0.25)
    assert adv.tolist() == pytest.approx(hard + easy, rel=1e-9)
    # through the registry
    inputs = algorithms.AdvantageInputs(rewards, ids)
    out = algorithms.compute_advantages("grpo_lead", inputs, eps=0.0)
    assert out.advantages.tolist() == pytest.approx(hard + easy, rel=1e-9)


def test_a_grpo_lead_run_from_yaml(tmp_path):
    """The reward term and the estimator selected by name train the tiny model (a completion
    counts as correct when its letter fraction reaches 0.3)."""
    reward = {
        "function": None,
        "terms": [
            {
                "name": "lead_accuracy",
                "params": {"reward": "rewards_for_tests:letter_fraction", "threshold": 0.3},
            }
        ],
    }
    cfg = tiny_config(
        tmp_path / "run",
        steps=2,
        reward=reward,
        algorithm={"preset": "grpo", "advantage": {"name": "grpo_lead"}},
    )
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    assert sorted(rows) == [1, 2]
    assert any(r["reward/mean"] != -1.0 for r in rows.values())
    assert all(math.isfinite(r["policy/loss"]) for r in rows.values())
