"""HAPO's Token Level Group Average (Liu et al. 2025, arXiv:2509.16591): by hand, and selected
from YAML on the tiny model."""

from __future__ import annotations

import math

import pytest
import torch
from test_trainer import step_rows, tiny_config

from rlvr import algorithms
from rlvr.config import build_config
from rlvr.trainer import train


def test_the_groups_statistics_are_over_its_tokens_with_grpos_fallback():
    """Group 0: rewards (1, 0) of 1 and 3 tokens: mu = 1/4, sigma^2 = (0.75^2 + 3 x 0.25^2) / 4
    = 0.1875, A = (0.75, -0.25) / (sqrt(0.1875) + 1e-6) = (sqrt(3), -1/sqrt(3)) (GRPO: ±0.707).
    Group 1: the one right answer of 1 token among three of 30: its TLGA advantage is
    (90/91) / sigma = 9.5 >= 5, so the group takes GRPO's (1.5, -0.5, -0.5, -0.5). Group 2, of
    one, keeps its reward; group 3's rewards are equal: 0."""
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.3, 1.0, 1.0])
    ids = torch.tensor([0, 0, 1, 1, 1, 1, 2, 3, 3])
    lengths = torch.tensor([1, 3, 1, 30, 30, 30, 5, 2, 7])
    got = algorithms.token_level_group_average(rewards, ids, lengths)
    sigma = math.sqrt(0.1875) + 1e-6
    want = [0.75 / sigma, -0.25 / sigma]
    want += [x / (0.5 + 1e-6) for x in (0.75, -0.25, -0.25, -0.25)] + [0.3, 0.0, 0.0]
    torch.testing.assert_close(got, torch.tensor(want))
    assert got[0].item() == pytest.approx(math.sqrt(3), rel=1e-5)
    assert (got[:2] * lengths[:2]).sum().item() == pytest.approx(0.0, abs=1e-6)  # token-weighted
    # a higher threshold keeps group 1's TLGA advantage: (90/91) / sigma
    kept = algorithms.token_level_group_average(rewards, ids, lengths, fallback=20.0)
    sigma1 = math.sqrt((1 * (90 / 91) ** 2 + 90 * (1 / 91) ** 2) / 91) + 1e-6
    assert kept[2].item() == pytest.approx((90 / 91) / sigma1, rel=1e-5)
    # equal lengths: GRPO with the population std
    same = algorithms.token_level_group_average(rewards[:2], ids[:2], torch.tensor([4, 4]))
    torch.testing.assert_close(same, torch.tensor([0.5, -0.5]) / (0.5 + 1e-6))
    with pytest.raises(ValueError, match="lengths must be"):
        algorithms.token_level_group_average(rewards, ids, lengths[:3])


def test_hapo_reads_the_completion_lengths_from_the_mask():
    rewards, ids = torch.tensor([1.0, 0.0]), torch.tensor([0, 0])
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0]])
    inputs = algorithms.AdvantageInputs(rewards, ids, mask=mask)
    got = algorithms.compute_advantages("hapo", inputs).advantages
    torch.testing.assert_close(
        got, algorithms.token_level_group_average(rewards, ids, torch.tensor([1, 3]))
    )


def test_hapo_trains_from_yaml(tmp_path):
    cfg = tiny_config(tmp_path / "run", steps=2, algorithm={"advantage": "hapo"})
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    assert sorted(rows) == [1, 2] and all(math.isfinite(r["policy/loss"]) for r in rows.values())
    assert any(r["advantages/abs_mean"] > 0 for r in rows.values())
