"""The seeds' advantage variants (issue 29, part 2), each on a hand-computed example and in a
2-step run from YAML on the tiny model: the unlikeliness reward, RL-ZVP, BNPO, the noisy-verifier
corrections."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
import yaml
from test_trainer import step_rows, tiny_config

from rlvr.algorithms import (
    AdvantageInputs,
    backward_corrected,
    bnpo,
    compute_advantages,
    forward_weights,
    rl_zvp_advantages,
    unlikeliness_rewards,
)
from rlvr.algorithms.bnpo import beta_density, beta_parameters
from rlvr.config import build_config
from rlvr.trainer import train


def _grpo(values: list[float]) -> list[float]:
    mean, std = statistics.mean(values), statistics.stdev(values)
    return [(v - mean) / (std + 1e-6) for v in values]


def test_unlikeliness_scales_rewards_by_likelihood_rank_in_the_group():
    # group 7: log-probs -1, -3, -0.5, -2 -> ranks (0 = least likely) 2, 0, 3, 1
    # group 3 (interleaved): -0.2, -0.1 -> ranks 0, 1
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    logp = torch.tensor([-1.0, -3.0, -0.5, -2.0, -0.2, -0.1])
    ids = torch.tensor([7, 7, 7, 7, 3, 3])
    scaled = unlikeliness_rewards(rewards, logp, ids, beta_rank=0.25)
    # r (1 - 0.25 rank / G): 1 - 0.25*2/4, 1, 0, 1 - 0.25/4 ; 1, 1 - 0.25/2
    assert scaled.tolist() == [0.875, 1.0, 0.0, 0.9375, 1.0, 0.875]
    assert unlikeliness_rewards(rewards, logp, ids, beta_rank=0.0).tolist() == rewards.tolist()


def test_the_unlikeliness_estimator_ranks_by_mean_token_logprob_then_normalises():
    # sample 0: tokens -1, -1 (mean -1); sample 1: -4 on one token, a masked -9 (mean -4)
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]])
    logp = torch.tensor([[-1.0, -1.0], [-4.0, -9.0], [-0.1, -0.3]])
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0, 1.0, 0.0]),
        group_ids=torch.zeros(3, dtype=torch.long),
        mask=mask,
        student_logp=logp,
    )
    out = compute_advantages("unlikeliness", inputs, beta_rank=0.3).advantages
    # ranks: sample 1 (mean -4) 0, sample 0 (-1) 1, sample 2 (-0.2) 2
    expected = _grpo([1 - 0.3 / 3, 1.0, 0.0])
    assert out.tolist() == pytest.approx(expected)
    with pytest.raises(ValueError, match="student_logp"):
        compute_advantages("unlikeliness", AdvantageInputs(inputs.rewards, inputs.group_ids, mask))


def test_rl_zvp_shapes_zero_variance_groups_by_token_entropy():
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    ids = torch.tensor([0, 0, 1, 1, 2, 2])
    entropy = torch.tensor(
        [
            [0.5, 1.0, 2.0],
            [1.0, 1.0, 1.0],
            [1.0, 3.0, 0.5],
            [2.0, 1.0, 9.0],  # its last token is masked out: not in the max
            [1.0, 1.0, 1.0],
            [1.0, 1.0, 1.0],
        ]
    )
    mask = torch.tensor([[1, 1, 1]] * 3 + [[1, 1, 0]] + [[1, 1, 1]] * 2)
    out = rl_zvp_advantages(rewards, ids, entropy, mask, alpha=0.1)
    grpo_pos = 0.5 / (math.sqrt(0.5) + 1e-6)  # the mixed group: GRPO
    expected = [
        [0.05, 0.1, 0.2],  # all right: alpha H
        [0.1, 0.1, 0.1],
        [-0.2, 0.0, -0.25],  # all wrong: -alpha (max H - H), max 3
        [0.0, -0.1, 0.0],  # max over its unmasked tokens: 2
        [grpo_pos] * 3,
        [-grpo_pos] * 3,
    ]
    torch.testing.assert_close(out, torch.tensor(expected))
    inputs = AdvantageInputs(rewards, ids, mask=mask, token_entropy=entropy)
    torch.testing.assert_close(compute_advantages("rl_zvp", inputs, alpha=0.1).advantages, out)
    with pytest.raises(ValueError, match="token_entropy"):
        compute_advantages("rl_zvp", AdvantageInputs(rewards, ids, mask=mask))


def test_bnpo_fits_a_beta_to_the_pass_rates_and_divides_by_its_density():
    # pass rates 1/4, 1/2, 3/4, 1/2: mu = 1/2, unbiased variance (2/16) / 3 = 1/24,
    # c = (1/4)/(1/24) - 1 = 5, a = b = 2.5, alpha = beta = 1 + 2.5/3
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 0, 1, 0], dtype=torch.float64)
    ids = torch.arange(4).repeat_interleave(4)
    alpha, beta = beta_parameters(torch.tensor([0.25, 0.5, 0.75, 0.5]))
    assert alpha == pytest.approx(1 + 2.5 / 3) and beta == pytest.approx(1 + 2.5 / 3)
    b_fn = math.gamma(alpha) ** 2 / math.gamma(2 * alpha)  # B(alpha, alpha)

    def f(p: float) -> float:
        return p ** (alpha - 1) * (1 - p) ** (alpha - 1) / b_fn

    out = bnpo(rewards, ids)
    assert out[0].item() == pytest.approx(0.75 / f(0.25))  # r = 1, p = 1/4
    assert out[1].item() == pytest.approx(-0.25 / f(0.25))
    assert out[4].item() == pytest.approx(0.5 / f(0.5))
    assert out[11].item() == pytest.approx(-0.75 / f(0.75))


def test_bnpo_limits_reinforce_and_grpo():
    # equal pass rates: no spread, alpha = beta = 1, f = 1: A = r - p (REINFORCE, group baseline)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    ids = torch.tensor([0, 0, 1, 1])
    assert bnpo(rewards, ids).tolist() == [0.5, -0.5, -0.5, 0.5]
    # a spread too wide for a Beta (c <= 0: a, b < 0): alpha = beta = 1, clamped as in the code
    assert beta_parameters(torch.tensor([0.0, 1.0])) == (1.0, 1.0)
    # alpha = beta = 3/2: f(p) = (8 / pi) sqrt(p (1 - p)), GRPO's Bernoulli std up to 8 / pi
    p = torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)
    expected = 8 / math.pi * torch.sqrt(p * (1 - p))
    torch.testing.assert_close(beta_density(p, 1.5, 1.5), expected)
    with pytest.raises(ValueError, match=r"rewards in \[0, 1\]"):
        bnpo(torch.tensor([2.0, 0.0]), torch.tensor([0, 0]))


def test_noisy_verifier_corrections_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    # backward: (R - 0.1) / 0.7 -> 0.9/0.7, -0.1/0.7; centred in the group: +-0.5/0.7
    torch.testing.assert_close(
        backward_corrected(rewards, 0.1, 0.2), torch.tensor([0.9, -0.1, -0.1, 0.9]) / 0.7
    )
    inputs = AdvantageInputs(rewards, torch.zeros(4, dtype=torch.long))
    out = compute_advantages(
        "noisy_verifier", inputs, false_positive_rate=0.1, false_negative_rate=0.2
    ).advantages
    torch.testing.assert_close(out, torch.tensor([1.0, -1.0, -1.0, 1.0]) * 0.5 / 0.7)
    # forward: w = rho1 on R = 1, rho1 - 1 on R = 0
    assert forward_weights(rewards, 0.2).tolist() == pytest.approx([0.2, -0.8, -0.8, 0.2])
    forward = compute_advantages(
        "noisy_verifier", inputs, false_negative_rate=0.2, correction="forward"
    ).advantages
    assert forward.tolist() == pytest.approx([0.2, -0.8, -0.8, 0.2])
    with pytest.raises(ValueError, match="binary"):
        backward_corrected(torch.tensor([0.5]), 0.0, 0.1)
    with pytest.raises(ValueError, match="sum"):
        backward_corrected(rewards, 0.5, 0.5)


def test_the_backward_correction_is_unbiased_for_the_clean_reward():
    """E[R^ | R*] = R*: average R^ over the verifier's two outcomes, weighted by their rates."""
    rho0, rho1 = 0.15, 0.3
    one, zero = backward_corrected(
        torch.tensor([1.0, 0.0], dtype=torch.float64), rho0, rho1
    ).tolist()
    assert (1 - rho1) * one + rho1 * zero == pytest.approx(1.0)  # R* = 1
    assert rho0 * one + (1 - rho0) * zero == pytest.approx(0.0, abs=1e-12)  # R* = 0


@pytest.mark.parametrize(
    ("advantage", "params", "reward"),
    [
        ("unlikeliness", {"beta_rank": 0.25}, None),
        ("rl_zvp", {"alpha": 0.1}, None),
        ("bnpo", {}, None),
        ("noisy_verifier", {"false_negative_rate": 0.2}, "rewards_for_tests:is_letter"),
    ],
)
def test_each_trains_two_steps_from_yaml(tmp_path, advantage, params, reward):
    cfg = tiny_config(tmp_path / "run", steps=2)
    cfg["algorithm"] = yaml.safe_load(
        f"preset: grpo\nbeta: 0.0\nadvantage: {advantage}\nparams: {{advantage: {params}}}"
    )
    if reward is not None:
        cfg["reward"] = {"function": reward}
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    assert sorted(rows) == [1, 2]
    assert all(math.isfinite(r["policy/loss"]) for r in rows.values())


def test_aapo_adds_the_clipped_margin_over_the_reference():
    from rlvr.algorithms import aapo

    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    ids = torch.tensor([0, 0, 1, 1])
    reference = torch.tensor([0.0, 0.1, 1.0, 0.9])
    # group 0: GRPO +-1/(std + eps), std = sqrt(0.5); margins clip(1, 0.28), clip(-0.1)
    # group 1: GRPO 0 (equal rewards); margins 0 and 0.1: AAPO's signal where GRPO has none
    g = 0.5 / (math.sqrt(0.5) + 1e-6)
    expected = [g + 0.28, -g - 0.1, 0.0, 0.1]
    assert aapo(rewards, ids, reference).tolist() == pytest.approx(expected)
    inputs = AdvantageInputs(rewards, ids, reference_rewards=reference)
    assert compute_advantages("aapo", inputs).advantages.tolist() == pytest.approx(expected)
    with pytest.raises(ValueError, match="reference_rewards"):
        compute_advantages("aapo", AdvantageInputs(rewards, ids))


def test_the_aapo_preset_samples_the_reference_and_trains_from_yaml(tmp_path):
    cfg = tiny_config(tmp_path / "run", steps=2, algorithm={"preset": "aapo"})
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    assert sorted(rows) == [1, 2] and all(math.isfinite(r["policy/loss"]) for r in rows.values())
    # GRPO alone on letter_fraction rewards has mean 0 in every group; the margin moves it
    assert rows[1]["advantages/mean"] != pytest.approx(0.0, abs=1e-6)


def test_the_reference_engine_keeps_the_initial_policy(tmp_path):
    import contextlib

    from rlvr.rollout.streams import group_keys
    from rlvr.trainer.backends.local import build

    cfg = build_config(tiny_config(tmp_path / "run", algorithm={"preset": "aapo"}))
    with contextlib.ExitStack() as cleanup:
        parts = build(cfg, None, cleanup)
        rollouts, sampling = parts.collector.rollouts, parts.collector.sampling
        problems = [parts.task.train_problem(i) for i in range(2)]
        keys = group_keys(7, 2, 3)
        before = rollouts.run_reference(problems, 3, sampling, keys).completion_ids
        assert rollouts.run(problems, 3, sampling, keys).completion_ids == before  # step 0
        with torch.no_grad():  # an update far from the start
            for param in parts.learners.policy.parameters():
                param.add_(torch.randn_like(param) * 0.5)
        parts.collector.publish(parts.learners.weights(), 1)
        assert rollouts.run(problems, 3, sampling, keys).completion_ids != before
        assert rollouts.run_reference(problems, 3, sampling, keys).completion_ids == before
