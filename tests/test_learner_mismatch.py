"""The learner's sampler/trainer mismatch: ``mismatch/*`` metrics as exact token means over the
batch, and the TIS / MIS weights on the policy loss (algorithms in test_importance_weights.py)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import rlvr.trainer.learner.correction
from rlvr import algorithms
from rlvr.config import build_config
from rlvr.rewards.combined import RewardBreakdown
from rlvr.trainer.batch import Samples
from rlvr.trainer.learner import Forward, Learner, lr_lambda

L4 = math.log(4.0)
# log pi_train - log pi_sampler of every token, rows of 3, 1, 4 and 2 tokens (10 in all)
LOG_RATIOS = [[0.0, 0.0, 0.0], [L4], [0.0] * 4, [-L4, 0.0]]
# token means over the 10 tokens (a mean of the 4 one-row micro-batches' means would differ):
# |log r|: 2 ln 4 / 10; k3 = r - 1 - ln r: (4 - 1 - ln 4) + (1/4 - 1 + ln 4) = 2.25, / 10;
# r outside [0.5, 2]: 4 and 1/4, 2 of 10
MISMATCH = {
    "mismatch/abs_log_ratio": 2 * L4 / 10,
    "mismatch/kl_k3": 0.225,
    "mismatch/ratio_out_of_band_frac": 0.2,
}


def _learner(tiny, micro_batch_size: int = 1, **algorithm) -> Learner:
    """A learner of dr_grpo (no reference) over a copy of the tiny model."""
    model, tokenizer = tiny
    cfg = build_config(
        {
            "model": {"name": "tiny-random-llama"},
            "rollout": {"max_new_tokens": 8},
            "algorithm": {"preset": "dr_grpo", **algorithm},
            "train": {"micro_batch_size": micro_batch_size, "autocast": "fp32", "lr": 1e-3},
        }
    )
    algo = cfg.algorithm.resolve()
    policy = copy.deepcopy(model)  # the fixture's model is shared: train a copy
    optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.train.lr)
    return Learner(
        policy,
        None,
        None,
        optimizer,
        torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg, algo)),
        algo,
        cfg,
        Forward.of(cfg, "policy", torch.float32),
        torch.Generator().manual_seed(0),
        tokenizer.pad_token_id,
    )


def _trajectories(tiny) -> Samples:
    """Two groups of two samples, every advantage non-zero, whose sampler log-probs are the
    trainer's less :data:`LOG_RATIOS`."""
    completions = [[5 + t for t in range(len(row))] for row in LOG_RATIOS]
    rewards = [1.0, 0.0, 1.0, 0.0]
    data = Samples(
        problems=[],
        prompt_ids=[[11, 12, 13], [14, 15]],
        columns={
            "completion_ids": completions,
            "sampler_logprobs": [[0.0] * len(c) for c in completions],
            "finished": [True] * 4,
            "texts": [""] * 4,
            "group_ids": torch.tensor([0, 0, 1, 1]),
            "breakdown": RewardBreakdown.single("r", rewards),
            "rewards": torch.tensor(rewards),
        },
    )
    learner = _learner(tiny, ppo_epochs=2)
    train_logp = learner.prepare(data).old_logp  # pi_old
    return data.with_columns(
        sampler_logprobs=[
            [float(train_logp[i, t]) - r for t, r in enumerate(row)]
            for i, row in enumerate(LOG_RATIOS)
        ]
    )


@pytest.mark.parametrize(
    "algorithm",
    [{}, {"ppo_epochs": 2, "minibatches": 2}],
    ids=["on-policy (from the micro-batches)", "pi_old from prepare, two epochs"],
)
def test_mismatch_metrics_are_token_means_over_the_batch_once(tiny, monkeypatch, algorithm):
    learner = _learner(tiny, **algorithm)
    data = _trajectories(tiny)
    calls = []
    original = algorithms.mismatch_metrics

    def counted(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(rlvr.trainer.learner.correction.algorithms, "mismatch_metrics", counted)
    metrics, bad = learner.update(data)
    assert bad is None
    assert {k: metrics[k] for k in MISMATCH} == pytest.approx(MISMATCH, abs=1e-5)
    assert len(calls) == 4  # one per row (micro_batch_size 1), first epoch only
    assert not any(k.startswith("rollout/") for k in metrics)  # no correction: no weights


@pytest.mark.parametrize(
    ("algorithm", "expected"),
    [
        # rho_t = 1 except 4 (row 1: truncated to 3) and 1/4 (row 3: below 0.3, masked)
        (
            {"tis_cap": 3.0, "mis_band": [0.3, 10.0]},
            {
                "rollout/is_weight_mean": (3 + 3 + 4 + 0 + 1) / 10,
                "rollout/tis_clipped_frac": 0.1,
                "rollout/mis_masked_frac": 0.1,
            },
        ),
        # rho_seq per row: 1, 4 -> 3, 1, 1/4 on its 2 tokens; rows whole in micro-batches of 3
        (
            {"tis_cap": 3.0, "tis_level": "sequence", "ppo_epochs": 2, "micro_batch_size": 3},
            {"rollout/is_weight_mean": (3 + 3 + 4 + 0.5) / 10, "rollout/tis_clipped_frac": 0.1},
        ),
    ],
    ids=["token TIS + MIS", "sequence TIS, two epochs"],
)
def test_importance_weight_statistics(tiny, algorithm, expected):
    metrics, bad = _learner(tiny, **algorithm).update(_trajectories(tiny))
    assert bad is None
    assert {k: v for k, v in metrics.items() if k.startswith("rollout/")} == pytest.approx(
        expected, abs=1e-5
    )


def _run(tmp_path, tis_cap):
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
        assert a["mismatch/abs_log_ratio"] < 1e-4 and a["mismatch/kl_k3"] < 1e-6
        assert b["rollout/is_weight_mean"] == pytest.approx(1.0, abs=1e-4)
        assert b["rollout/tis_clipped_frac"] == 0.0
        assert b["policy/loss"] == pytest.approx(a["policy/loss"], rel=1e-3, abs=1e-6)
        assert "rollout/is_weight_mean" not in a


def test_on_policy_dppo_measures_its_trust_region_against_the_sampler(tiny):
    """DPPO anchors its region to the sampler's log-probs (arXiv:2602.04879, "The Correct
    Anchor for the Trust Region"), not to the recomputed pi_old = pi of an on-policy step,
    against which no token ever leaves it."""
    learner = _learner(tiny, micro_batch_size=4, policy_loss="dppo_tv")  # on-policy
    data = _trajectories(tiny)
    # the sampler gave every token mu = 0.9; the tiny model gives each far less (pi < 0.7), so
    # pi - mu < -delta_low = -0.2: the A < 0 rows (1 and 3, 1 + 2 of the 10 tokens) would push
    # pi further below mu and leave the region; the A > 0 rows move pi towards mu and stay
    data = data.with_columns(
        sampler_logprobs=[[math.log(0.9)] * len(c) for c in data.completion_ids]
    )
    metrics, bad = learner.update(data)
    assert bad is None
    assert metrics["policy/clip_frac_low"] == pytest.approx(0.3)
    assert metrics["policy/clip_frac_high"] == 0.0
    assert metrics["policy/ratio_max"] < 0.7 / 0.9  # r = pi / mu, not pi / pi_old = 1
