"""Truncated importance sampling (TIS): the weights on a hand example and inside the trainer."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms import truncated_importance_weights


def test_weights_are_truncated_ratios_on_a_hand_example():
    train = torch.tensor([[math.log(0.5), math.log(0.9), math.log(0.2)]])
    sampler = torch.tensor([[math.log(0.25), math.log(0.9), math.log(0.4)]])
    mask = torch.tensor([[1, 1, 0]])
    w = truncated_importance_weights(train, sampler, mask, cap=1.5)
    # ratios 2.0 -> capped at 1.5, 1.0, (0.5 masked out)
    assert w[0].tolist() == pytest.approx([1.5, 1.0, 0.0])
    with pytest.raises(ValueError):
        truncated_importance_weights(train, sampler, mask, cap=0.0)


def test_weights_carry_no_gradient():
    train = torch.zeros(1, 2, requires_grad=True)
    w = truncated_importance_weights(train, torch.zeros(1, 2), torch.ones(1, 2), cap=2.0)
    assert not w.requires_grad


def _run(tmp_path, tis_cap):
    from rlvr.config import build_config
    from rlvr.logging import read_metrics
    from rlvr.trainer import train

    cfg = build_config(
        {
            "model": {"name": "tiny-random-llama"},
            "task": {"name": "arithmetic", "level": 1, "n_eval": 4},
            "rollout": {
                "group_size": 4,
                "prompts_per_step": 2,
                "max_new_tokens": 6,
                "dtype": "fp32",
            },
            "algorithm": {"tis_cap": tis_cap},
            "reward": {"function": "rewards_for_tests:letter_fraction"},
            "train": {"steps": 2, "threads": 1, "autocast": "fp32"},
            "eval": {"before": False, "after": False},
            "logging": {"run_dir": str(tmp_path), "progress": False, "tensorboard": False},
            "checkpoint": {"every": 0, "save_final": False},
        }
    )
    train(cfg)
    return [r for r in read_metrics(tmp_path) if r["step"] >= 1]


def test_tis_is_a_no_op_when_sampler_and_trainer_agree(tmp_path):
    # fp32 sampling and fp32 training: pi_train / pi_sampler = 1 up to rounding
    plain = _run(tmp_path / "plain", None)
    tis = _run(tmp_path / "tis", 2.0)
    for a, b in zip(plain, tis, strict=True):
        assert b["rollout/tis_weight_mean"] == pytest.approx(1.0, abs=1e-4)
        assert b["rollout/tis_clipped_frac"] == 0.0
        assert b["policy/loss"] == pytest.approx(a["policy/loss"], rel=1e-3, abs=1e-6)
        assert "rollout/tis_weight_mean" not in a
