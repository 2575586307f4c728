"""NGRPO (Nan et al. 2025, arXiv:2509.18851): advantages calibrated by a virtual sample of
the largest reward, on hand-computed groups; its selector; the preset from YAML."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from test_trainer import step_rows, tiny_config

from rlvr import algorithms
from rlvr.config import build_config
from rlvr.trainer import train


def test_a_virtual_best_answer_gives_all_wrong_groups_a_negative_advantage():
    """G = 8, 0/1 rewards, one virtual 1 in each group's statistics (unbiased std over 9):
    all wrong -> mean 1/9, std 1/3, A = -1/3; all right -> 0; one right of 8 -> mean 2/9,
    std sqrt((2 (7/9)^2 + 7 (2/9)^2) / 8) = sqrt(7/36), so 1.76 and -0.50 (the paper's
    example; GRPO gives 2.47 and -0.35); a group of one keeps its reward."""
    rewards = torch.tensor([0.0] * 8 + [1.0] * 8 + [1.0] + [0.0] * 7 + [0.5])
    groups = torch.repeat_interleave(torch.arange(4), torch.tensor([8, 8, 8, 1]))
    adv = algorithms.ngrpo(rewards, groups)
    assert adv[:8].tolist() == pytest.approx([-1 / 3] * 8, abs=1e-5)
    assert adv[8:16].tolist() == pytest.approx([0.0] * 8, abs=1e-5)
    std = math.sqrt(7 / 36)
    assert adv[16].item() == pytest.approx((7 / 9) / std, abs=1e-4)
    assert adv[17].item() == pytest.approx((-2 / 9) / std, abs=1e-4)
    assert (round(adv[16].item(), 2), round(adv[17].item(), 2)) == (1.76, -0.5)
    grpo = algorithms.grpo(rewards[16:24], torch.zeros(8, dtype=torch.long))
    assert (round(grpo[0].item(), 2), round(grpo[1].item(), 2)) == (2.47, -0.35)
    assert adv[24].item() == 0.5
    two = algorithms.ngrpo(rewards[:8], groups[:8], max_reward=2.0, virtual=2)
    mean, var = 4 / 10, (8 * 0.16 + 2 * 2.56) / 9  # eight 0s and two 2s
    assert two[0].item() == pytest.approx(-mean / math.sqrt(var), abs=1e-5)
    with pytest.raises(ValueError, match="virtual"):
        algorithms.ngrpo(rewards, groups, virtual=0)


def test_the_selector_drops_all_correct_groups_and_keeps_all_wrong_ones():
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 2.0, 2.0])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    assert algorithms.not_all_correct(rewards, groups).tolist() == [False, True, True, False]
    keep = algorithms.not_all_correct(rewards, groups, max_reward=2.0)
    assert keep.tolist() == [True, True, True, False]


def test_the_ngrpo_preset_trains_from_yaml_with_its_parts(tmp_path):
    cfg = tiny_config(tmp_path / "run", steps=2)
    cfg["algorithm"] = yaml.safe_load("preset: ngrpo\nparams: {advantage: {max_reward: 1.0}}")
    cfg["reward"] = {"function": "rewards_for_tests:is_letter"}  # 0/1
    algo = build_config(cfg).algorithm.resolve()
    assert algo.advantage.name == "ngrpo" and algo.select.name == "not_all_correct"
    assert (algo.policy_loss.clip_low, algo.policy_loss.clip_high) == (0.16, 0.24)
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    assert sorted(rows) == [1, 2] and all(math.isfinite(r["policy/loss"]) for r in rows.values())
