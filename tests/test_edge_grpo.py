"""EDGE-GRPO's entropy-driven advantage (Zhang et al. 2025, arXiv:2507.21848): by hand, and
selected from YAML on the tiny model."""

from __future__ import annotations

import math

import pytest
import torch
from test_trainer import step_rows, tiny_config

from rlvr import algorithms
from rlvr.config import build_config
from rlvr.trainer import train


def test_each_advantage_is_divided_by_its_entropy_relative_to_the_groups():
    """Group 0: rewards (1, 0), GRPO's ±0.5 / (sqrt(0.5) + 1e-4); mean token entropies over
    each response's own tokens (0.5, 1.5), their mean 1: the confident right answer's advantage
    doubles, the unsure wrong one's penalty is divided by 1.5. Group 1's rewards are equal: 0
    whatever the entropies. A response with zero entropy is divided by the floor, not 0."""
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 1, 1])
    entropy = torch.tensor([[0.5, 0.5, 9.0], [1.0, 2.0, 0.0], [0.1, 0.2, 0.3], [3.0, 1.0, 2.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1]])
    adv = algorithms.entropy_driven_advantages(rewards, groups, entropy, mask)
    grpo = 0.5 / (math.sqrt(0.5) + 1e-4)
    assert adv.tolist() == pytest.approx([grpo * 2, -grpo / 1.5, 0.0, 0.0], rel=1e-6)
    calm = algorithms.entropy_driven_advantages(
        rewards[:2], groups[:2], torch.tensor([[0.0, 0.0], [1.0, 1.0]]), mask[:2, :2]
    )
    assert math.isfinite(calm[0].item()) and calm[0].item() > 0
    with pytest.raises(ValueError, match="both be"):
        algorithms.entropy_driven_advantages(rewards, groups, entropy[:, :2], mask)


def test_edge_grpo_trains_from_yaml_on_the_trainers_entropies(tmp_path):
    cfg = tiny_config(tmp_path / "run", steps=2, algorithm={"advantage": "edge_grpo"})
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    assert sorted(rows) == [1, 2] and all(math.isfinite(r["policy/loss"]) for r in rows.values())
    assert any(r["advantages/abs_mean"] > 0 for r in rows.values())
