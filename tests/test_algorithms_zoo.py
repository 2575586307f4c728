"""Tests for the algorithm zoo: new advantages, loss kinds, KL, shaping, filters, presets.

Hand-computed examples carry their formula in a comment; property tests check the identities
the docs claim (on-policy gradients, micro-batch invariance, GAE, REINFORCE++ whitening).
"""

from __future__ import annotations

import inspect
import math
import typing

import pytest
import torch

from rlvr.algorithms import (
    ADVANTAGES,
    AGGREGATIONS,
    GROUP_SELECTORS,
    KL_ESTIMATORS,
    KL_PLACEMENTS,
    NORMALIZATIONS,
    POLICY_LOSSES,
    POLICY_METRICS,
    PRESETS,
    AdvantageInputs,
    GroupAccumulator,
    advantage_kwargs,
    aggregate,
    compute_advantages,
    dr_grpo,
    entropy_bonus,
    entropy_threshold,
    gae,
    get_preset,
    gpg,
    group_filter,
    informative_groups,
    kl_k2,
    kl_k3,
    kl_k3_st,
    kl_penalty,
    normalize_batch,
    overlong_penalty,
    policy_loss,
    policy_metrics,
    preset_advantages,
    reinforce,
    reinforce_pp,
    remax,
    resolve,
    reward_to_go,
    should_reset_reference,
    token_rewards,
    top_entropy_mask,
    validate,
    value_loss,
    weight_by_sign,
)
from rlvr.algorithms.schema import PARTS, SCALARS, part_fields
from rlvr.config import AlgorithmConfig, ConfigError, build_config

MAX_LEN = 6
LN2 = math.log(2.0)


def _t(values: list) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def _ids(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long)


def _logps(ratios: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """logp (leaf, requires grad), old_logp [B, T] with exp(logp - old_logp) = ratios."""
    old = torch.full((len(ratios), len(ratios[0])), -1.0, dtype=torch.float64)
    return (old + torch.log(_t(ratios))).requires_grad_(True), old


def _batch(seed: int, batch: int = 8, length: int = MAX_LEN, off_policy: float = 0.0):
    """logp (leaf), old_logp, advantages [B], ragged mask [B, T] with one empty row."""
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(batch, length, generator=gen, dtype=torch.float64) * 3
    logp = old + off_policy * torch.randn(old.shape, generator=gen, dtype=torch.float64)
    adv = torch.randn(batch, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, length + 1, (batch,), generator=gen)
    lengths[batch // 2] = 0
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return logp.detach().requires_grad_(True), old, adv, mask


# ---------------------------------------------------------------- outcome advantages


def test_reinforce_constant_baseline() -> None:
    # A = r - b, b = 0.5: [1 - 0.5, 0 - 0.5]
    torch.testing.assert_close(reinforce(_t([1, 0]), 0.5), _t([0.5, -0.5]))


def test_gpg_valid_sample_scaling() -> None:
    # group 0 [1, 0] valid, group 1 [1, 1] constant, group 2 [2] alone: N = 5, N_valid = 2
    # alpha = 5 / 2 = 2.5; A = 2.5 * (r - 0.5) on group 0, 0 on group 1, r = 2 on group 2
    rewards, ids = _t([1, 0, 1, 1, 2]), _ids([0, 0, 1, 1, 2])
    torch.testing.assert_close(gpg(rewards, ids), _t([1.25, -1.25, 0, 0, 2]))
    torch.testing.assert_close(gpg(rewards, ids, valid_scaling=False), _t([0.5, -0.5, 0, 0, 2]))
    # no valid group: alpha = 1, constant groups exactly 0 (0.1 * 3 / 3 != 0.1 in floating point)
    assert gpg(_t([0.1, 0.1, 0.1]), _ids([0, 0, 0])).tolist() == [0.0, 0.0, 0.0]


def test_remax_greedy_baseline() -> None:
    # A = r - r_greedy: [1 - 0, 0 - 0, 1 - 1]
    torch.testing.assert_close(remax(_t([1, 0, 1]), _t([0, 0, 1])), _t([1, 0, 0]))
    with pytest.raises(ValueError, match="equal length"):
        remax(_t([1, 0]), _t([1]))


def test_weight_by_sign() -> None:
    # W-REINFORCE lambda = 0.1: A > 0 scaled by 0.1, A < 0 by 1
    torch.testing.assert_close(weight_by_sign(_t([2, -1, 0]), 0.1, 1.0), _t([0.2, -1, 0]))
    torch.testing.assert_close(weight_by_sign(_t([2, -1]), 0.0, 1.0), _t([0, -1]))  # NSR


def test_normalize_batch_sequence_and_token() -> None:
    # [1, 2, 3]: mean 2, population std sqrt(2/3) = 0.816497
    expected = 1 / (math.sqrt(2 / 3) + 1e-6)
    torch.testing.assert_close(normalize_batch(_t([1, 2, 3])), _t([-expected, 0, expected]))
    # per token: masked values [1, 2, 3] (99 masked out -> output 0)
    adv, mask = _t([[1, 2], [3, 99]]), _t([[1, 1], [1, 0]])
    torch.testing.assert_close(normalize_batch(adv, mask), _t([[-expected, 0], [expected, 0]]))
    with pytest.raises(ValueError, match="mask"):
        normalize_batch(adv)


# ---------------------------------------------------------------- token-level advantages


def test_token_rewards() -> None:
    # R_t = -beta * KL_t on tokens, + r_i at the last unmasked token; beta = 0.5
    # row 0: [-0.05, -0.1 + 1, 0 (masked)]; row 1: [-0.15, -0.05, -0.1 + 2]; row 2 empty: 0
    kl = _t([[0.1, 0.2, 9.0], [0.3, 0.1, 0.2], [0.5, 0.5, 0.5]])
    mask = _t([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    out = token_rewards(_t([1, 2, 3]), mask, kl, beta=0.5)
    torch.testing.assert_close(out, _t([[-0.05, 0.9, 0], [-0.15, -0.05, 1.9], [0, 0, 0]]))
    with pytest.raises(ValueError, match="token_kl"):
        token_rewards(_t([1, 2, 3]), mask, None, beta=0.5)


def test_reward_to_go() -> None:
    # G_t = sum_{s >= t} R_s: [0.1 + 0.2 + 1, 0.2 + 1, 1]
    torch.testing.assert_close(reward_to_go(_t([[0.1, 0.2, 1.0]])), _t([[1.3, 1.2, 1.0]]))


def test_reinforce_pp_hand_computed() -> None:
    # beta = 0: returns [[1, 1], [0, -]]; masked tokens 1, 1, 0: mean 2/3, pop std sqrt(2)/3
    # A = (1 - 2/3) / (sqrt(2)/3) = 1/sqrt(2), (0 - 2/3) / (sqrt(2)/3) = -sqrt(2)
    adv, returns = reinforce_pp(_t([1, 0]), _t([[1, 1], [1, 0]]))
    torch.testing.assert_close(adv, _t([[0.707106, 0.707106], [-1.414213, 0]]), atol=1e-5, rtol=0)
    torch.testing.assert_close(returns, _t([[1, 1], [0, 0]]))
    # with KL: R = [-0.5 * 0.2, -0.5 * 0.4 + 1] = [-0.1, 0.8]; G = [0.7, 0.8]
    # mean 0.75, std 0.05 -> A = [-1, 1]
    adv, returns = reinforce_pp(_t([1]), _t([[1, 1]]), _t([[0.2, 0.4]]), beta=0.5)
    torch.testing.assert_close(returns, _t([[0.7, 0.8]]))
    torch.testing.assert_close(adv, _t([[-1.0, 1.0]]), atol=1e-4, rtol=0)


def test_reinforce_pp_baseline_hand_computed() -> None:
    # centred r - mean_g: [0.5, -0.5, 0, 0]; one token each; pop std sqrt(0.5 / 4) = 0.353553
    # A = [0.5, -0.5, 0, 0] / 0.353553 = [sqrt(2), -sqrt(2), 0, 0]
    inputs = AdvantageInputs(_t([1, 0, 1, 1]), _ids([0, 0, 1, 1]), mask=torch.ones(4, 1))
    out = compute_advantages("reinforce_pp_baseline", inputs)
    torch.testing.assert_close(
        out.advantages, _t([[1.414213], [-1.414213], [0], [0]]), atol=1e-5, rtol=0
    )
    torch.testing.assert_close(out.returns, _t([[0.5], [-0.5], [0], [0]]))


@pytest.mark.parametrize("name", ["reinforce_pp", "reinforce_pp_baseline"])
def test_reinforce_pp_zero_masked_mean_over_batch(name: str) -> None:
    gen = torch.Generator().manual_seed(7)
    _, _, _, mask = _batch(7, batch=12)
    rewards = torch.randint(0, 2, (12,), generator=gen).double()
    kl = torch.rand(mask.shape, generator=gen, dtype=torch.float64)
    inputs = AdvantageInputs(rewards, _ids([0, 1, 2] * 4), mask=mask, token_kl=kl)
    adv = compute_advantages(name, inputs, beta=0.1).advantages
    m = mask.double()
    assert abs((adv * m).sum().item() / m.sum().item()) < 1e-12  # masked mean 0
    std = ((adv**2 * m).sum() / m.sum()).sqrt().item()
    assert std == pytest.approx(1.0, abs=1e-4)  # population std 1 (up to eps)
    assert (adv[~mask] == 0).all()


def test_gae_hand_computed() -> None:
    # R = [0, 0, 1], V = [0.5, 0.6, 0.7], gamma = 1, lam = 0.5:
    # t2: delta = 1 - 0.7 = 0.3, A = 0.3; t1: delta = 0.7 - 0.6 = 0.1, A = 0.1 + 0.5 * 0.3 = 0.25
    # t0: delta = 0.6 - 0.5 = 0.1, A = 0.1 + 0.5 * 0.25 = 0.225; G = A + V
    rewards, values, mask = _t([[0, 0, 1]]), _t([[0.5, 0.6, 0.7]]), _t([[1, 1, 1]])
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=0.5)
    torch.testing.assert_close(adv, _t([[0.225, 0.25, 0.3]]))
    torch.testing.assert_close(ret, _t([[0.725, 0.85, 1.0]]))
    # gamma = 0.5, lam = 1: t2: A = 0.3; t1: delta = 0.5 * 0.7 - 0.6 = -0.25, A = -0.25 + 0.15
    # = -0.1; t0: delta = 0.5 * 0.6 - 0.5 = -0.2, A = -0.2 + 0.5 * (-0.1) = -0.25
    adv, _ = gae(rewards, values, mask, gamma=0.5, lam=1.0)
    torch.testing.assert_close(adv, _t([[-0.25, -0.1, 0.3]]))


def test_gae_skips_masked_positions() -> None:
    # mask [1, 0, 1]: the masked value 99 is ignored; A_0 = sum R - V_0 = 1 - 0.5 = 0.5
    adv, ret = gae(_t([[0, 0, 1]]), _t([[0.5, 99.0, 0.7]]), _t([[1, 0, 1]]))
    torch.testing.assert_close(adv, _t([[0.5, 0, 0.3]]))
    torch.testing.assert_close(ret, _t([[1.0, 0, 1.0]]))


def test_gae_lambda_one_gamma_one_is_returns_minus_values() -> None:
    gen = torch.Generator().manual_seed(11)
    _, _, _, mask = _batch(11, batch=10)
    rewards = torch.randn(10, generator=gen, dtype=torch.float64)
    kl = torch.rand(mask.shape, generator=gen, dtype=torch.float64)
    values = torch.randn(mask.shape, generator=gen, dtype=torch.float64)
    tok = token_rewards(rewards, mask, kl, beta=0.1)
    adv, ret = gae(tok, values, mask, gamma=1.0, lam=1.0)
    m = mask.double()
    torch.testing.assert_close(adv, (reward_to_go(tok) - values) * m)
    torch.testing.assert_close(ret, reward_to_go(tok) * m)


# ---------------------------------------------------------------- the uniform convention


def test_compute_advantages_uniform_convention() -> None:
    rewards, ids = _t([1, 0, 0, 1]), _ids([0, 0, 1, 1])
    mask = torch.ones(4, 2, dtype=torch.bool)
    inputs = AdvantageInputs(
        rewards,
        ids,
        mask=mask,
        token_kl=torch.zeros(4, 2, dtype=torch.float64),
        values=torch.zeros(4, 2, dtype=torch.float64),
        greedy_rewards=_t([1, 1, 0, 0]),
        student_logp=torch.zeros(4, 2, dtype=torch.float64),
        teacher_logp=torch.zeros(4, 2, dtype=torch.float64),
        token_entropy=torch.ones(4, 2, dtype=torch.float64),
        baselines=torch.full((4,), 0.5, dtype=torch.float64),
        reference_rewards=torch.zeros(4, dtype=torch.float64),
        reference_values=torch.full((4,), 0.5, dtype=torch.float64),
        budgets=torch.tensor([512.0, 512.0, 1024.0, 1024.0], dtype=torch.float64),
        reward_terms=rewards[:, None],
        term_weights=torch.ones(1, dtype=torch.float64),
        tree_segments=torch.tensor([[0, 0], [1, 1], [0, 0], [1, 1]]),  # one-segment trees
        step_rewards=torch.tensor([[float("nan"), 1.0]] * 4, dtype=torch.float64),  # one step
    )
    for name, estimator in ADVANTAGES.items():
        out = compute_advantages(name, inputs)
        assert out.advantages.shape == ((4, 2) if estimator.token_level else (4,)), name
        assert (out.returns is not None) == (
            name in ("gae", "reinforce_pp", "reinforce_pp_baseline")
        )
    torch.testing.assert_close(
        compute_advantages("dr_grpo", inputs).advantages, dr_grpo(rewards, ids)
    )
    torch.testing.assert_close(compute_advantages("remax", inputs).advantages, _t([0, -1, 0, 1]))
    alol = compute_advantages("alol", inputs).advantages  # max(r - V_ref, 0)
    torch.testing.assert_close(alol, _t([0.5, 0, 0, 0.5]))


def test_compute_advantages_missing_inputs_are_named() -> None:
    inputs = AdvantageInputs(_t([1, 0]), _ids([0, 0]))
    with pytest.raises(
        ValueError, match="remax needs greedy_rewards: the rollout must add one greedy completion"
    ):
        compute_advantages("remax", inputs)
    with pytest.raises(ValueError, match="gae needs mask"):
        compute_advantages("gae", inputs)
    masked = AdvantageInputs(_t([1, 0]), _ids([0, 0]), mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match="gae needs values"):
        compute_advantages("gae", masked)
    with pytest.raises(ValueError, match="reinforce_pp needs token_kl"):
        compute_advantages("reinforce_pp", masked, beta=0.1)
    with pytest.raises(ValueError, match=r"unknown hyperparameters \['beta'\]; accepted: eps"):
        compute_advantages("grpo", inputs, beta=0.1)


def test_advantage_inputs_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match="equal length"):
        AdvantageInputs(_t([1, 0]), _ids([0]))
    with pytest.raises(ValueError, match=r"mask must be \[2, T\]"):
        AdvantageInputs(_t([1, 0]), _ids([0, 0]), mask=torch.ones(3, 2))
    with pytest.raises(ValueError, match="values must have the mask's shape"):
        AdvantageInputs(_t([1, 0]), _ids([0, 0]), mask=torch.ones(2, 2), values=torch.ones(2, 3))
    with pytest.raises(ValueError, match="greedy_rewards must be"):
        AdvantageInputs(_t([1, 0]), _ids([0, 0]), greedy_rewards=_t([1]))


# ---------------------------------------------------------------- KL and regularisers


def test_k3_straight_through_value_and_gradient() -> None:
    # pi = 0.5, pi_ref = 0.25: value = k3 = 0.5 + ln 2 - 1 = 0.193147
    # d k2 / d logp = log ratio = ln 2; d k3 / d logp would be 1 - pi_ref/pi = 0.5
    logp = _t([[math.log(0.5)]]).requires_grad_(True)
    ref = _t([[math.log(0.25)]]).requires_grad_(True)
    value = kl_k3_st(logp, ref)
    torch.testing.assert_close(value, _t([[0.193147]]), atol=1e-6, rtol=0)
    value.sum().backward()
    torch.testing.assert_close(logp.grad, _t([[LN2]]))
    torch.testing.assert_close(ref.grad, _t([[-LN2]]))
    torch.testing.assert_close(kl_penalty("k3+", logp, ref), value)


def test_k3_straight_through_random() -> None:
    gen = torch.Generator().manual_seed(3)
    logp = torch.randn(4, 5, generator=gen, dtype=torch.float64).requires_grad_(True)
    ref = torch.randn(4, 5, generator=gen, dtype=torch.float64)
    st = kl_k3_st(logp, ref)
    torch.testing.assert_close(st, kl_k3(logp, ref))
    (grad_st,) = torch.autograd.grad(st.sum(), logp)
    (grad_k2,) = torch.autograd.grad(kl_k2(logp, ref).sum(), logp)
    torch.testing.assert_close(grad_st, grad_k2)


def test_entropy_bonus() -> None:
    # L_t = -c * H_t, c = 0.01
    torch.testing.assert_close(entropy_bonus(_t([[1.0, 2.0]]), 0.01), _t([[-0.01, -0.02]]))


def test_should_reset_reference() -> None:
    # every = 3: after steps 3 and 6 of 0..7, never at step 0
    assert [s for s in range(8) if should_reset_reference(s, 3)] == [3, 6]
    assert not any(should_reset_reference(s, 0) for s in range(5))
    with pytest.raises(ValueError, match="every"):
        should_reset_reference(1, -1)


# ---------------------------------------------------------------- policy loss kinds


def test_gspo_hand_computed() -> None:
    # rho = [2, 0.5]: mean log rho = (ln 2 - ln 2) / 2 = 0 -> s = 1, A = 1: L = -s = -1 per token
    # gradient of -A * s_{i,t} w.r.t. logp_t = -A * s = -1 (token form)
    logp, old = _logps([[2.0, 0.5]])
    mask = torch.ones(1, 2, dtype=torch.bool)
    loss, info = policy_loss("sequence", logp, old, _t([1.0]), mask, 3e-4, 4e-4)
    torch.testing.assert_close(loss, _t([[-1.0, -1.0]]))
    torch.testing.assert_close(info["ratio"], _t([[1.0, 1.0]]))
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, _t([[-1.0, -1.0]]))


def test_gspo_clips_the_sequence_ratio() -> None:
    # log rho = [0.001, 0], masked third token ignored: s = exp(0.0005) = 1.000500 > 1 + 4e-4
    # A = 1: L = max(-1.0005, -1.0004) = -1.0004, no gradient
    old = torch.full((1, 3), -1.0, dtype=torch.float64)
    logp = (old + _t([[0.001, 0.0, 5.0]])).requires_grad_(True)
    mask = _t([[1, 1, 0]])
    loss, info = policy_loss("sequence", logp, old, _t([1.0]), mask, 3e-4, 4e-4)
    torch.testing.assert_close(loss[:, :2], _t([[-1.0004, -1.0004]]))
    assert info["is_clipped_high"][0, :2].tolist() == [True, True]
    aggregate(loss, mask, "seq-mean-token-mean").backward()
    assert logp.grad.abs().sum().item() == 0.0


def test_gspo_on_one_token_completions_equals_token_clipping() -> None:
    gen = torch.Generator().manual_seed(5)
    old = -torch.rand(16, 1, generator=gen, dtype=torch.float64)
    logp_seq = (old + 0.3 * torch.randn(16, 1, generator=gen, dtype=torch.float64)).requires_grad_(
        True
    )
    logp_tok = logp_seq.detach().clone().requires_grad_(True)
    adv = torch.randn(16, generator=gen, dtype=torch.float64)
    mask = torch.ones(16, 1, dtype=torch.bool)
    seq, _ = policy_loss("sequence", logp_seq, old, adv, mask, 0.2, 0.28, dual_clip=3.0)
    tok, _ = policy_loss("token", logp_tok, old, adv, mask, 0.2, 0.28, dual_clip=3.0)
    torch.testing.assert_close(seq, tok)
    seq.sum().backward()
    tok.sum().backward()
    torch.testing.assert_close(logp_seq.grad, logp_tok.grad)


def test_gmpo_hand_computed() -> None:
    # log rho = [0.5, -0.1], clip (-0.4, 0.4)
    # A = +1: min(log rho, clip) = [0.4, -0.1], mean 0.15 -> J = exp(0.15) = 1.161834, L = -J
    # A = -1: -min(-log rho, -clip) = max(log rho, clip) = [0.5, -0.1], mean 0.2
    #         -> J = -exp(0.2) = -1.221403, L = 1.221403
    old = torch.full((2, 2), -1.0, dtype=torch.float64)
    logp = old + _t([[0.5, -0.1], [0.5, -0.1]])
    mask = torch.ones(2, 2)
    loss, info = policy_loss("geometric", logp, old, _t([1.0, -1.0]), mask, 0.4, 0.4)
    torch.testing.assert_close(loss, _t([[-1.161834] * 2, [1.221403] * 2]), atol=1e-6, rtol=0)
    assert info["is_clipped_high"].tolist() == [[True, False], [False, False]]
    assert info["is_clipped_low"].tolist() == [[False, False], [False, False]]


def test_gmpo_needs_sequence_advantages() -> None:
    logp, old = _logps([[1.0, 1.0]])
    with pytest.raises(ValueError, match=r"per-sequence advantages \[B\]"):
        policy_loss("geometric", logp, old, _t([[1.0, 1.0]]), torch.ones(1, 2), 0.4, 0.4)


def test_cispo_hand_computed() -> None:
    # rho = [2, 0.5], A = 1, weight clip [1 - 1, 1 + 0.28] -> w = [1.28, 0.5]
    # L = -w * A * logp, logp = -1 +- ln 2: [1.28 * 0.306853, 0.5 * 1.693147]; dL/dlogp = -w
    logp, old = _logps([[2.0, 0.5]])
    loss, info = policy_loss("cispo", logp, old, _t([1.0]), torch.ones(1, 2), 1.0, 0.28)
    torch.testing.assert_close(loss, _t([[0.392772, 0.846574]]), atol=1e-6, rtol=0)
    assert info["is_clipped_high"].tolist() == [[True, False]]
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, _t([[-1.28, -0.5]]))


def test_no_ratio_loss_hand_computed() -> None:
    # L = -A * logp with A = [2, -1]: logp = -1 + ln rho; dL/dlogp = -A
    logp, old = _logps([[1.0], [3.0]])
    loss, info = policy_loss("none", logp, old, _t([2.0, -1.0]), torch.ones(2, 1))
    torch.testing.assert_close(loss, _t([[2.0], [-1 + math.log(3.0)]]))
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, _t([[-2.0], [1.0]]))
    assert not info["is_clipped_high"].any()


def test_dual_clip_on_sequence_ratio_and_rejections() -> None:
    # s = exp(mean log rho) = 5 for rho = [5, 5]; A = -1, c = 3: max(5, 1.2) = 5 -> min(5, 3) = 3
    logp, old = _logps([[5.0, 5.0]])
    mask = torch.ones(1, 2)
    loss, info = policy_loss("sequence", logp, old, _t([-1.0]), mask, 0.2, 0.2, dual_clip=3.0)
    torch.testing.assert_close(loss, _t([[3.0, 3.0]]))
    assert info["is_dual_clipped"].all()
    for kind in ("geometric", "cispo", "none"):
        with pytest.raises(ValueError, match="dual_clip applies to the token, sequence"):
            policy_loss(kind, logp, old, _t([-1.0]), mask, dual_clip=3.0)
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        policy_loss("token", logp, old, _t([-1.0]), mask, dual_clip=1.0)


def test_policy_loss_errors() -> None:
    logp, old = _logps([[1.0, 1.0]])
    with pytest.raises(
        ValueError,
        match="'ppo'; registered: alol, cispo, clip_cov, dppo_kl, dppo_tv, geometric, hapo, kl_cov, lp_reg, "
        "none, sapo, sequence, simple_po, token",
    ):
        policy_loss("ppo", logp, old, _t([1.0]), torch.ones(1, 2))
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        policy_loss("token", logp, old, _t([1.0]), torch.ones(1, 3))


def _proxy(kind: str, like: torch.Tensor) -> dict[str, torch.Tensor]:
    """The inputs a kind reads beside the standard ones, set so that its loss is the clipped
    surrogate the others are checked against: a min-p proxy (Lp-Reg) filtered everywhere (-inf,
    no token is regularised); token entropies (HAPO) all equal, so every token sits at the
    pivot (h_hat = 0: neither its clip nor its advantage adapts); the reference's log-probs
    (A-LoL) those of pi_old, so its importance weight is the ratio to pi_old."""
    extras = {}
    if POLICY_LOSSES[kind].needs_reference:
        extras["ref_logp"] = like.detach()
    if POLICY_LOSSES[kind].min_p_proxy:
        extras["proxy_logp"] = torch.full_like(like, float("-inf"))
    if "entropy" in inspect.signature(POLICY_LOSSES[kind].fn).parameters:
        extras["entropy"] = torch.ones_like(like)
    return extras


@pytest.mark.parametrize("mode", list(AGGREGATIONS))
@pytest.mark.parametrize("kind", list(POLICY_LOSSES))
def test_on_policy_ratio_one_and_vanilla_gradient(kind: str, mode: str) -> None:
    # first minibatch of an on-policy step: old = logp.detach(), every ratio is 1 and
    # dL/dlogp_{i,t} = -A_i * m_{i,t} / normaliser_{i,t} for every kind and aggregation
    logp, _, adv, mask = _batch(3)
    loss, info = policy_loss(kind, logp, logp.detach(), adv, mask, 0.2, 0.28, **_proxy(kind, logp))
    assert torch.equal(info["ratio"], torch.ones_like(info["ratio"]))
    assert not (info["is_clipped_low"] | info["is_clipped_high"]).any()
    aggregate(loss, mask, mode, max_len=MAX_LEN).backward()
    m = mask.double()
    batch = m.shape[0]
    normaliser = {
        "token-mean": m.sum().expand_as(m),
        "seq-mean-token-mean": batch * m.sum(-1, keepdim=True).clamp_min(1).expand_as(m),
        "seq-mean-token-sum": torch.full_like(m, batch),
        "seq-mean-token-sum-norm": torch.full_like(m, batch * MAX_LEN),
    }[mode]
    torch.testing.assert_close(logp.grad, -adv[:, None] * m / normaliser)


@pytest.mark.parametrize("num_micro", [1, 2, 4])
@pytest.mark.parametrize("mode", list(AGGREGATIONS))
@pytest.mark.parametrize("kind", list(POLICY_LOSSES))
def test_micro_batch_invariance_every_kind(kind: str, mode: str, num_micro: int) -> None:
    # sum over micro-batches (with the full batch's normalisers) == full batch, values and grads
    if POLICY_LOSSES[kind].batch_statistics:
        pytest.skip(f"{kind} reads statistics over its micro-batch's tokens (declared)")
    logp_full, old, adv, mask = _batch(4, off_policy=0.3)
    dual = 3.0 if POLICY_LOSSES[kind].dual_clip else None
    loss, _ = policy_loss(kind, logp_full, old, adv, mask, 0.2, 0.28, dual, **_proxy(kind, old))
    full = aggregate(loss, mask, mode, max_len=MAX_LEN)
    full.backward()

    logp = logp_full.detach().clone().requires_grad_(True)
    total_tokens, total_seqs = mask.sum().item(), mask.shape[0]
    accumulated = torch.zeros((), dtype=torch.float64)
    for rows in torch.arange(mask.shape[0]).chunk(num_micro):
        extra = {k: v[rows] for k, v in _proxy(kind, old).items()}
        micro, _ = policy_loss(
            kind, logp[rows], old[rows], adv[rows], mask[rows], 0.2, 0.28, dual, **extra
        )
        share = aggregate(
            micro,
            mask[rows],
            mode,
            total_tokens=total_tokens,
            total_seqs=total_seqs,
            max_len=MAX_LEN,
        )
        share.backward()
        accumulated = accumulated + share.detach()
    torch.testing.assert_close(accumulated, full.detach())
    torch.testing.assert_close(logp.grad, logp_full.grad)


@pytest.mark.parametrize("kind", list(POLICY_LOSSES))
def test_policy_metrics_for_every_kind(kind: str) -> None:
    logp, old, adv, mask = _batch(6, off_policy=0.5)
    _, info = policy_loss(kind, logp, old, adv, mask, 0.2, 0.28, **_proxy(kind, old))
    metrics = policy_metrics(info, mask)
    extra = {f"{k[3:]}_frac" for k in info if k.startswith("is_")} - {
        "clipped_low_frac",
        "clipped_high_frac",
        "dual_clipped_frac",
    }
    assert set(metrics) == set(POLICY_METRICS) | extra
    assert all(math.isfinite(v) for v in metrics.values())


def test_value_loss_hand_computed() -> None:
    # V = [1, 0], V_old = [0.5, 0.5], G = [2, 0], c = 0.2
    # token 0: (1 - 2)^2 = 1; clipped V = 0.5 + 0.2 = 0.7 -> (0.7 - 2)^2 = 1.69; 0.5 * 1.69
    # token 1: (0 - 0)^2 = 0; clipped V = 0.5 - 0.2 = 0.3 -> 0.09; 0.5 * 0.09
    values = _t([[1.0, 0.0, 7.0]]).requires_grad_(True)
    old, returns, mask = _t([[0.5, 0.5, 0.0]]), _t([[2.0, 0.0, 0.0]]), _t([[1, 1, 0]])
    loss = value_loss(values, old, returns, mask, clip=0.2)
    torch.testing.assert_close(loss, _t([[0.845, 0.045, 0.0]]))
    loss.sum().backward()
    # the clipped branch is the max on both tokens and its V is constant: no gradient
    torch.testing.assert_close(values.grad, _t([[0.0, 0.0, 0.0]]))
    # unclipped: 0.5 * (V - G)^2 = [0.5, 0]
    torch.testing.assert_close(value_loss(values, old, returns, mask, None), _t([[0.5, 0.0, 0.0]]))


# ---------------------------------------------------------------- shaping and filters


def test_overlong_penalty() -> None:
    # L_max = 10, L_cache = 4: 0 up to 6, then (6 - L) / 4, -1 beyond 10
    lengths = torch.tensor([5, 6, 7, 8, 10, 11])
    torch.testing.assert_close(
        overlong_penalty(lengths, 10, 4), torch.tensor([0.0, 0.0, -0.25, -0.5, -1.0, -1.0])
    )
    # L_cache = 0: nothing within the budget, -1 beyond it
    torch.testing.assert_close(
        overlong_penalty(lengths, 10, 0), torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, -1.0])
    )
    with pytest.raises(ValueError, match="cache_len"):
        overlong_penalty(lengths, 10, 11)


def test_informative_groups() -> None:
    # ids ascending [3, 5, 9]: group 3 [0, 1] differs; group 5 [1, 1] constant; 9 alone
    assert informative_groups(_t([1, 1, 0, 1, 2]), _ids([5, 5, 3, 3, 9])).tolist() == [
        True,
        False,
        False,
    ]


def test_group_accumulator_refills_with_informative_groups() -> None:
    acc = GroupAccumulator(target_groups=3, max_draws=3)
    # draw 1: groups 0 [1, 0] and 2 [0, 1] informative, group 1 [1, 1] not
    keep = acc.add(_t([1, 0, 1, 1, 0, 1]), _ids([0, 0, 1, 1, 2, 2]))
    assert keep.tolist() == [0, 1, 4, 5] and not acc.done
    # draw 2: both groups informative, one missing: keep group 0 only
    keep = acc.add(_t([0, 1, 1, 0]), _ids([0, 0, 1, 1]))
    assert keep.tolist() == [0, 1] and acc.done
    assert acc.metrics() == {
        "draws": 2.0,
        "groups_seen": 5.0,
        "groups_kept": 3.0,
        "informative_frac": 0.8,
        "batch_fill": 1.0,
    }
    with pytest.raises(ValueError, match="done"):
        acc.add(_t([0, 1]), _ids([0, 0]))


def test_group_accumulator_cap_and_passthrough() -> None:
    capped = GroupAccumulator(target_groups=2, max_draws=2)
    while not capped.done:
        assert capped.add(_t([1, 1, 0, 0]), _ids([0, 0, 1, 1])).numel() == 0
    assert capped.metrics()["draws"] == 2.0 and capped.metrics()["batch_fill"] == 0.0
    plain = GroupAccumulator(target_groups=2, max_draws=1, only_informative=False)
    assert plain.add(_t([1, 1, 0, 1]), _ids([0, 0, 1, 1])).tolist() == [0, 1, 2, 3]
    assert plain.done
    with pytest.raises(ValueError, match="max_draws"):
        GroupAccumulator(target_groups=2, max_draws=0)


def test_group_filter_criteria() -> None:
    rewards, ids = _t([1, 1, 0, 0, 1, 1]), _ids([0, 0, 0, 1, 1, 1])
    lengths = torch.tensor([5, 3, 4, 2, 9, 2])
    # shortest 2 per group: group 0 lengths [5, 3, 4] -> idx 1, 2; group 1 [2, 9, 2] -> 3, 5
    assert group_filter(rewards, ids, lengths, 2, "shortest").tolist() == [1, 2, 3, 5]
    # r / |y|: group 0 [0.2, 0.333, 0] -> idx 1, 0; group 1 [0, 0.111, 0.5] -> 5, 4
    assert group_filter(rewards, ids, lengths, 2, "reward_per_token").tolist() == [0, 1, 4, 5]
    # interleaved, non-contiguous ids; a group smaller than keep is kept whole
    assert group_filter(
        _t([1, 1, 1]), _ids([7, 2, 7]), torch.tensor([4, 1, 3]), 1, "shortest"
    ).tolist() == [1, 2]
    assert group_filter(_t([1, 1]), _ids([0, 0]), torch.tensor([1, 2]), 5, "shortest").tolist() == [
        0,
        1,
    ]
    with pytest.raises(ValueError, match="'longest'.*reward_per_token, shortest"):
        group_filter(rewards, ids, lengths, 2, "longest")


def test_top_entropy_mask() -> None:
    # masked entropies [0.1, 0.5, 0.9, 0.3, 0.7] (2.0 is masked out); rho = 0.4: k = 2 -> tau 0.7
    entropy = _t([[0.1, 0.5, 0.9], [0.3, 0.7, 2.0]])
    mask = _t([[1, 1, 1], [1, 1, 0]])
    assert entropy_threshold(entropy, mask, 0.4).item() == 0.7
    assert top_entropy_mask(entropy, mask, 0.4).tolist() == [
        [False, False, True],
        [False, True, False],
    ]
    assert top_entropy_mask(entropy, mask, 0.2).sum().item() == 1  # 0.2 * 5 = 1 token: 0.9
    assert torch.equal(top_entropy_mask(entropy, mask, 1.0), mask > 0)
    assert entropy_threshold(entropy, torch.zeros_like(mask), 0.2).item() == math.inf
    with pytest.raises(ValueError, match="rho"):
        top_entropy_mask(entropy, mask, 0.0)


# ---------------------------------------------------------------- presets


def test_every_preset_validates_and_is_documented() -> None:
    expected = {
        "grpo",
        "alol",
        "hbpo",
        "sgrpo",
        "noise_aware_grpo",
        "rlsc",
        "pvpo",
        "dr_grpo",
        "dapo",
        "gspo",
        "gmpo",
        "gpg",
        "rloo",
        "reinforce_pp",
        "reinforce_pp_baseline",
        "remax",
        "cispo",
        "ppo",
        "nsr",
        "sft",
        "rft",
        "dpo",
        "rpo",
        "ipo",
        "online_dpo",
        "semi_online_dpo",
        "rebel",
        "on_policy_distillation",
        "sapo",
        "aapo",
        "luffy",
        "dpo_norm",
        "exo",
        "copg",
        "tpo",
        "tgdpo",
        "inpo",
        "dno",
        "disco",
        "drpo",
        "gvpo",
        "mpo",
        "mapo",
        "ngrpo",
        "hapo",
    }
    assert set(PRESETS) == expected
    luffy = PRESETS["luffy"].expert
    assert (luffy.traces, luffy.shaping, dict(luffy.params)) == (1, "luffy", {"gamma": 0.1})
    assert PRESETS["dpo_norm"].objective.params == {} and PRESETS["dpo_norm"].objective.name == (
        "dpo_norm"
    )
    for name, preset in PRESETS.items():
        validate(preset)
        assert preset.name == name
        assert "arXiv:" in preset.citation and preset.summary
        assert resolve(name) == preset


def test_preset_values_from_the_papers() -> None:
    dapo = get_preset("dapo")
    loss = dapo.policy_loss
    assert (loss.clip_low, loss.clip_high, dapo.aggregation.name) == (0.2, 0.28, "token-mean")
    assert dapo.select.name == "informative" and dapo.select.max_draws > 1
    assert dapo.overlong.buffer_frac == 0.2
    gspo = get_preset("gspo").policy_loss
    assert (gspo.name, gspo.clip_low, gspo.clip_high) == ("sequence", 3e-4, 4e-4)
    assert get_preset("gspo").aggregation.name == "seq-mean-token-mean"
    gmpo = get_preset("gmpo").policy_loss
    assert (gmpo.name, gmpo.clip_low, gmpo.clip_high) == ("geometric", 0.4, 0.4)
    gpg = get_preset("gpg")
    assert (gpg.advantage.name, gpg.policy_loss.name) == ("gpg", "none")
    for name in ("reinforce_pp", "reinforce_pp_baseline", "ppo"):
        kl = get_preset(name).kl
        assert (kl.estimator, kl.placement) == ("k1", "reward") and kl.beta > 0
    ppo = get_preset("ppo")
    assert ppo.advantage.name == "gae" and ppo.value.coef > 0 and ppo.value.clip == 0.2
    assert dict(ppo.advantage.params) == {"gamma": 1.0, "lam": 0.95}
    assert get_preset("nsr").advantage.pos_weight == 0.0
    assert get_preset("cispo").policy_loss.name == "cispo"


@pytest.mark.parametrize(
    ("name", "overrides", "match"),
    [
        ("gspo", {"advantage": {"name": "reinforce_pp"}}, "sequence-level ratio"),
        (
            "gmpo",
            {"advantage": {"name": "gae"}, "value": {"coef": 0.1}},
            "sequence-level ratio",
        ),
        ("remax", {"select": {"name": "informative"}}, "r_i - r_greedy"),
        ("grpo", {"kl": {"placement": "reward"}}, "ignores token_kl"),
        ("reinforce_pp", {"kl": {"estimator": "k3+"}}, "k3\\+"),
        ("grpo", {"policy_loss": {"dual_clip": 1.0}}, "dual_clip must be > 1"),
        ("gmpo", {"policy_loss": {"dual_clip": 3.0}}, "dual_clip applies to"),
        ("ppo", {"value": {"coef": 0.0}}, "value head"),
        ("grpo", {"value": {"coef": 0.5}}, "only gae"),
        ("grpo", {"advantage": {"lam": 0.95}}, "unknown parameter.*lam"),
        ("grpo", {"advantage": {"normalize": "batch"}}, "already divides by a std"),
        ("grpo", {"select": {"max_draws": 4}}, "needs a group selector"),
        ("grpo", {"advantage": {"pos_weight": 0.0, "neg_weight": 0.0}}, "not both 0"),
        ("dr_grpo", {"advantage": {"baseline": 0.5}}, "unknown parameter.*baseline"),
        ("dr_grpo", {"reference": {"reset_every": 10}}, "no reference"),
        ("gspo", {"entropy": {"top_rho": 0.2}}, "sequence-level"),
        ("grpo", {"policy_loss": {"clip_low": 1.5}}, "below 0"),
        ("grpo", {"policy_loss": {"name": "ratio"}}, "policy_loss.name: unknown policy loss"),
        ("grpo", {"stages": [{"name": "hints"}], "objective": {"samples": "data"}}, "stages"),
        ("grpo", {"correction": {"tis_level": "sequence"}}, "does nothing without tis_cap"),
        ("grpo", {"entropy": {"target": 1.0, "coef": 0.1}}, "remove entropy.coef"),
    ],
)
def test_contradictory_combinations_raise(name: str, overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        resolve(name, **overrides)


def test_resolve_overrides_and_unknown_fields() -> None:
    custom = resolve(
        "dr_grpo",
        advantage={"normalize": "batch"},
        stages=[{"name": "group_filter", "criterion": "shortest", "oversample": 2}],
    )
    assert (custom.name, custom.advantage.normalize) == ("dr_grpo", "batch")
    assert custom.stages[0].name == "group_filter"
    assert resolve("nsr", advantage={"pos_weight": 0.1}).advantage.pos_weight == 0.1  # W-REINFORCE
    with pytest.raises(ValueError, match="unknown algorithm keys \\['clip'\\]"):
        resolve("grpo", clip=0.3)
    with pytest.raises(ValueError, match="unknown algorithm keys \\['name'\\]"):
        resolve("grpo", name="mine")


def test_advantage_kwargs_follow_the_kl_placement() -> None:
    assert advantage_kwargs(get_preset("grpo")) == {}
    assert advantage_kwargs(get_preset("reinforce_pp")) == {"beta": 0.01}
    assert advantage_kwargs(resolve("reinforce_pp", kl={"placement": "loss"})) == {"beta": 0.0}
    assert advantage_kwargs(get_preset("ppo")) == {"beta": 0.02, "gamma": 1.0, "lam": 0.95}
    assert advantage_kwargs(get_preset("nsr")) == {"baseline": 0.5}


def test_preset_advantages_pipeline() -> None:
    rewards, ids = _t([1, 0, 0, 0]), _ids([0, 0, 1, 1])
    # nsr: A = r - 0.5 = [0.5, -0.5, -0.5, -0.5], positives weighted 0
    out = preset_advantages(get_preset("nsr"), AdvantageInputs(rewards, ids))
    torch.testing.assert_close(out.advantages, _t([0, -0.5, -0.5, -0.5]))
    # dr_grpo + batch: [0.5, -0.5, 0, 0] / pop std sqrt(0.125) -> [sqrt 2, -sqrt 2, 0, 0]
    preset = resolve("dr_grpo", advantage={"normalize": "batch"})
    out = preset_advantages(preset, AdvantageInputs(rewards, ids))
    torch.testing.assert_close(out.advantages, _t([1.414213, -1.414213, 0, 0]), atol=1e-5, rtol=0)
    # ppo: token-level, whitened over masked tokens, returns passed through
    mask = torch.ones(4, 2, dtype=torch.bool)
    zeros = torch.zeros(4, 2, dtype=torch.float64)
    inputs = AdvantageInputs(rewards, ids, mask=mask, token_kl=zeros, values=zeros)
    out = preset_advantages(get_preset("ppo"), inputs)
    assert out.advantages.shape == (4, 2) and out.returns is not None
    assert abs(out.advantages.mean().item()) < 1e-12


# ---------------------------------------------------------------- config mirror


def _literal_values(annotation: object) -> set[str]:
    return {a for arg in typing.get_args(annotation) for a in typing.get_args(arg)} | {
        a for a in typing.get_args(annotation) if isinstance(a, str)
    }


def test_algorithm_config_mirrors_the_algorithms_parts_and_registries() -> None:
    """The config's algorithm section has one section per part of the resolved algorithm,
    with the part's own fields; names of registered parts are checked against the registries
    when the config loads."""
    fields = AlgorithmConfig.model_fields
    assert set(fields) == {"preset", *PARTS, "stages", *SCALARS}
    for part in PARTS:
        assert set(fields[part].annotation.model_fields) == set(part_fields(part)), part
    kl_fields = fields["kl"].annotation.model_fields
    assert _literal_values(kl_fields["placement"].annotation) == set(KL_PLACEMENTS)
    normalize = fields["advantage"].annotation.model_fields["normalize"]
    assert _literal_values(normalize.annotation) == set(NORMALIZATIONS)
    for section, registry in (
        ({"advantage": {"name": "not_registered"}}, ADVANTAGES),
        ({"policy_loss": {"name": "not_registered"}}, POLICY_LOSSES),
        ({"aggregation": {"name": "not_registered"}}, AGGREGATIONS),
        ({"kl": {"estimator": "not_registered"}}, KL_ESTIMATORS),
        ({"select": {"name": "not_registered"}}, GROUP_SELECTORS),
    ):
        with pytest.raises(ConfigError, match=f"unknown {registry.kind} .*registered: "):
            build_config({"algorithm": section})
    with pytest.raises(ConfigError, match="algorithm.preset: unknown preset .*registered: "):
        build_config({"algorithm": {"preset": "not_registered"}})
    for part, key, registry in (
        ("advantage", "name", ADVANTAGES),
        ("policy_loss", "name", POLICY_LOSSES),
        ("kl", "estimator", KL_ESTIMATORS),
    ):
        for name in registry:
            try:
                build_config({"algorithm": {part: {key: name}}})
            except ConfigError as err:  # a combination the preset refuses, not the name
                assert "unknown" not in str(err).split(";")[0]


def test_algorithm_config_overrides_resolve() -> None:
    cfg = AlgorithmConfig(
        preset="dapo", policy_loss={"clip_high": 0.3}, select={"name": "all", "max_draws": 1}
    )
    assert cfg.overrides() == {
        "policy_loss": {"clip_high": 0.3},
        "select": {"name": "all", "max_draws": 1},
    }
    algo = cfg.resolve()
    assert (algo.name, algo.policy_loss.clip_high, algo.select.active) == ("dapo", 0.3, False)
    for name in PRESETS:
        assert AlgorithmConfig(preset=name).resolve() == PRESETS[name]


def test_an_estimator_reads_a_view_of_the_columns_it_declares() -> None:
    """compute_advantages hands an estimator the columns it declares (requires, the mask,
    token_kl when it uses one): a column of the batch it does not declare raises, naming it;
    an input rlvr computes that the batch lacks reads None."""
    from rlvr.algorithms import ADVANTAGES, AdvantageOutput, register_advantage

    rewards, ids = _t([1, 0, 0, 1]), _ids([0, 0, 1, 1])
    mask = torch.ones(4, 2, dtype=torch.bool)
    inputs = AdvantageInputs(rewards, ids, mask, values=torch.zeros(4, 2), extra=_t([1, 2, 3, 4]))
    assert inputs.columns == ("mask", "values", "extra") and inputs["extra"][3] == 4
    assert inputs.token_kl is None  # an input rlvr computes, absent from this batch
    with pytest.raises(AttributeError, match="no column 'nope'; columns: mask, values, extra"):
        inputs.nope  # noqa: B018
    seen = {}

    def peek(view: AdvantageInputs) -> AdvantageOutput:
        seen["columns"] = view.columns
        with pytest.raises(AttributeError, match="'values' is not among the columns"):
            view.values  # noqa: B018
        with pytest.raises(KeyError, match="'values' is not among the columns"):
            view["values"]
        return AdvantageOutput(view.rewards + view["extra"])

    try:
        register_advantage("peek_test", requires=("extra",))(peek)
        out = compute_advantages("peek_test", inputs)
    finally:
        ADVANTAGES.pop("peek_test", None)
    assert seen["columns"] == ("mask", "extra")
    torch.testing.assert_close(out.advantages, _t([2, 2, 3, 5]))
    with pytest.raises(ValueError, match="extra must be \\[4\\]"):
        AdvantageInputs(rewards, ids, extra=_t([1, 2]))


def test_the_view_keeps_the_term_weights_with_the_terms_and_names_the_signals() -> None:
    rewards, ids = _t([1, 0]), _ids([0, 0])
    inputs = AdvantageInputs(
        rewards,
        ids,
        reward_terms=torch.ones(2, 3),
        term_weights=_t([1, 1, 1]),
        prompt_chars=_t([3, 4]),
    )
    view = inputs.view({"reward_terms"})
    assert view.columns == ("reward_terms", "term_weights")
    assert list(inputs.signals) == ["prompt_chars"] and inputs.signals["prompt_chars"][1] == 4
