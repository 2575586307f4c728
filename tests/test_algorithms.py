"""Tests for rlvr.algorithms: hand-computed examples and properties of advantages, KL, losses."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms import (
    ADVANTAGES,
    AGGREGATIONS,
    KL_ESTIMATORS,
    POLICY_METRICS,
    PRESETS,
    AdvantageInputs,
    aggregate,
    clipped_policy_loss,
    compute_advantages,
    dr_grpo,
    get_preset,
    group_stats,
    grpo,
    kl_k1,
    kl_k2,
    kl_k3,
    kl_penalty,
    masked_mean,
    policy_metrics,
    rloo,
)

MAX_LEN = 6


def _t(values: list) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def _ids(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long)


# ---------------------------------------------------------------- advantages


def test_grpo_single_group() -> None:
    # mean 0.5, unbiased std sqrt((4 * 0.25) / 3) = sqrt(1/3) = 0.57735; A = ±0.5 / 0.57735
    adv = grpo(_t([1, 0, 0, 1]), _ids([0, 0, 0, 0]))
    expected = 0.5 / (math.sqrt(1 / 3) + 1e-6)  # 0.8660
    torch.testing.assert_close(adv, _t([expected, -expected, -expected, expected]))
    assert abs(expected - 0.8660) < 1e-4


def test_grpo_interleaved_noncontiguous_groups() -> None:
    # group 7: r = [1, 0, 2], mean 1, std sqrt((0 + 1 + 1) / 2) = 1 -> A = [0, -1, 1]
    # group 3: r = [2, 4, 6], mean 4, std sqrt((4 + 0 + 4) / 2) = 2 -> A = [-1, 0, 1]
    adv = grpo(_t([1, 2, 0, 4, 2, 6]), _ids([7, 3, 7, 3, 7, 3]))
    s7, s3 = 1 / (1 + 1e-6), 2 / (2 + 1e-6)
    torch.testing.assert_close(adv, _t([0, -s3, -s7, 0, s7, s3]))


def test_grpo_constant_group_and_group_of_one() -> None:
    # constant group [3, 3]: A = 0 / (0 + eps) = 0; group of one [5]: A = r = 5
    adv = grpo(_t([3, 5, 3]), _ids([1, 2, 1]))
    torch.testing.assert_close(adv, _t([0, 5, 0]))


def test_grpo_integer_rewards_are_promoted() -> None:
    adv = grpo(torch.tensor([1, 0]), _ids([0, 0]))
    assert adv.is_floating_point()


def test_dr_grpo() -> None:
    # A = r - mean_g: group 7 [1, 0, 2] mean 1; group 3 [2, 4, 6] mean 4; group 9 [5] alone: A = 5
    adv = dr_grpo(_t([1, 2, 0, 4, 2, 6, 5]), _ids([7, 3, 7, 3, 7, 3, 9]))
    torch.testing.assert_close(adv, _t([0, -2, -1, 0, 1, 2, 5]))


def test_rloo() -> None:
    # A_i = r_i - mean_{j != i} r_j: [1 - 2.5, 2 - 2, 3 - 1.5]; group of one [4]: A = 4
    adv = rloo(_t([1, 2, 4, 3]), _ids([0, 0, 5, 0]))
    torch.testing.assert_close(adv, _t([-1.5, 0.0, 4.0, 1.5]))


def test_rloo_equals_scaled_dr_grpo() -> None:
    # r_i - (S - r_i)/(n - 1) = n/(n - 1) * (r_i - S/n)
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(12, generator=gen, dtype=torch.float64)
    ids = _ids([0, 1, 2] * 4)
    torch.testing.assert_close(rloo(rewards, ids), 4 / 3 * dr_grpo(rewards, ids))


def test_grpo_zero_mean_unit_std_per_group_random() -> None:
    gen = torch.Generator().manual_seed(1)
    for _ in range(20):
        sizes = torch.randint(2, 9, (6,), generator=gen)
        labels = torch.randperm(1000, generator=gen)[:6] - 500  # arbitrary, possibly negative
        ids = labels.repeat_interleave(sizes)
        ids = ids[torch.randperm(ids.numel(), generator=gen)]
        rewards = torch.randn(ids.numel(), generator=gen, dtype=torch.float64)
        adv, exact = grpo(rewards, ids), grpo(rewards, ids, eps=0.0)
        for label in labels:
            assert abs(adv[ids == label].mean().item()) < 1e-9
            assert abs(exact[ids == label].std().item() - 1) < 1e-9  # unbiased std, eps = 0


def test_compute_advantages_dispatch_and_unknown() -> None:
    rewards, ids = _t([1, 0, 0, 1]), _ids([0, 0, 1, 1])
    inputs = AdvantageInputs(rewards, ids)
    torch.testing.assert_close(compute_advantages("rloo", inputs).advantages, rloo(rewards, ids))
    torch.testing.assert_close(
        compute_advantages("grpo", inputs, eps=0.5).advantages, grpo(rewards, ids, eps=0.5)
    )
    with pytest.raises(ValueError, match="'ppo'.*dr_grpo, edge_grpo, gae, gdpo, gpg, grpo"):
        compute_advantages("ppo", inputs)


def test_advantages_shape_mismatch() -> None:
    with pytest.raises(ValueError, match="equal length"):
        grpo(_t([1, 0]), _ids([0, 0, 0]))


def test_group_stats() -> None:
    # group 0 [1, 1] constant; group 4 [0, 1] std sqrt(0.5); group 2 [2] alone (constant, std 0)
    stats = group_stats(_t([1, 0, 1, 1, 2]), _ids([0, 4, 0, 4, 2]))
    assert stats["num_groups"] == 3
    assert stats["zero_variance_frac"] == pytest.approx(2 / 3)
    assert stats["group_std_mean"] == pytest.approx(math.sqrt(0.5) / 3)  # 0.2357


def test_group_stats_non_representable_constant() -> None:
    # 0.1 * 3 / 3 != 0.1 in floating point: still a zero-variance group
    assert group_stats(_t([0.1, 0.1, 0.1]), _ids([0, 0, 0]))["zero_variance_frac"] == 1.0


# ---------------------------------------------------------------- KL


def test_kl_estimators_at_log_ratio_ln2() -> None:
    # pi = 0.5, pi_ref = 0.25: log ratio = ln 2 = 0.693147
    logp, ref = _t([[math.log(0.5)]]), _t([[math.log(0.25)]])
    torch.testing.assert_close(kl_k1(logp, ref), _t([[0.693147]]), atol=1e-6, rtol=0)
    # k2 = 0.5 * ln(2)^2 = 0.240227
    torch.testing.assert_close(kl_k2(logp, ref), _t([[0.240227]]), atol=1e-6, rtol=0)
    # k3 = pi_ref/pi - log(pi_ref/pi) - 1 = 0.5 + ln 2 - 1 = 0.193147
    torch.testing.assert_close(kl_k3(logp, ref), _t([[0.193147]]), atol=1e-6, rtol=0)
    torch.testing.assert_close(kl_penalty("k3", logp, ref), kl_k3(logp, ref))


def test_k3_nonnegative_and_clamped() -> None:
    logp = _t([[0.0, -50.0, 50.0, -1.0]])
    ref = _t([[0.0, 50.0, -50.0, -1.5]])
    k3 = kl_k3(logp, ref)
    assert torch.isfinite(k3).all() and (k3 >= 0).all()
    # log ratio -100 clamps to -20: exp(20) - 20 - 1
    assert k3[0, 1].item() == pytest.approx(math.exp(20) - 21)


def test_kl_penalty_unknown() -> None:
    with pytest.raises(ValueError, match="'k4'.*k1, k2, k3"):
        kl_penalty("k4", _t([[0.0]]), _t([[0.0]]))
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3", "k3+"}


# ---------------------------------------------------------------- clipped policy loss


def _logps(ratios: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """logp, old_logp [1, T] with exp(logp - old_logp) = ratios."""
    old = torch.full((1, len(ratios)), -1.0, dtype=torch.float64)
    return old + torch.log(_t([ratios])), old


def test_clip_high_positive_advantage() -> None:
    # A = 1, rho = 1.5, eps_high = 0.2: max(-1.5, -1.2) = -1.2
    logp, old = _logps([1.5])
    loss, info = clipped_policy_loss(logp, old, _t([1.0]), clip_low=0.2, clip_high=0.2)
    torch.testing.assert_close(loss, _t([[-1.2]]))
    assert info["is_clipped_high"].tolist() == [[True]]
    assert info["is_clipped_low"].tolist() == [[False]]


def test_clip_low_negative_advantage() -> None:
    # A = -1, rho = 0.5, eps_low = 0.2: max(0.5, 0.8) = 0.8
    logp, old = _logps([0.5])
    loss, info = clipped_policy_loss(logp, old, _t([-1.0]), clip_low=0.2, clip_high=0.28)
    torch.testing.assert_close(loss, _t([[0.8]]))
    assert info["is_clipped_low"].tolist() == [[True]]


def test_clip_higher_asymmetric() -> None:
    # A = 1, rho = 1.25: clip_high 0.2 -> -1.2; clip_high 0.28 (DAPO) -> unclipped -1.25
    logp, old = _logps([1.25])
    loss_sym, _ = clipped_policy_loss(logp, old, _t([1.0]), 0.2, 0.2)
    loss_dapo, _ = clipped_policy_loss(logp, old, _t([1.0]), 0.2, 0.28)
    torch.testing.assert_close(loss_sym, _t([[-1.2]]))
    torch.testing.assert_close(loss_dapo, _t([[-1.25]]))


def test_dual_clip() -> None:
    # c = 3. A = -1, rho = 5: max(5, 1.2) = 5 -> min(5, 3) = 3
    #        A = -1, rho = 2: max(2, 1.2) = 2 < 3 -> 2
    #        A = +1, rho = 5: max(-5, -1.2) = -1.2 (A > 0: no dual clip)
    logp, old = _logps([5.0, 2.0, 5.0])
    logp.requires_grad_(True)
    adv = _t([[-1.0, -1.0, 1.0]])
    loss, info = clipped_policy_loss(logp, old, adv, dual_clip=3.0)
    torch.testing.assert_close(loss, _t([[3.0, 2.0, -1.2]]))
    assert info["is_dual_clipped"].tolist() == [[True, False, False]]
    loss.sum().backward()
    # d/dlogp of -A * rho = -A * rho for the unclipped middle token; 0 where a clip binds
    torch.testing.assert_close(logp.grad, _t([[0.0, 2.0, 0.0]]))
    no_dual, _ = clipped_policy_loss(logp, old, adv)
    torch.testing.assert_close(no_dual, _t([[5.0, 2.0, -1.2]]))


def test_dual_clip_must_exceed_one() -> None:
    logp, old = _logps([1.0])
    with pytest.raises(ValueError, match="dual_clip"):
        clipped_policy_loss(logp, old, _t([1.0]), dual_clip=1.0)


def test_per_sequence_and_per_token_advantages_agree() -> None:
    gen = torch.Generator().manual_seed(2)
    logp = torch.randn(3, 4, generator=gen, dtype=torch.float64) * 0.3
    old = torch.randn(3, 4, generator=gen, dtype=torch.float64) * 0.3
    adv = torch.randn(3, generator=gen, dtype=torch.float64)
    seq, _ = clipped_policy_loss(logp, old, adv)
    tok, _ = clipped_policy_loss(logp, old, adv[:, None].expand(3, 4))
    torch.testing.assert_close(seq, tok)


def _on_policy_batch(seed: int, batch: int = 8, length: int = MAX_LEN):
    """logp (leaf, requires grad) = old_logp, advantages [B], ragged mask with one empty row."""
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(batch, length, generator=gen, dtype=torch.float64) * 3
    logp = old.clone().requires_grad_(True)
    adv = torch.randn(batch, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, length + 1, (batch,), generator=gen)
    lengths[batch // 2] = 0
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return logp, old, adv, mask


@pytest.mark.parametrize("mode", list(AGGREGATIONS))
def test_on_policy_gradient_is_vanilla_policy_gradient(mode: str) -> None:
    # at rho = 1 the clip is inactive: dL/dlogp_{i,t} = -A_i * m_{i,t} / normaliser_{i,t}
    logp, old, adv, mask = _on_policy_batch(3)
    loss, _ = clipped_policy_loss(logp, old, adv, dual_clip=3.0)
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


# ---------------------------------------------------------------- aggregation


LOSS_2X3 = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
MASK_2X3 = [[1, 1, 0], [1, 0, 0]]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 7 / 3),  # (1 + 2 + 4) / 3 tokens
        ("seq-mean-token-mean", 2.75),  # ((1 + 2) / 2 + 4 / 1) / 2 = (1.5 + 4) / 2
        ("seq-mean-token-sum", 3.5),  # ((1 + 2) + 4) / 2
        ("seq-mean-token-sum-norm", 0.875),  # 3.5 / max_len 4
    ],
)
def test_aggregation_hand_computed(mode: str, expected: float) -> None:
    value = aggregate(_t(LOSS_2X3), _t(MASK_2X3), mode, max_len=4)
    assert value.item() == pytest.approx(expected)
    bool_mask = torch.tensor(MASK_2X3, dtype=torch.bool)
    assert aggregate(_t(LOSS_2X3), bool_mask, mode, max_len=4).item() == pytest.approx(expected)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 7 / 10),  # this micro-batch's share: (1 + 2 + 4) / total_tokens 10
        ("seq-mean-token-mean", 5.5 / 5),  # (1.5 + 4) / total_seqs 5
        ("seq-mean-token-sum", 7 / 5),  # (3 + 4) / total_seqs 5
        ("seq-mean-token-sum-norm", 7 / 4 / 5),  # (3 + 4) / max_len 4 / total_seqs 5
    ],
)
def test_aggregation_global_normalisers(mode: str, expected: float) -> None:
    value = aggregate(_t(LOSS_2X3), _t(MASK_2X3), mode, total_tokens=10, total_seqs=5, max_len=4)
    assert value.item() == pytest.approx(expected)


@pytest.mark.parametrize("mode", list(AGGREGATIONS))
@pytest.mark.parametrize("num_micro", [1, 2, 4])
def test_aggregation_micro_batch_invariance(mode: str, num_micro: int) -> None:
    # sum over micro-batches (with the full batch's normalisers) == full batch, values and grads
    logp_full, old, _, mask = _on_policy_batch(4)
    gen = torch.Generator().manual_seed(5)
    adv = torch.randn(mask.shape, generator=gen, dtype=torch.float64)
    old = old + 0.3 * torch.randn(old.shape, generator=gen, dtype=torch.float64)  # off-policy

    loss, _ = clipped_policy_loss(logp_full, old, adv, 0.2, 0.28)
    full = aggregate(loss, mask, mode, max_len=MAX_LEN)
    full.backward()
    full_grad = logp_full.grad.clone()

    logp = logp_full.detach().clone().requires_grad_(True)
    total_tokens, total_seqs = mask.sum().item(), mask.shape[0]
    accumulated = torch.zeros((), dtype=torch.float64)
    for chunk in torch.arange(mask.shape[0]).chunk(num_micro):
        micro_loss, _ = clipped_policy_loss(logp[chunk], old[chunk], adv[chunk], 0.2, 0.28)
        share = aggregate(
            micro_loss,
            mask[chunk],
            mode,
            total_tokens=total_tokens,
            total_seqs=total_seqs,
            max_len=MAX_LEN,
        )
        share.backward()
        accumulated = accumulated + share.detach()
    torch.testing.assert_close(accumulated, full.detach())
    torch.testing.assert_close(logp.grad, full_grad)


@pytest.mark.parametrize("mode", list(AGGREGATIONS))
def test_all_zero_mask_rows_give_no_nan(mode: str) -> None:
    loss = _t([[1.0, 2.0], [3.0, 4.0]]).requires_grad_(True)
    mask = _t([[0, 0], [1, 0]])
    value = aggregate(loss, mask, mode, max_len=2)
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(loss.grad).all()
    assert loss.grad[0].abs().sum().item() == 0.0
    # a micro-batch of empty rows only, and a fully empty batch, contribute 0
    empty = torch.zeros(2, 2, dtype=torch.float64)
    assert aggregate(loss, empty, mode, total_tokens=3, total_seqs=4, max_len=2).item() == 0.0
    assert aggregate(loss, empty, mode, max_len=2).item() == 0.0


def test_aggregate_errors() -> None:
    with pytest.raises(ValueError, match="'sum'.*token-mean"):
        aggregate(_t(LOSS_2X3), _t(MASK_2X3), "sum")
    with pytest.raises(ValueError, match="max_len"):
        aggregate(_t(LOSS_2X3), _t(MASK_2X3), "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        aggregate(_t(LOSS_2X3), _t([[1, 1, 0]]), "token-mean")


def test_masked_mean() -> None:
    x, m = _t(LOSS_2X3), _t(MASK_2X3)
    assert masked_mean(x, m).item() == pytest.approx(7 / 3)  # (1 + 2 + 4) / 3
    torch.testing.assert_close(masked_mean(x, m, dim=-1), _t([1.5, 4.0]))
    torch.testing.assert_close(masked_mean(x, torch.zeros_like(m), dim=-1), _t([0.0, 0.0]))


# ---------------------------------------------------------------- metrics


def test_policy_metrics() -> None:
    # rho = [1.5, 0.5, 1.0, 2.0], A = [1, -1, 1, -1], last token masked out
    logp, old = _logps([1.5, 0.5, 1.0, 2.0])
    _, info = clipped_policy_loss(logp, old, _t([[1.0, -1.0, 1.0, -1.0]]))
    metrics = policy_metrics(info, _t([[1, 1, 1, 0]]))
    assert set(metrics) == set(POLICY_METRICS)
    assert metrics["clip_frac_high"] == pytest.approx(1 / 3)  # token 0: A > 0, rho > 1.2
    assert metrics["clip_frac_low"] == pytest.approx(1 / 3)  # token 1: A < 0, rho < 0.8
    assert metrics["dual_clip_frac"] == 0.0
    assert metrics["ratio_mean"] == pytest.approx(1.0)  # (1.5 + 0.5 + 1) / 3
    assert metrics["ratio_min"] == pytest.approx(0.5)
    assert metrics["ratio_max"] == pytest.approx(1.5)
    # k3(old vs new) = rho - log rho - 1: (0.094535 + 0.193147 + 0) / 3 = 0.095894
    assert metrics["approx_kl"] == pytest.approx(0.095894, abs=1e-6)


def test_policy_metrics_empty_mask() -> None:
    logp, old = _logps([1.5])
    _, info = clipped_policy_loss(logp, old, _t([1.0]))
    metrics = policy_metrics(info, _t([[0]]))
    assert all(math.isnan(v) for v in metrics.values())


# ---------------------------------------------------------------- presets


def test_presets_reference_registered_components() -> None:
    assert {"grpo", "dr_grpo", "dapo", "rloo"} <= set(PRESETS)
    for name, preset in PRESETS.items():
        assert preset.name == name
        assert preset.advantage.name in ADVANTAGES
        assert preset.aggregation.name in AGGREGATIONS
        assert preset.kl.estimator in KL_ESTIMATORS
        assert preset.policy_loss.dual_clip is None or preset.policy_loss.dual_clip > 1


def test_preset_values() -> None:
    grpo_p, dapo_p, dr_p = get_preset("grpo"), get_preset("dapo"), get_preset("dr_grpo")
    assert (grpo_p.kl.beta, grpo_p.aggregation.name) == (0.04, "seq-mean-token-mean")
    loss = dapo_p.policy_loss
    assert (loss.clip_low, loss.clip_high, dapo_p.aggregation.name) == (0.2, 0.28, "token-mean")
    assert "dynamic sampling" in dapo_p.summary
    assert (dr_p.advantage.name, dr_p.aggregation.name, dr_p.kl.beta) == (
        "dr_grpo",
        "seq-mean-token-sum-norm",
        0.0,
    )
    assert get_preset("rloo").advantage.name == "rloo"
    with pytest.raises(
        ValueError, match="'nope'.*dapo, disco, dno, dpo, dpo_norm, dr_grpo, drpo, exo, gmpo"
    ):
        get_preset("nope")
