"""PVPO (arXiv:2508.21104): the advantage against the reference's mean reward by hand, the same
on a collected step whose reference played each group, the preset from YAML."""

from __future__ import annotations

import math

import pytest
import torch
from test_lora import built
from test_trainer import step_rows, tiny_config

from rlvr import algorithms
from rlvr.algorithms.advantages import AdvantageInputs, compute_advantages
from rlvr.config import build_config
from rlvr.trainer import train


def test_the_advantage_is_the_reward_minus_the_references_mean_by_hand():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    reference = torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0, 1.0])  # V_sta: 1/3 and 1
    want = [2 / 3, -1 / 3, 2 / 3, 0.0, 0.0, -1.0]  # no std: an all-right reference anchors at 1
    assert algorithms.pvpo_advantages(rewards, groups, reference).tolist() == pytest.approx(want)
    inputs = AdvantageInputs(rewards, groups, reference_rewards=reference)
    assert compute_advantages("pvpo", inputs).advantages.tolist() == pytest.approx(want)
    # an all-equal group still moves where the reference differs (GRPO's would be 0)
    same = algorithms.pvpo_advantages(
        torch.ones(3), torch.zeros(3, dtype=torch.long), reference[:3]
    )
    assert same.tolist() == pytest.approx([2 / 3] * 3)
    with pytest.raises(ValueError, match="reference_rewards"):
        compute_advantages("pvpo", AdvantageInputs(rewards, groups))


def test_the_pvpo_preset_anchors_to_the_references_rollouts_and_trains(tmp_path):
    cfg = tiny_config(tmp_path / "run", steps=2, algorithm={"preset": "pvpo"})
    with built(cfg) as parts:
        data, _ = parts.collector.collect(1)
        step = parts.learners.prepare(data)
        reference = data.columns["signal/reference_rewards"]
    want = algorithms.pvpo_advantages(data.rewards.float(), data.group_ids, reference.float())
    torch.testing.assert_close(step.advantages.float(), want)
    cfg["logging"]["run_dir"] = str(tmp_path / "yaml")
    train(build_config(cfg))
    rows = step_rows(tmp_path / "yaml")
    assert sorted(rows) == [1, 2] and all(math.isfinite(r["policy/loss"]) for r in rows.values())
