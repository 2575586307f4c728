"""Noise-aware advantage reweighting (Shen et al. 2025, arXiv:2508.05928): the weight w* and the
advantages by hand, the values the authors' code gives, the estimator inside a collected step,
the preset from YAML."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from test_lora import built
from test_trainer import step_rows, tiny_config

from rlvr import algorithms
from rlvr.config import load_config
from rlvr.trainer import train


def test_the_weight_by_hand():
    # n = 8, p = 0.1, k right: r = k / 8, t = (r - 0.1) / 0.8,
    # w = 0.8 t (1 - t) / (sqrt(r (1 - r)) sqrt(t (1 - t)))
    k = torch.arange(9, dtype=torch.float64)
    w = algorithms.noise_weights(k / 8, 0.1)
    want = [0.0, 0.42, 0.72, 0.78, 0.80, 0.78, 0.72, 0.42, 0.0]
    assert [round(x, 2) for x in w.tolist()] == want
    r, t = 1 / 8, (1 / 8 - 0.1) / 0.8  # k = 1 exactly
    exact = 0.8 * t * (1 - t) / (math.sqrt(r * (1 - r) + 1e-8) * math.sqrt(t * (1 - t) + 1e-8))
    assert w[1].item() == pytest.approx(exact, rel=1e-12)
    assert w[4].item() == pytest.approx(0.8, abs=1e-7)  # 1 - 2p at one half
    # p = 0.15: a group with one right (or one wrong) answer of 8 is within p of 0 (or 1): gated
    gated = algorithms.noise_weights(torch.tensor([1 / 8, 7 / 8]), 0.15)
    assert gated.tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match=r"in \[0, 0.5\)"):
        algorithms.noise_weights(k / 8, 0.5)


def test_the_advantages_are_grpos_with_an_unbiased_std_times_the_groups_weight():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.5])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2])
    got = algorithms.noise_aware_advantages(rewards, groups, p=0.1)
    # group 0: one right of 4, mean 1/4, unbiased std sqrt(3/16 * 4 / 3) = 1/2
    r, t = 0.25, 0.15 / 0.8
    w0 = 0.8 * t * (1 - t) / (math.sqrt(r * (1 - r) + 1e-8) * math.sqrt(t * (1 - t) + 1e-8))
    want0 = [w0 * (x - 0.25) / (0.5 + 1e-8) for x in (1.0, 0.0, 0.0, 0.0)]
    # group 1: 3 of 4, mean 3/4, std 1/2; the weight is symmetric in k and n - k
    want1 = [w0 * (x - 0.75) / (0.5 + 1e-8) for x in (1.0, 1.0, 0.0, 1.0)]
    torch.testing.assert_close(got[:8], torch.tensor(want0 + want1), rtol=1e-6, atol=1e-7)
    assert got[8].item() == 0.5  # a group of one: its reward, as GRPO's


def test_noise_aware_grpo_scales_each_collected_groups_advantages_and_trains_from_yaml(tmp_path):
    cfg = tiny_config(tmp_path / "run", steps=2, algorithm={"preset": "noise_aware_grpo"})
    del cfg["algorithm"]["kl"]
    with built(cfg) as parts:
        data, _ = parts.collector.collect(1)
        step = parts.learners.prepare(data)
    want = algorithms.noise_aware_advantages(data.rewards.float(), data.group_ids, 0.1)
    torch.testing.assert_close(step.advantages.float(), want)
    path = tmp_path / "noise.yaml"
    cfg["logging"]["run_dir"] = str(tmp_path / "yaml")
    cfg["algorithm"]["advantage"] = {"name": "noise_aware", "p": 0.15}
    path.write_text(yaml.safe_dump(cfg))
    train(load_config(path))
    rows = step_rows(tmp_path / "yaml")
    assert all(math.isfinite(rows[s]["policy/loss"]) for s in (1, 2))
