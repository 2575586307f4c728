"""HAPO (Liu et al. 2025, arXiv:2509.16591): the Token Level Group Average and the
entropy-adaptive clip and advantage (AAC, DAR) by hand, and the preset from YAML on the tiny
model with the learner's own entropies."""

from __future__ import annotations

import math

import pytest
import torch
from test_lora import built
from test_trainer import step_rows, tiny_config

from rlvr import algorithms
from rlvr.config import build_config
from rlvr.policy import completion_logprobs
from rlvr.trainer import train


def test_the_groups_statistics_are_over_its_tokens_with_grpos_fallback():
    """Group 0: rewards (1, 0) of 1 and 3 tokens: mu = 1/4, sigma^2 = (0.75^2 + 3 x 0.25^2) / 4
    = 0.1875, A = (0.75, -0.25) / (sqrt(0.1875) + 1e-6) = (sqrt(3), -1/sqrt(3)) (GRPO: ±0.707).
    Group 1: the one right answer of 1 token among three of 30: its TLGA advantage is
    (90/91) / sigma = 9.5 >= 5, so the group takes GRPO's (1.5, -0.5, -0.5, -0.5). Group 2, of
    one, keeps its reward; group 3's rewards are equal: 0."""
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.3, 1.0, 1.0])
    ids = torch.tensor([0, 0, 1, 1, 1, 1, 2, 3, 3])
    lengths = torch.tensor([1, 3, 1, 30, 30, 30, 5, 2, 7])
    got = algorithms.token_level_group_average(rewards, ids, lengths)
    sigma = math.sqrt(0.1875) + 1e-6
    want = [0.75 / sigma, -0.25 / sigma]
    want += [x / (0.5 + 1e-6) for x in (0.75, -0.25, -0.25, -0.25)] + [0.3, 0.0, 0.0]
    torch.testing.assert_close(got, torch.tensor(want))
    assert got[0].item() == pytest.approx(math.sqrt(3), rel=1e-5)
    assert (got[:2] * lengths[:2]).sum().item() == pytest.approx(0.0, abs=1e-6)  # token-weighted
    # a higher threshold keeps group 1's TLGA advantage: (90/91) / sigma
    kept = algorithms.token_level_group_average(rewards, ids, lengths, fallback=20.0)
    sigma1 = math.sqrt((1 * (90 / 91) ** 2 + 90 * (1 / 91) ** 2) / 91) + 1e-6
    assert kept[2].item() == pytest.approx((90 / 91) / sigma1, rel=1e-5)
    # equal lengths: GRPO with the population std
    same = algorithms.token_level_group_average(rewards[:2], ids[:2], torch.tensor([4, 4]))
    torch.testing.assert_close(same, torch.tensor([0.5, -0.5]) / (0.5 + 1e-6))
    with pytest.raises(ValueError, match="lengths must be"):
        algorithms.token_level_group_average(rewards, ids, lengths[:3])


def test_hapo_reads_the_completion_lengths_from_the_mask():
    rewards, ids = torch.tensor([1.0, 0.0]), torch.tensor([0, 0])
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0]])
    inputs = algorithms.AdvantageInputs(rewards, ids, mask=mask)
    got = algorithms.compute_advantages("hapo", inputs).advantages
    torch.testing.assert_close(
        got, algorithms.token_level_group_average(rewards, ids, torch.tensor([1, 3]))
    )


def test_hapo_trains_from_yaml(tmp_path):
    cfg = tiny_config(tmp_path / "run", steps=2, algorithm={"advantage": "hapo"})
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    assert sorted(rows) == [1, 2] and all(math.isfinite(r["policy/loss"]) for r in rows.values())
    assert any(r["advantages/abs_mean"] > 0 for r in rows.values())


def test_entropy_scores_rank_tokens_against_the_pivot_quantile():
    """log H = (-2, -1, 0, 1, 3): the 0.8-quantile (nearest) is 1, h = (-3, -2, -1, 0, 2), so
    h_hat = (-1, -2/3, -1/3, 0, 1); as released (h / min h below the pivot) every score is
    >= 0: (1, 2/3, 1/3, 0, 1). Masked tokens neither count nor score."""
    entropy = torch.tensor([[-2.0, -1.0, 0.0, 1.0, 3.0, 9.0]]).exp()
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    want = [-1.0, -2 / 3, -1 / 3, 0.0, 1.0, 0.0]
    assert algorithms.entropy_scores(entropy, mask)[0].tolist() == pytest.approx(want)
    released = algorithms.entropy_scores(entropy, mask, as_released=True)[0].tolist()
    assert released == pytest.approx([1.0, 2 / 3, 1 / 3, 0.0, 1.0, 0.0])
    assert not algorithms.entropy_scores(entropy, torch.zeros_like(mask)).any()
    with pytest.raises(ValueError, match="pivot"):
        algorithms.entropy_scores(entropy, mask, pivot=1.5)


def test_hapo_loss_adapts_each_tokens_clip_and_advantage_to_its_entropy_by_hand():
    """The scores above, A = 1, ratios (1, 1.5, 0.9, 1, 1.3), eps 0.2, alpha = beta = 1.
    AAC: eps_low = 0.2 (1 - h_hat) = (0.4, 1/3, 4/15, 0.2, 0.2), eps_high = (0.2 x 4, 0.4).
    DAR: N = (1 - eps_low / 2, 1 + eps_high / 2); a low-entropy token inside N gets A (1 + h_hat):
    tokens 0, 2, 3 -> (0, 2/3, 1); token 1 is outside (A = 1); the high-entropy token 4 is
    outside (1, 1.2): A = 2. Loss = -A' clip(ratio): (0, -1.2 (clipped at 1.2), -0.6, -1,
    -2.6), gradient -A' ratio where not clipped."""
    entropy = torch.tensor([[-2.0, -1.0, 0.0, 1.0, 3.0]]).exp()
    mask = torch.ones(1, 5)
    old = torch.zeros(1, 5)
    logp = torch.tensor([[1.0, 1.5, 0.9, 1.0, 1.3]]).log().requires_grad_()
    loss, info = algorithms.hapo_policy_loss(
        logp, old, torch.tensor([1.0]), mask, entropy, clip_low=0.2, clip_high=0.2
    )
    assert loss[0].tolist() == pytest.approx([0.0, -1.2, -0.6, -1.0, -2.6], abs=1e-6)
    assert info["is_clipped_high"][0].tolist() == [False, True, False, False, False]
    loss.sum().backward()
    assert logp.grad[0].tolist() == pytest.approx([0.0, 0.0, -0.6, -1.0, -2.6], abs=1e-6)
    # as released: every score >= 0, so eps_low stays 0.2 and token 0 (h_hat 1) keeps A = 1
    # inside N; token 1 (h_hat 2/3) is outside N = (0.9, 1 + 0.2 (5/3) / 2) and gets A = 5/3
    loss, _ = algorithms.hapo_policy_loss(
        logp.detach(), old, torch.tensor([1.0]), mask, entropy, as_released=True
    )
    assert loss[0, :2].tolist() == pytest.approx([-1.0, -5 / 3 * (1 + 0.2 * 5 / 3)], abs=1e-6)
    with pytest.raises(ValueError, match="adv_beta and clip_alpha"):
        algorithms.hapo_policy_loss(logp, old, torch.tensor([1.0]), mask, entropy, adv_beta=-1)
    with pytest.raises(ValueError, match="needs entropy"):
        algorithms.policy_loss("hapo", logp, old, torch.tensor([1.0]), mask)


def test_the_hapo_preset_adapts_to_the_learners_own_token_entropies(tmp_path):
    """Step 1 of the preset in one micro-batch (pi = pi_old, ratio 1): the logged loss is the
    token mean of -A' with A' from TLGA's advantages and the entropies of the policy's own
    forward, scored over the micro-batch; then two steps from YAML train."""
    cfg = tiny_config(tmp_path / "run", steps=1, algorithm={"preset": "hapo"})
    del cfg["algorithm"]["kl"]
    cfg["rollout"]["dtype"] = "fp32"
    cfg["train"]["micro_batch_size"] = 64
    with built(cfg) as parts:
        data, _ = parts.collector.collect(1)
        batch = parts.learners.batch(data)
        with torch.no_grad():  # the policy the update starts from
            _, entropy = completion_logprobs(parts.learners.policy, batch, with_entropy=True)
        metrics, bad = parts.learners.update(data)
    assert bad is None
    mask = batch.action_mask.float()
    lengths = mask.sum(-1)
    adv = algorithms.token_level_group_average(data.rewards, data.group_ids, lengths)
    h_hat = algorithms.entropy_scores(entropy, mask)
    scaled = adv[:, None] * (1 + h_hat)  # ratio 1: inside N, so only low-entropy tokens scale
    adv_tok = torch.where(h_hat > 0, adv[:, None].expand_as(scaled), scaled)
    expected = -(adv_tok * mask).sum() / mask.sum()
    assert metrics["policy/loss"] == pytest.approx(expected.item(), abs=1e-5)
    cfg = tiny_config(tmp_path / "yaml", steps=2, algorithm={"preset": "hapo"})
    del cfg["algorithm"]["kl"]
    train(build_config(cfg))
    rows = step_rows(tmp_path / "yaml")
    assert sorted(rows) == [1, 2] and all(math.isfinite(r["policy/loss"]) for r in rows.values())
