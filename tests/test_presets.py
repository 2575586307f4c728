"""Every preset end to end on a tiny model: no NaN in 3 steps, and it learns a one-token task
within 20 steps (fixed seed, CPU, seconds; at lr 7e-3 the least gain of the mean reward from the
first 5 steps to the last 5 was 0.36, semi-online DPO's, against the 0.2 asked); PPO trains and
checkpoints its value head."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rlvr.algorithms import ADVANTAGES, PRESETS
from rlvr.config import ConfigError, build_config
from rlvr.logging import read_metrics
from rlvr.trainer import train

TRAINABLE = sorted(
    name
    for name, preset in PRESETS.items()
    if preset.objective.samples == "policy"
    and "teacher_logp" not in ADVANTAGES[preset.advantage.name].requires
    and not any(stage.name in ("budgets", "early_exit") for stage in preset.stages)
    and preset.advantage.name != "rlsc"
)
"""Presets that learn from their own samples and a reward alone (SFT and offline DPO learn from
the data's completions, distillation from a teacher: tests/test_objectives.py; HBPO's replies
start with a budget statement and its advantage is on its budget reward's scale:
tests/test_hbpo.py; S-GRPO's exits start with the path's first tokens and the exit phrase, no
one-token reply: tests/test_sgrpo.py; RLSC reads no reward, it sharpens the policy's own
distribution: tests/test_rlsc.py)."""


def one_token_config(run_dir: Path, preset: str, steps: int) -> dict:
    return {
        "model": {"name": "tiny-random-llama"},
        "task": {"name": "arithmetic", "level": 1, "n_eval": 4},
        "reward": {"function": "rewards_for_tests:is_letter"},
        # the publish check (tests/test_publish_check.py) would be a third of these runs' time
        "rollout": {
            "group_size": 8,
            "prompts_per_step": 4,
            "max_new_tokens": 1,
            "publish_check": False,
        },
        "algorithm": {"preset": preset},
        "train": {
            "steps": steps,
            "lr": 7e-3,
            "micro_batch_size": 32,
            "threads": 1,
            "autocast": "fp32",
        },
        "eval": {"before": False, "after": False},
        "logging": {
            "run_dir": str(run_dir),
            "progress": False,
            "tensorboard": False,
            "update_sparsity": False,
        },
        "checkpoint": {"every": 0, "save_final": False},
    }


@pytest.mark.parametrize("preset", TRAINABLE)
def test_preset_learns_a_one_token_task(tmp_path, preset):
    train(build_config(one_token_config(tmp_path, preset, steps=20)))
    rows = [r for r in read_metrics(tmp_path) if "policy/loss" in r]
    assert len(rows) == 20
    for row in rows[:3]:  # no NaN anywhere in the first steps
        assert all(v is not None and math.isfinite(v) for v in row.values()), row
    rewards = [r["reward/mean"] for r in rows]
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last > first + 0.2, (preset, first, last)


def test_ppo_trains_its_value_head_and_checkpoints_it(tmp_path):
    cfg = one_token_config(tmp_path, "ppo", steps=3)
    cfg["checkpoint"] = {"every": 0, "save_final": True}
    train(build_config(cfg))
    rows = [r for r in read_metrics(tmp_path) if "value/loss" in r]
    assert len(rows) == 3 and all(math.isfinite(r["value/loss"]) for r in rows)
    assert rows[-1]["value/mean"] != 0.0  # the zero-initialised critic has moved
    assert (tmp_path / "checkpoints/step_000003/value_head.safetensors").is_file()


def test_contradictory_algorithm_is_a_config_error(tmp_path):
    cfg = one_token_config(tmp_path, "gmpo", steps=1)
    cfg["algorithm"]["advantage"] = "reinforce_pp"  # token-level advantages, sequence ratio
    with pytest.raises(ConfigError, match="algorithm"):
        train(build_config(cfg))
