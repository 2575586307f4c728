"""The zoo's second wave (issue 29), each part on a hand-computed example and in a 2-step run
from YAML on the tiny model: DPPO's divergence trust region (TV and binary-KL forms) and SAPO's
soft gate."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from test_trainer import step_rows, tiny_config

from rlvr.algorithms import (
    POLICY_LOSSES,
    PRESETS,
    binary_kl,
    dppo_kl_policy_loss,
    dppo_tv_policy_loss,
    policy_loss,
    resolve,
    sapo_policy_loss,
    simple_po_policy_loss,
)
from rlvr.config import build_config
from rlvr.trainer import train


def _logs(*rows: list[float]) -> torch.Tensor:
    return torch.tensor([[math.log(p) for p in row] for row in rows], dtype=torch.float64)


# row 0: A = +1; row 1: A = -1. pi_old -> pi per token:
# row 0: 0.5 -> 0.8 (up by 0.3), 0.001 -> 0.03 (up by 0.029, ratio 30), 0.9 -> 0.2 (down)
# row 1: 0.5 -> 0.2 (down by 0.3), 0.3 -> 0.25 (down by 0.05), 0.1 -> 0.6 (up)
OLD = _logs([0.5, 0.001, 0.9], [0.5, 0.3, 0.1])
NEW = [[0.8, 0.03, 0.2], [0.2, 0.25, 0.6]]
ADV = torch.tensor([1.0, -1.0], dtype=torch.float64)


def test_dppo_tv_keeps_tokens_inside_the_probability_region():
    logp = _logs(*NEW).requires_grad_(True)
    loss, info = dppo_tv_policy_loss(logp, OLD, ADV, clip_low=0.2, clip_high=0.2)
    # |pi - pi_old| beyond 0.2 in the pushed direction: row 0 token 0 (+0.3), row 1 token 0
    # (-0.3) drop out; the others stay, whatever their ratio (row 0 token 1: 30, capped at 20)
    valid = torch.tensor([[0, 1, 1], [0, 1, 1]], dtype=torch.bool)
    assert torch.equal(info["is_clipped_high"] | info["is_clipped_low"], ~valid)
    expected = [
        [0.0, -20 * math.log(0.03), -(0.2 / 0.9) * math.log(0.2)],
        [0.0, (0.25 / 0.3) * math.log(0.25), 6.0 * math.log(0.6)],
    ]
    torch.testing.assert_close(loss.detach(), torch.tensor(expected, dtype=torch.float64))
    loss.sum().backward()  # d/dlogp = -A * sg[min(rho, 20)] on valid tokens, 0 elsewhere
    grad = [[0.0, -20.0, -0.2 / 0.9], [0.0, 0.25 / 0.3, 6.0]]
    torch.testing.assert_close(logp.grad, torch.tensor(grad, dtype=torch.float64))
    assert info["is_dual_clipped"][0, 1] and info["is_dual_clipped"].sum() == 1  # the cap


def test_binary_kl_and_dppo_kl_on_the_same_tokens():
    kl = binary_kl(OLD, _logs(*NEW))
    # 0.5 -> 0.8: 0.5 ln(0.5/0.8) + 0.5 ln(0.5/0.2); 0.001 -> 0.03; 0.3 -> 0.25
    assert kl[0, 0].item() == pytest.approx(0.5 * math.log(0.625) + 0.5 * math.log(2.5))
    assert kl[0, 1].item() == pytest.approx(
        0.001 * math.log(0.001 / 0.03) + 0.999 * math.log(0.999 / 0.97)
    )
    assert kl[1, 1].item() == pytest.approx(0.3 * math.log(1.2) + 0.7 * math.log(0.7 / 0.75))
    loss, info = dppo_kl_policy_loss(_logs(*NEW), OLD, ADV, clip_low=0.05, clip_high=0.05)
    # 0.223 > 0.05 pushed the advantage's way: out (row 0 token 0, row 1 token 0); 0.026 and
    # 0.0064 are inside; moves against the advantage (row 0 token 2, row 1 token 2) stay
    dropped = info["is_clipped_high"] | info["is_clipped_low"]
    assert dropped.tolist() == [[True, False, False], [True, False, False]]
    assert loss[0, 0].item() == 0.0 and loss[1, 0].item() == 0.0
    assert loss[0, 1].item() == pytest.approx(-20 * math.log(0.03))


def test_dppo_is_anchored_to_the_sampler():
    # arXiv:2602.04879: r = pi / mu and the region around mu, mu the rollout engine's policy
    assert POLICY_LOSSES["dppo_tv"].sampler_anchored and POLICY_LOSSES["dppo_kl"].sampler_anchored
    assert not POLICY_LOSSES["token"].sampler_anchored
    logp = _logs(*NEW).requires_grad_(True)
    loss, info = dppo_tv_policy_loss(logp, sampler_logp=OLD, advantages=ADV)
    torch.testing.assert_close(info["ratio"], (logp - OLD).exp().detach())  # r = pi / mu
    assert info["is_clipped_high"][0, 0] and info["is_clipped_low"][1, 0]  # |pi - mu| = 0.3
    kl_loss, _ = dppo_kl_policy_loss(logp, sampler_logp=OLD, advantages=ADV)
    assert kl_loss[0, 0].item() == 0.0 and kl_loss[1, 0].item() == 0.0


def test_dppo_refuses_a_second_sampler_correction():
    base = {"model": {"name": "tiny-random-llama"}}
    algorithm = {"preset": "grpo", "policy_loss": "dppo_kl"}
    for correction in ({"tis_cap": 2.0}, {"mis_band": [0.5, 2.0]}):
        with pytest.raises(ValueError, match="already corrects for the sampler"):
            build_config({**base, "algorithm": {**algorithm, **correction}})
    # asynchronous rollouts add TIS at 2 by default, but not to DPPO: its ratio is pi / pi_behav
    ahead = build_config({**base, "algorithm": algorithm, "rollout": {"max_staleness": 1}})
    assert ahead.algorithm.correction.tis_cap is None
    token = build_config({**base, "algorithm": {"preset": "grpo"}, "rollout": {"max_staleness": 1}})
    assert token.algorithm.correction.tis_cap == 2.0


def test_dppo_kl_takes_its_own_threshold_unless_one_is_set():
    # grpo clips the ratio at 0.2; dppo_kl's delta is in nats, 0.05 by default (its docs)
    default = resolve("grpo", policy_loss={"name": "dppo_kl"}).policy_loss
    assert (default.clip_low, default.clip_high) == (0.05, 0.05)
    mixed = resolve("grpo", policy_loss={"name": "dppo_kl", "clip_high": 0.1}).policy_loss
    assert (mixed.clip_low, mixed.clip_high) == (0.05, 0.1)  # the user's bound, as set
    assert resolve("grpo", policy_loss={"name": "dppo_tv"}).policy_loss.clip_high == 0.2
    same_space = resolve("dapo", policy_loss={"name": "token"}).policy_loss
    assert same_space.clip_high == 0.28  # same space: the preset's
    cfg = build_config(
        {
            "model": {"name": "tiny-random-llama"},
            "algorithm": {"preset": "grpo", "policy_loss": "dppo_kl"},
        }
    )
    loss = cfg.algorithm.resolve().policy_loss  # as the trainer builds it
    assert (loss.clip_low, loss.clip_high) == (0.05, 0.05)


def test_sapo_soft_gate_value_and_gradient():
    logp = torch.tensor([[math.log(1.5)], [math.log(0.5)]], dtype=torch.float64)
    logp.requires_grad_(True)
    old = torch.zeros(2, 1, dtype=torch.float64)  # rho = 1.5 (A = +1), 0.5 (A = -1)
    loss, _ = sapo_policy_loss(logp, old, ADV, tau_pos=1.0, tau_neg=1.05)
    s_pos, s_neg = 1 / (1 + math.exp(-0.5)), 1 / (1 + math.exp(0.525))  # sigmoid(tau (rho-1))
    assert loss[0, 0].item() == pytest.approx(-4 * s_pos)  # -(4 / 1) sigma(0.5) * (+1)
    assert loss[1, 0].item() == pytest.approx(4 / 1.05 * s_neg)  # -(4 / 1.05) sigma(-0.525) * (-1)
    loss.sum().backward()  # dL/dlogp = -A * 4 sigma (1 - sigma) * rho
    assert logp.grad[0, 0].item() == pytest.approx(-4 * s_pos * (1 - s_pos) * 1.5)
    assert logp.grad[1, 0].item() == pytest.approx(4 * s_neg * (1 - s_neg) * 0.5)
    with pytest.raises(ValueError, match="tau_pos, tau_neg > 0"):
        sapo_policy_loss(logp, old, ADV, tau_pos=0.0)


def test_simple_po_penalises_the_ratio_quadratically_and_pulls_it_back_past_eps():
    """SPO at eps 0.2: rho 1.2 with A = +1 gives -(1.2 - 0.04 / 0.4) = -1.1 and no gradient
    (the boundary); rho 0.8 with A = -1 gives 0.9, no gradient either; rho 1.3 with A = +1
    gives -(1.3 - 0.09 / 0.4) = -1.075 and d/dlog pi = -1.3 (1 - 0.3 / 0.2) = 0.65 > 0: descent
    lowers log pi, back towards 1.2 (PPO's clip gives 0 there). At rho = 1 it is -A."""
    logp = torch.tensor([[math.log(1.2), math.log(0.8), math.log(1.3), 0.0]], dtype=torch.float64)
    logp.requires_grad_(True)
    adv = torch.tensor([[1.0, -1.0, 1.0, -2.0]], dtype=torch.float64)
    loss, info = simple_po_policy_loss(logp, torch.zeros_like(logp), adv)
    assert loss.tolist()[0] == pytest.approx([-1.1, 0.9, -1.075, 2.0])
    loss.sum().backward()
    assert logp.grad.tolist()[0] == pytest.approx([0.0, 0.0, 0.65, 2.0], abs=1e-12)
    assert info["is_clipped_high"].tolist() == [[False, False, True, False]]
    loss, _ = simple_po_policy_loss(logp.detach(), torch.zeros_like(logp), adv, 0.1, 0.4)
    assert loss[0, 1].item() == pytest.approx(-(-0.8 - 0.04 / 0.2))  # A < 0: eps = clip_low
    with pytest.raises(ValueError, match="eps > 0"):
        simple_po_policy_loss(logp, torch.zeros_like(logp), adv, 0.0, 0.2)


def test_params_reach_the_losses_by_name():
    logp, old = _logs([0.5]), _logs([0.25])  # rho = 2
    mask = torch.ones(1, 1)
    a = torch.tensor([1.0], dtype=torch.float64)
    loss, _ = policy_loss("dppo_tv", logp, old, a, mask, 0.3, 0.3, ratio_cap=1.5)
    assert loss.item() == pytest.approx(-1.5 * math.log(0.5))  # the weight capped at 1.5
    loss, _ = policy_loss("sapo", logp, old, a, mask, tau_pos=2.0)
    assert loss.item() == pytest.approx(-2 / (1 + math.exp(-2.0)))


YAML = """
algorithm:
  preset: {preset}
  policy_loss: {loss}
  beta: 0.0
  ppo_epochs: 2
  {extra}
"""


@pytest.mark.parametrize(
    ("preset", "loss", "extra"),
    [
        ("grpo", "dppo_tv", "clip_low: 0.15\n  clip_high: 0.15"),
        ("grpo", "dppo_kl", "clip_low: 0.05\n  clip_high: 0.05"),
        ("sapo", "sapo", "params: {policy_loss: {tau_pos: 1.0, tau_neg: 1.05}}"),
        ("grpo", "simple_po", "clip_low: 0.2\n  clip_high: 0.2"),
    ],
)
def test_each_trains_two_steps_from_yaml(tmp_path, preset, loss, extra):
    cfg = tiny_config(tmp_path / "run", steps=2)  # two passes: the second one off-policy
    cfg["algorithm"] = yaml.safe_load(YAML.format(preset=preset, loss=loss, extra=extra))[
        "algorithm"
    ]
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    assert sorted(rows) == [1, 2]
    assert all(math.isfinite(r["policy/loss"]) for r in rows.values())
    assert rows[2]["policy/grad_norm"] > 0


def test_the_sapo_preset_cites_its_paper():
    assert "arXiv:2511.20347" in PRESETS["sapo"].citation


def test_off_policy_sequence_mask_drops_stale_negative_sequences():
    from rlvr.algorithms import off_policy_sequence_mask

    sampler = _logs([0.5, 0.5], [0.5, 0.5], [0.5, 0.5])
    logp = _logs([0.25, 0.5], [0.25, 0.5], [0.4, 0.9])
    mask = torch.tensor([[1, 1], [1, 1], [1, 0]])
    adv = torch.tensor([-1.0, 1.0, -1.0])
    keep, dropped = off_policy_sequence_mask(logp, sampler, adv, mask, delta=0.3)
    # row 0: mean log(0.5 / 0.25), log(0.5 / 0.5) = 0.347 > 0.3 with A < 0: dropped; row 1: the
    # same divergence, A > 0: kept; row 2: log(0.5 / 0.4) = 0.223 over its one token: kept
    assert keep.tolist() == [[0.0, 0.0], [1.0, 1.0], [1.0, 0.0]]
    assert dropped == pytest.approx(1 / 3)
    keep, _ = off_policy_sequence_mask(logp, sampler, adv[:, None].expand(3, 2), mask, 0.2)
    assert keep.tolist() == [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]  # per-token A, delta 0.2
    with pytest.raises(ValueError, match=">= 0"):
        off_policy_sequence_mask(logp, sampler, adv, mask, -1.0)


def test_off_policy_masking_trains_from_yaml_and_logs_what_it_dropped(tmp_path):
    cfg = tiny_config(tmp_path / "run", steps=2)
    cfg["algorithm"] = yaml.safe_load("preset: grpo\nbeta: 0.0\noff_policy_mask: 0.0\n")
    cfg["rollout"]["dtype"] = "bf16"  # a sampler that rounds differently: some divergence
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    assert sorted(rows) == [1, 2]
    fractions = [r["policy/off_policy_masked_frac"] for r in rows.values()]
    assert all(0.0 <= f <= 1.0 for f in fractions) and max(fractions) > 0


def test_passk_advantages_hand_computed():
    from rlvr.algorithms import passk_advantages

    ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    adv = passk_advantages(rewards, ids, k=2)
    # group 0 (N = 4, N_neg = 3): R = 1 - C(3,2)/C(4,2) = 0.5, sigma = 0.5; A_pos = 0.5 / 0.5
    # = 1, A_neg = (1 - 0.5 - C(2,1)/C(3,1)) / 0.5 = -1/3; group 1 all right: sigma = 0
    expected = [1.0, -1 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0, 0.0]
    torch.testing.assert_close(adv, torch.tensor(expected))
    assert adv[:4].sum().item() == pytest.approx(0.0, abs=1e-6)  # zero-mean in each group
    # k = 1 is GRPO with the population std: (r - p) / sqrt(p (1 - p)), p = 1/4
    one = passk_advantages(rewards[:4], ids[:4], k=1)
    p = 0.25
    torch.testing.assert_close(one, (rewards[:4] - p) / math.sqrt(p * (1 - p)))
    # 0.6 counts as correct from threshold 0.5 on
    soft = passk_advantages(torch.tensor([0.6, 0.0, 0.0, 0.0]), ids[:4], k=2, threshold=0.5)
    torch.testing.assert_close(soft, adv[:4])
    with pytest.raises(ValueError, match="1 <= k <= the group size"):
        passk_advantages(rewards, ids, k=5)


def test_passk_is_chen_et_al_pass_at_k_training_by_brute_force():
    """The closed form is the mean, over the k-subsets holding a sample, of the subsets'
    group-normalised max reward (Chen et al. 2025, arXiv:2508.10751); not verl's grpo_passk
    (Tang et al. 2025, arXiv:2503.19595: only the best sample, r_max - r_second_max)."""
    from itertools import combinations

    import rlvr.algorithms.passk as module
    from rlvr.algorithms import passk_advantages

    doc = module.__doc__
    assert "2508.10751" in doc and "not verl's ``grpo_passk``" in doc and "2503.19595" in doc
    rewards = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    for k in (1, 2, 3, 4):
        subsets = list(combinations(range(6), k))
        scores = torch.tensor([max(rewards[i] for i in s) for s in subsets], dtype=torch.float64)
        normalised = (scores - scores.mean()) / scores.std(unbiased=False)
        expected = [
            torch.stack([z for s, z in zip(subsets, normalised, strict=True) if i in s]).mean()
            for i in range(6)
        ]
        got = passk_advantages(torch.tensor(rewards, dtype=torch.float64), torch.zeros(6), k)
        torch.testing.assert_close(got, torch.stack(expected))


def test_passk_trains_two_steps_from_yaml(tmp_path):
    cfg = tiny_config(tmp_path / "run", steps=2)
    cfg["algorithm"] = yaml.safe_load(
        "preset: grpo\nbeta: 0.0\nadvantage: passk\nparams: {advantage: {k: 2, threshold: 0.2}}"
    )
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    assert sorted(rows) == [1, 2] and all(math.isfinite(r["policy/loss"]) for r in rows.values())


def test_soft_reference_update_hand_computed():
    from rlvr.algorithms import soft_update

    ref = [torch.tensor([1.0, 2.0]), torch.tensor([[0.0]])]
    soft_update(ref, [torch.tensor([3.0, 6.0]), torch.tensor([[4.0]])], alpha=0.25)
    # theta_ref <- 0.25 theta + 0.75 theta_ref
    assert ref[0].tolist() == [1.5, 3.0] and ref[1].tolist() == [[1.0]]
    soft_update(ref, [torch.tensor([3.0, 6.0]), torch.tensor([[4.0]])], alpha=1.0)
    assert ref[0].tolist() == [3.0, 6.0]  # alpha 1: ProRL's hard reset
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        soft_update(ref, ref, alpha=0.0)


def test_reference_mix_is_checked_and_trains_from_yaml(tmp_path):
    from rlvr.config import ConfigError

    algorithm = "preset: grpo\nbeta: 0.04\nreference_reset_every: 1\nreference_mix: 0.5\n"
    cfg = tiny_config(tmp_path / "run", steps=3)
    cfg["algorithm"] = yaml.safe_load(algorithm)
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    assert sorted(rows) == [1, 2, 3] and rows[3]["policy/kl_ref"] > 0
    no_period = {**cfg, "algorithm": {"preset": "grpo", "reference_mix": 0.5}}
    with pytest.raises(ConfigError, match="set reference.reset_every"):
        build_config(no_period)
    lora = {**cfg, "algorithm": yaml.safe_load(algorithm), "model": {**cfg["model"], "lora": {}}}
    with pytest.raises(ConfigError, match="can only be reset"):
        build_config(lora)


def test_gdpo_normalises_each_term_in_its_group_then_whitens_the_sum():
    from rlvr.algorithms import gdpo

    terms = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    ids = torch.zeros(4, dtype=torch.long)
    # each term (0 or 1, two of each) normalises to +-0.866 (mean 0.5, unbiased std 0.577):
    # term 0: [+, -, +, -], term 1: [-, +, +, -]; sums [0, 0, 1.732, -1.732], whitened by
    # their unbiased std sqrt(2): [0, 0, sqrt(1.5), -sqrt(1.5)]
    out = gdpo(terms, torch.tensor([1.0, 1.0]), ids)
    torch.testing.assert_close(out, torch.tensor([0.0, 0.0, 1.5**0.5, -(1.5**0.5)]))
    only_first = gdpo(terms, torch.tensor([2.0, 0.0]), ids)  # the second term weighs nothing
    torch.testing.assert_close(only_first, torch.tensor([1.0, -1.0, 1.0, -1.0]) * 0.75**0.5)


def test_gdpo_trains_two_steps_from_yaml_on_reward_terms(tmp_path):
    cfg = tiny_config(tmp_path / "run", steps=2)
    cfg["algorithm"] = yaml.safe_load("preset: grpo\nbeta: 0.0\nadvantage: gdpo")
    cfg["reward"] = yaml.safe_load(
        "terms:\n"
        "  - {name: 'rewards_for_tests:letter_fraction'}\n"
        "  - {name: 'rewards_for_tests:is_letter', weight: 0.5}\n"
    )
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    assert sorted(rows) == [1, 2] and all(math.isfinite(r["policy/loss"]) for r in rows.values())
    from rlvr.algorithms import AdvantageInputs, compute_advantages

    bare = AdvantageInputs(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="gdpo needs reward_terms: .*reward.terms"):
        compute_advantages("gdpo", bare)
