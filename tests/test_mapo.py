"""MAPO (Huang et al. 2025, arXiv:2509.18849): GRPO's advantage mixed with the percent
deviation by the group's certainty, on hand-computed groups."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr import algorithms


def test_the_mix_leans_to_the_percent_deviation_as_the_group_grows_certain():
    """Group 0: 7 of 8 right, p = 7/8, lambda = 1 - 4 (7/8)(1/8) = 9/16; mean 7/8, unbiased
    std sqrt(1/8): a right answer gets (7/16) (1/8) / sqrt(1/8) + (9/16) (1/8) / (7/8), the
    wrong one (7/16) (-7/8) / sqrt(1/8) + (9/16) (-1) (GRPO: -2.47). Group 1 (no success of
    reward 1, p = 0, lambda = 1): the pure percent deviation (r - 0.075) / 0.075. Group 2
    (p = 1/2, lambda = 0): GRPO's. An all-equal group: 0."""
    rewards = torch.tensor([1.0] * 7 + [0.0] + [0.0, 0.1, 0.1, 0.1] + [1.0, 0.0, 1.0, 0.0])
    rewards = torch.cat([rewards, torch.ones(3)])
    groups = torch.repeat_interleave(torch.arange(4), torch.tensor([8, 4, 4, 3]))
    adv = algorithms.mapo_advantages(rewards, groups).double()
    s = math.sqrt(1 / 8)
    right = (7 / 16) * (1 / 8) / (s + 1e-6) + (9 / 16) * (1 / 8) / (7 / 8 + 1e-6)
    wrong = (7 / 16) * (-7 / 8) / (s + 1e-6) + (9 / 16) * (-7 / 8) / (7 / 8 + 1e-6)
    assert adv[:8].tolist() == pytest.approx([right] * 7 + [wrong], rel=1e-5)
    assert adv[8:12].tolist() == pytest.approx([-1.0, 1 / 3, 1 / 3, 1 / 3], rel=1e-4)
    grpo = algorithms.grpo(rewards[12:16], torch.zeros(4, dtype=torch.long))
    assert adv[12:16].tolist() == pytest.approx(grpo.tolist(), rel=1e-5)
    assert adv[16:].tolist() == [0.0, 0.0, 0.0]
    halves = algorithms.mapo_advantages(torch.tensor([0.5, 0.5, 0.0]), torch.zeros(3).long())
    assert halves.tolist() == pytest.approx([0.5, 0.5, -1.0], rel=1e-4)  # p = 0: no reward is 1
    with pytest.raises(ValueError, match=">= 0"):
        algorithms.mapo_advantages(torch.tensor([-1.0, 1.0]), torch.zeros(2).long())
