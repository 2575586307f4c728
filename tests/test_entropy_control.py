"""Entropy control (issue 29, part 4): Clip-Cov and KL-Cov (Cui et al. 2025) and Skywork-OR1's
adaptive entropy bonus, on hand-computed examples, in 2-step runs from YAML, and the adaptive
bonus's exact resume."""

from __future__ import annotations

import math

import pytest
import torch
from test_learner_mismatch import _learner, _trajectories
from test_trainer import COMPARED, step_rows, tiny_config

import rlvr.trainer.learner.engine
import rlvr.trainer.learner.policy_gradient
from rlvr.algorithms import (
    POLICY_LOSSES,
    EntropyController,
    adapt_entropy_coef,
    clip_cov_policy_loss,
    kl_cov_policy_loss,
    policy_loss,
    policy_metrics,
    token_covariance,
)
from rlvr.config import build_config
from rlvr.trainer import train

# two sequences of two tokens, A = +1 and -1; log pi and log pi_old per token
LOGP = [[-0.1, -2.0], [-0.5, -3.0]]
OLD = torch.tensor([[-0.2, -2.0], [-0.5, -2.5]], dtype=torch.float64)
ADV = torch.tensor([1.0, -1.0], dtype=torch.float64)
MASK = torch.ones(2, 2)
# mean A = 0, mean log pi = -1.4: Cov = A (log pi + 1.4) = 1.3, -0.6 ; -0.9, 1.6
COV = [[1.3, -0.6], [-0.9, 1.6]]


def _logp() -> torch.Tensor:
    return torch.tensor(LOGP, dtype=torch.float64, requires_grad=True)


def test_token_covariance_by_hand():
    cov = token_covariance(_logp(), ADV, MASK)
    torch.testing.assert_close(cov, torch.tensor(COV, dtype=torch.float64))
    # masked-out tokens are neither counted in the means nor given a value
    masked = token_covariance(_logp(), ADV, torch.tensor([[1.0, 1.0], [1.0, 0.0]]))
    # means over 3 tokens: A 1/3, log pi -0.8667
    a, lp = 1 / 3, (-0.1 - 2.0 - 0.5) / 3
    expected = [[(1 - a) * (-0.1 - lp), (1 - a) * (-2.0 - lp)], [(-1 - a) * (-0.5 - lp), 0.0]]
    torch.testing.assert_close(masked, torch.tensor(expected, dtype=torch.float64))


def test_kl_cov_penalises_the_top_covariance_tokens():
    logp = _logp()
    loss, info = kl_cov_policy_loss(logp, OLD, ADV, MASK, ratio=0.25, coef=1.0)
    # k = 0.25 x 4 = 1 token: the top Cov (1.6, row 1 token 1), + |log pi - log pi_old| = 0.5
    assert info["is_cov_penalised"].tolist() == [[False, False], [False, True]]
    expected = [[-math.exp(0.1), -1.0], [1.0, math.exp(-0.5) + 0.5]]  # -A rho (+ 0.5)
    torch.testing.assert_close(loss.detach(), torch.tensor(expected, dtype=torch.float64))
    loss.sum().backward()  # d/dlogp: -A rho, and beta sign(log pi - log pi_old) = -1 there
    grad = [[-math.exp(0.1), -1.0], [1.0, math.exp(-0.5) - 1.0]]
    torch.testing.assert_close(logp.grad, torch.tensor(grad, dtype=torch.float64))
    _, two = kl_cov_policy_loss(_logp(), OLD, ADV, MASK, ratio=0.5)
    assert two["is_cov_penalised"].tolist() == [[True, False], [False, True]]  # 1.6 and 1.3


def test_clip_cov_takes_a_covariance_band_token_out_unless_ppo_clipped_it():
    logp = _logp()
    loss, info = clip_cov_policy_loss(logp, OLD, ADV, MASK, 0.2, 0.2, ratio=2e-4)
    # band (1, 5): 1.3 and 1.6; row 1 token 1 (rho = e^-0.5 < 0.8, A < 0) is clipped by PPO,
    # so only row 0 token 0 is a candidate; max(int(2e-4 x 4), 1) = 1 token taken out
    assert info["is_cov_detached"].tolist() == [[True, False], [False, False]]
    expected = [[0.0, -1.0], [1.0, 0.8]]  # taken out; -A rho; -A rho; -A clip(rho) = 0.8
    torch.testing.assert_close(loss.detach(), torch.tensor(expected, dtype=torch.float64))
    loss.sum().backward()
    torch.testing.assert_close(
        logp.grad, torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64)
    )
    # a band no token falls in takes nothing out: PPO's loss
    plain, _ = policy_loss("token", _logp(), OLD, ADV, MASK, 0.2, 0.2)
    none, info = clip_cov_policy_loss(_logp(), OLD, ADV, MASK, 0.2, 0.2, cov_low=2.0)
    torch.testing.assert_close(none, plain)
    assert policy_metrics(info, MASK)["cov_detached_frac"] == 0.0


def test_clip_cov_picks_at_random_with_its_own_seeded_stream():
    torch.manual_seed(0)
    logp = torch.randn(8, 16, dtype=torch.float64)
    adv = torch.randn(8, dtype=torch.float64) * 3
    mask = torch.ones(8, 16)
    args = (logp, logp.detach() - 0.01, adv, mask, 1.0, 1.0)
    picks = [clip_cov_policy_loss(*args, ratio=0.05, cov_low=0.0, seed=s)[1] for s in (0, 0, 1)]
    counts = [int(p["is_cov_detached"].sum()) for p in picks]
    assert counts == [6, 6, 6]  # int(0.05 x 128)
    assert torch.equal(picks[0]["is_cov_detached"], picks[1]["is_cov_detached"])
    assert not torch.equal(picks[0]["is_cov_detached"], picks[2]["is_cov_detached"])


# every token a Clip-Cov candidate (an unbounded band, on-policy rho = 1: none clipped by PPO),
# so each step picks int(0.3 x 10) = 3 of the same 10 tokens
CLIP_COV_ALL = {
    "policy_loss": "clip_cov",
    "params": {"policy_loss": {"ratio": 0.3, "cov_low": -1e9, "cov_high": 1e9}},
}


def _recorded_picks(monkeypatch) -> list[torch.Tensor]:
    """The tokens each Clip-Cov call of the learner picks, in order."""
    picks = []
    original = rlvr.trainer.learner.policy_gradient.algorithms.policy_loss

    def recorded(*args, **kwargs):
        loss, info = original(*args, **kwargs)
        picks.append(info["is_cov_detached"].clone())
        return loss, info

    monkeypatch.setattr(rlvr.trainer.learner.policy_gradient.algorithms, "policy_loss", recorded)
    return picks


def test_clip_cov_draws_a_new_pick_each_step_and_the_same_one_at_the_same_step(
    tiny, monkeypatch, tmp_path
):
    """Clip-Cov's stream is keyed by (train.seed, minibatches so far, micro-batch): two steps
    with the same candidates pick different tokens, and a learner at the same count (a resume
    from the checkpoint written after step 1) picks the same ones."""
    from rlvr.checkpoint import TrainerState

    picks = _recorded_picks(monkeypatch)
    data = _trajectories(tiny)
    learner = _learner(tiny, micro_batch_size=4, **CLIP_COV_ALL)
    learner.update(data)
    learner.save_checkpoint(tmp_path, TrainerState(step=1), tiny[1], keep=2, pending=[])
    learner.update(data)
    first, second = picks
    assert int(first.sum()) == int(second.sum()) == 3
    assert not torch.equal(first, second)  # a new pick at the next step
    fresh = _learner(tiny, micro_batch_size=4, **CLIP_COV_ALL)
    fresh.update(data)
    assert torch.equal(picks[2], first)  # the same (seed, count): the same pick
    resumed = _learner(tiny, micro_batch_size=4, **CLIP_COV_ALL)
    resumed.load_checkpoint(tmp_path, warn=print)
    assert resumed.minibatches == 1
    resumed.update(data)
    assert torch.equal(picks[3], second)  # resumed at step 2: step 2's pick


def test_a_skipped_step_does_not_make_the_next_one_draw_its_clip_cov_stream_again(
    tiny, monkeypatch
):
    """Step 1's gradient norm is non-finite (its optimizer step skipped, the schedule not
    advanced): step 2 still picks from a stream of its own, not step 1's again."""
    picks = _recorded_picks(monkeypatch)
    step, calls = rlvr.trainer.learner.engine.optimizer_step, []

    def skipped_the_first_time(*args):
        calls.append(1)
        if len(calls) == 1:
            raise rlvr.trainer.learner.SkipStep("gradient norm", "policy/grad_norm", math.inf)
        step(*args)

    monkeypatch.setattr(rlvr.trainer.learner.engine, "optimizer_step", skipped_the_first_time)
    data = _trajectories(tiny)
    learner = _learner(tiny, micro_batch_size=4, **CLIP_COV_ALL)
    assert learner.update(data)[1] == "gradient norm"
    assert learner.update(data)[1] is None
    first, second = picks
    assert int(first.sum()) == int(second.sum()) == 3
    assert not torch.equal(first, second)  # before: the same stream, the same pick


def test_the_covariance_losses_declare_their_batch_statistics():
    assert POLICY_LOSSES["clip_cov"].batch_statistics and POLICY_LOSSES["kl_cov"].batch_statistics
    assert not POLICY_LOSSES["token"].batch_statistics


def test_adaptive_entropy_coefficient_by_hand():
    # target 0.2, delta 1e-4, max 1.5e-4; entropies 0.1, 0.1, 0.3, 0.1
    coef, seen = 0.0, []
    for entropy in (0.1, 0.1, 0.3, 0.1):
        coef, active = adapt_entropy_coef(coef, entropy, 0.2, 1e-4, 1.5e-4)
        seen.append((coef, active))
    assert seen == [
        pytest.approx((1e-4, True)),
        pytest.approx((1.5e-4, True)),  # clipped at the max
        pytest.approx((0.5e-4, False)),  # above the target: lowered, bonus off
        pytest.approx((1.5e-4, True)),
    ]
    assert adapt_entropy_coef(0.0, 0.5, 0.2, 1e-4, 1.0) == (0.0, False)  # never below 0
    control = EntropyController(0.2, 1e-4, 1.5e-4)
    assert control.bonus == 0.0  # c_0 = 0
    control.update(0.1)
    state = control.state_dict()
    again = EntropyController(0.2, 1e-4, 1.5e-4)
    again.load_state_dict(state)
    assert again.bonus == pytest.approx(1e-4)


@pytest.mark.parametrize(
    "algorithm",
    [
        {"policy_loss": "clip_cov", "params": {"policy_loss": {"ratio": 0.05, "cov_low": 0.0}}},
        {"policy_loss": "kl_cov", "params": {"policy_loss": {"ratio": 0.05}}},
    ],
    ids=["clip_cov", "kl_cov"],
)
def test_the_covariance_losses_train_two_steps_from_yaml(tmp_path, algorithm):
    cfg = tiny_config(tmp_path / "run", steps=2, algorithm={**algorithm, "ppo_epochs": 2})
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    assert sorted(rows) == [1, 2] and all(math.isfinite(r["policy/loss"]) for r in rows.values())
    key = (
        "policy/cov_detached_frac"
        if algorithm["policy_loss"] == "clip_cov"
        else ("policy/cov_penalised_frac")
    )
    assert all(0 < r[key] < 1 for r in rows.values())


def _entropy_config(run_dir, steps):
    # a target above any entropy the tiny model reaches: the bonus is on from step 2, growing
    control = {"entropy_target": 100.0, "entropy_coef_step": 0.01, "entropy_coef_max": 0.025}
    return tiny_config(run_dir, steps=steps, algorithm=control)


def test_adaptive_entropy_control_trains_and_resumes_exactly(tmp_path):
    straight = tmp_path / "straight"
    train(build_config(_entropy_config(straight, 4)))
    reference = step_rows(straight)
    coefs = [reference[s]["policy/entropy_coef"] for s in (1, 2, 3, 4)]
    assert coefs == pytest.approx([0.0, 0.01, 0.02, 0.025])
    run_dir = tmp_path / "run"
    train(build_config(_entropy_config(run_dir, 2)))
    train(build_config(_entropy_config(run_dir, 4)), resume=run_dir)
    rows = step_rows(run_dir)
    for step in (3, 4):
        for key in (*COMPARED, "policy/entropy_coef"):
            assert rows[step][key] == reference[step][key], (step, key)


def test_entropy_target_and_a_fixed_bonus_are_refused_together(tmp_path):
    cfg = tiny_config(tmp_path / "run", algorithm={"entropy_target": 0.2, "entropy_coef": 0.01})
    with pytest.raises(ValueError, match="entropy.target adapts the entropy bonus"):
        build_config(cfg)
