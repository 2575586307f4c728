"""The trainer's wiring of three algorithm-zoo parts whose formulas are tested elsewhere, each in
a 1-step (or few-step) run on the tiny model: the 80/20 rule's high-entropy token mask
(``algorithm.top_entropy_rho``), GFPO's oversampling and group filter
(``algorithm.group_filter`` + ``group_filter_oversample``), and TR-DPO's reference updates
(``algorithm.reference_mix`` + ``reference_reset_every``) under the DPO objective."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from test_lora import built
from test_objectives import objective_config
from test_trainer import step_rows, tiny_config

from rlvr.config import build_config
from rlvr.models import load_model
from rlvr.policy import completion_logprobs
from rlvr.trainer import train


def record_plays(collector) -> list[tuple[int, int, Any]]:
    """Wrap ``collector.rollouts.run`` so that each play appends (prompts, n, scored table) to
    the returned list."""
    played: list[tuple[int, int, Any]] = []
    run = collector.rollouts.run

    def recorded(problems, n, *args, **kwargs):
        scored = run(problems, n, *args, **kwargs)
        played.append((len(problems), n, scored))
        return scored

    collector.rollouts.run = recorded
    return played


def test_the_80_20_mask_trains_only_the_top_fifth_of_the_tokens_by_entropy(tmp_path):
    """Wang et al. 2025 ("Beyond the 80/20 Rule"), rho = 0.2: the update's loss mask is the
    ceil(0.2 n) highest-entropy of the batch's n completion tokens, and the loss is over them
    only (token-mean at ratio 1: -sum_{kept} A_i / #kept)."""
    rho = 0.2
    cfg = tiny_config(
        tmp_path / "run",
        steps=1,
        algorithm={"top_entropy_rho": rho, "aggregation": "token-mean"},
        rollout={"dtype": "fp32"},
        train={"micro_batch_size": 8},  # the step's 8 samples in one micro-batch: one loss
    )
    with built(cfg) as parts:
        learner = parts.learners
        data, _ = parts.collector.collect(1)
        step = learner.prepare(data)
        mask = step.batch.action_mask > 0
        kept = step.train_mask > 0
        with torch.no_grad():
            _, entropy = completion_logprobs(
                learner.policy, step.batch, learner.forward.temperature, with_entropy=True
            )
        n = int(mask.sum())
        assert not (kept & ~mask).any()
        assert int(kept.sum()) == math.ceil(rho * n)
        assert entropy[kept].min() >= entropy[mask & ~kept].max() - 1e-5  # the top ones
        adv = step.advantages[:, None].expand(mask.shape)
        expected = -(adv * kept).sum().item() / int(kept.sum())
        every_token = -(adv * mask).sum().item() / n
        assert abs(expected - every_token) > 1e-3  # the mask matters to this batch's loss
        metrics, bad = learner.update(data)
    assert bad is None
    assert metrics["policy/loss"] == pytest.approx(expected, rel=1e-4, abs=1e-5)


def test_gfpo_oversamples_and_keeps_the_best_reward_per_token_of_each_group(tmp_path):
    """Shrivastava et al. 2025 (GFPO): G' = 2 G = 8 samples per prompt, of which the G = 4 of
    highest reward / length are trained on, their advantages normalised among themselves."""
    cfg = tiny_config(
        tmp_path / "run",
        steps=1,
        algorithm={"group_filter": "reward_per_token", "group_filter_oversample": 2},
    )
    with built(cfg) as parts:
        played = record_plays(parts.collector)
        data, _ = parts.collector.collect(1)
        step = parts.learners.prepare(data)
    ((prompts, n, scored),) = played
    assert (prompts, n, len(scored.texts)) == (2, 8, 16)
    assert data.group_ids.tolist() == [0] * 4 + [1] * 4
    rewards = scored.breakdown.total
    filtered = False
    for g in range(2):
        group = range(8 * g, 8 * g + 8)
        score = {i: rewards[i] / max(1, len(scored.completion_ids[i])) for i in group}
        best = sorted(sorted(group, key=lambda i: (-score[i], i))[:4])
        kept = [
            c for c, i in zip(data.completion_ids, data.group_ids.tolist(), strict=True) if i == g
        ]
        assert kept == [scored.completion_ids[i] for i in best], g
        assert data.rewards[data.group_ids == g].tolist() == pytest.approx(
            [rewards[i] for i in best]
        )
        filtered |= best != list(group)[:4]
        assert step.advantages[data.group_ids == g].sum().item() == pytest.approx(0.0, abs=1e-5)
    assert filtered  # the criterion kept other samples than the first G of a group


def test_tr_dpo_soft_updates_the_reference_every_tau_steps_under_the_dpo_objective(tmp_path):
    """Gorbatovski et al. 2024 (TR-DPO), offline DPO: after every tau = 2 steps the reference
    becomes alpha * policy + (1 - alpha) * reference (alpha = 0.25); read from the checkpoints
    of a 5-step run (each step's policy and reference), starting from the initial model."""
    alpha, tau = 0.25, 2
    run = tmp_path / "run"
    cfg = objective_config(run, "dpo", steps=5, reference_reset_every=tau, reference_mix=alpha)
    cfg["train"].update(lr=1e-2, lr_schedule="constant", warmup_steps=0)
    train(build_config(cfg))

    tied = ("lm_head.weight", "model.embed_tokens.weight")  # stored once, under either name

    def weights(step: int, name: str) -> dict[str, torch.Tensor]:
        out = load_file(run / "checkpoints" / f"step_{step:06d}" / f"{name}.safetensors")
        for a, b in (tied, tied[::-1]):
            if a not in out:
                out[a] = out[b]
        return out

    initial = load_model("tiny-random-llama").state_dict()
    keys = set(initial)
    assert set(weights(1, "model")) == set(weights(1, "reference")) == keys
    expected = dict(initial)
    moved = []
    for step in range(1, 6):
        if step - 1 > 0 and (step - 1) % tau == 0:  # before step 3 and 5: after 2, 4 updates
            policy = weights(step - 1, "model")
            expected = {k: alpha * policy[k] + (1 - alpha) * v for k, v in expected.items()}
        reference = weights(step, "reference")
        for key in keys:
            torch.testing.assert_close(reference[key], expected[key], rtol=1e-5, atol=1e-6)
        moved.append(any(not torch.equal(reference[k], initial[k]) for k in keys))
    assert moved == [False, False, True, True, True]
    rows = step_rows(run)
    assert rows[1]["policy/loss"] == pytest.approx(math.log(2), abs=1e-6)  # pi = pi_ref
    assert rows[3]["preference/reward_margin"] != 0.0  # the reference trails, not equals, pi


def test_tr_dpo_hard_update_makes_the_reference_the_policy_for_the_dpo_loss(tmp_path):
    """TR-DPO's hard update (alpha = 1, tau = 2): step 3 starts with the reference equal to the
    policy, so every DPO pair's log-ratio margin is 0 again and its loss log 2 (one minibatch,
    one epoch: all losses before the step's update)."""
    run = tmp_path / "run"
    algorithm = {
        "reference_reset_every": 2,
        "reference_mix": 1.0,
        "ppo_epochs": 1,
        "minibatches": 1,
    }
    cfg = objective_config(run, "dpo", steps=3, **algorithm)
    cfg["train"].update(lr=1e-2, lr_schedule="constant", warmup_steps=0)
    train(build_config(cfg))
    rows = step_rows(run)
    for step in (1, 3):  # pi = pi_ref: the initial model, then the reset reference
        assert rows[step]["policy/loss"] == pytest.approx(math.log(2), abs=1e-6), step
        assert rows[step]["preference/reward_margin"] == pytest.approx(0.0, abs=1e-6), step
    assert rows[2]["preference/reward_margin"] > 1e-3  # in between, pi moved off pi_ref
