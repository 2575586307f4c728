"""The sampler/trainer mismatch: its metrics and its importance weights (TIS, MIS, IcePop) on
hand-computed examples."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms import importance_weights, mismatch_metrics

L2 = math.log(2.0)


def _logps(log_ratios: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, sampler) log-probs with train - sampler = ``log_ratios`` (sampler at log 0.3)."""
    sampler = torch.full((len(log_ratios), len(log_ratios[0])), math.log(0.3))
    return sampler + torch.tensor(log_ratios), sampler


def test_mismatch_metrics_on_a_2x3_hand_example():
    # log r = [[ln 2, 0, -ln 4], [ln 3, (9: padding), (-9: padding)]], 4 real tokens
    train, sampler = _logps([[L2, 0.0, -2 * L2], [math.log(3), 9.0, -9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    means, tokens = mismatch_metrics(train, sampler, mask)
    assert tokens == 4
    # |log r|: (ln 2 + 0 + ln 4 + ln 3) / 4 = ln 24 / 4 = 0.7945
    assert means["mismatch/abs_log_ratio"] == pytest.approx(math.log(24) / 4, rel=1e-6)
    # k3 = r - 1 - ln r: (2 - 1 - ln 2) + 0 + (1/4 - 1 + ln 4) + (3 - 1 - ln 3)
    #    = 2.25 - ln 2 + 2 ln 2 - ln 3 = 2.25 + ln(2/3) = 1.8445, / 4 = 0.4611
    assert means["mismatch/kl_k3"] == pytest.approx((2.25 + math.log(2 / 3)) / 4, rel=1e-6)
    # r outside [0.5, 2]: 1/4 and 3 (r = 2 is inside): 2 of 4
    assert means["mismatch/ratio_out_of_band_frac"] == 0.5


def test_mismatch_metrics_are_zero_when_sampler_and_trainer_agree_or_nothing_is_masked_in():
    train, sampler = _logps([[0.0, 0.0]])
    means, tokens = mismatch_metrics(train, sampler, torch.ones(1, 2))
    assert tokens == 2 and set(means.values()) == {0.0}
    means, tokens = mismatch_metrics(train + 1, sampler, torch.zeros(1, 2))
    assert tokens == 0 and set(means.values()) == {0.0}


# two rows: log rho = [[ln 2, ln 2, -ln 4], [ln 8, 0, (5: padding)]]
ROWS = [[L2, L2, -2 * L2], [3 * L2, 0.0, 5.0]]
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def _weights(**kwargs) -> tuple[list[list[float]], dict[str, float]]:
    train, sampler = _logps(ROWS)
    weights, info = importance_weights(train, sampler, MASK, **kwargs)
    return weights.tolist(), info


def test_no_correction_is_the_mask():
    weights, info = _weights()
    assert weights == [[1, 1, 1], [1, 1, 0]] and info == {}


def test_token_tis_truncates_each_ratio():
    # rho_t = [[2, 2, 1/4], [8, 1]] -> min(., 3)
    weights, info = _weights(cap=3.0)
    assert weights[0] == pytest.approx([2, 2, 0.25])
    assert weights[1] == pytest.approx([3, 1, 0])
    assert info == {"truncated_frac": pytest.approx(1 / 5)}


def test_sequence_tis_truncates_the_product_on_every_token():
    # rho_seq = 2 * 2 / 4 = 1 (row 0), 8 * 1 = 8 (row 1) -> min(., 3)
    weights, info = _weights(cap=3.0, cap_level="sequence")
    assert weights[0] == pytest.approx([1, 1, 1])
    assert weights[1] == pytest.approx([3, 3, 0])
    assert info == {"truncated_frac": pytest.approx(2 / 5)}


def test_token_mis_masks_tokens_outside_the_band():
    # band [0.5, 4]: rho_t 1/4 and 8 out; the others keep rho_t
    weights, info = _weights(band=(0.5, 4.0))
    assert weights[0] == pytest.approx([2, 2, 0])
    assert weights[1] == pytest.approx([0, 1, 0])
    assert info == {"masked_frac": pytest.approx(2 / 5)}


def test_icepop_band_keeps_ratios_up_to_five():
    # IcePop's [0.5, 5]: 2, 2, 1 kept; 1/4 and 8 masked
    weights, info = _weights(band=(0.5, 5.0))
    assert weights == [pytest.approx([2, 2, 0]), pytest.approx([0, 1, 0])]
    assert info["masked_frac"] == pytest.approx(2 / 5)


def test_sequence_mis_masks_whole_sequences():
    # rho_seq = 1 (row 0, kept, weight 1 on every token), 8 (row 1, masked) in [0.5, 4]
    weights, info = _weights(band=(0.5, 4.0), band_level="sequence")
    assert weights[0] == pytest.approx([1, 1, 1])
    assert weights[1] == [0, 0, 0]
    assert info == {"masked_frac": pytest.approx(2 / 5)}


def test_geometric_mis_masks_sequences_by_their_mean_log_ratio_and_keeps_token_ratios():
    # geometric means: row 0 exp((ln 2 + ln 2 - 2 ln 2) / 3) = 1; row 1 exp(3 ln 2 / 2) = 2.83
    weights, info = _weights(band=(0.5, 2.0), band_level="geometric")
    assert weights[0] == pytest.approx([2, 2, 0.25])  # kept: rho_t
    assert weights[1] == [0, 0, 0]
    assert info == {"masked_frac": pytest.approx(2 / 5)}
    weights, _ = _weights(band=(0.5, 3.0), band_level="geometric")
    assert weights[1] == pytest.approx([8, 1, 0])  # 2.83 inside [0.5, 3]: kept


def test_mis_with_tis_gives_the_kept_tokens_the_truncated_weight():
    # token band [0.5, 4] masks 1/4 and 8; the kept 2, 2, 1 are truncated at 1.5
    weights, info = _weights(cap=1.5, band=(0.5, 4.0))
    assert weights[0] == pytest.approx([1.5, 1.5, 0])
    assert weights[1] == pytest.approx([0, 1, 0])
    # a masked token is not counted as truncated (8 > 1.5 but masked)
    assert info == {"masked_frac": pytest.approx(2 / 5), "truncated_frac": pytest.approx(2 / 5)}
    # sequence TIS inside a geometric band: row 0 kept with min(rho_seq = 1, 1.5)
    weights, _ = _weights(cap=1.5, cap_level="sequence", band=(0.5, 2.0), band_level="geometric")
    assert weights == [pytest.approx([1, 1, 1]), [0, 0, 0]]


def test_sequence_level_never_overflows():
    # 200 tokens of log-ratio 1: rho_seq = e^200, beyond float32 (and float64 at e^710)
    train, sampler = _logps([[1.0] * 200])
    mask = torch.ones(1, 200)
    weights, info = importance_weights(train, sampler, mask, cap=2.0, cap_level="sequence")
    assert torch.isfinite(weights).all() and weights.tolist()[0] == pytest.approx([2.0] * 200)
    assert info["truncated_frac"] == 1.0
    weights, info = importance_weights(train, sampler, mask, band=(0.5, 2), band_level="sequence")
    assert weights.abs().sum() == 0 and info["masked_frac"] == 1.0
    weights, _ = importance_weights(-train, -sampler, mask, cap=2.0, cap_level="sequence")
    assert torch.isfinite(weights).all()  # e^-200 underflows to 0, harmlessly


def test_padding_is_ignored_even_when_not_finite():
    train, sampler = _logps([[L2, 0.0]])
    train[0, 1], sampler[0, 1] = math.inf, -math.inf  # garbage beyond the completion
    mask = torch.tensor([[1, 0]])
    weights, _ = importance_weights(train, sampler, mask, cap=3.0, cap_level="sequence")
    assert weights.tolist() == [[pytest.approx(2.0), 0.0]]
    means, tokens = mismatch_metrics(train, sampler, mask)
    assert tokens == 1 and means["mismatch/abs_log_ratio"] == pytest.approx(L2)


def test_weights_carry_no_gradient():
    train = torch.zeros(1, 2, requires_grad=True)
    weights, _ = importance_weights(train, torch.zeros(1, 2), torch.ones(1, 2), cap=2.0)
    assert not weights.requires_grad


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"cap": 0.0}, "TIS cap"), ({"band": (2.0, 1.0)}, "MIS band"), ({"band": (-1, 2)}, "MIS")],
)
def test_bad_cap_or_band_is_an_error(kwargs, match):
    train, sampler = _logps([[0.0]])
    with pytest.raises(ValueError, match=match):
        importance_weights(train, sampler, torch.ones(1, 1), **kwargs)
