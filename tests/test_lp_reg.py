"""Lp-Reg (Huang et al. 2025, arXiv:2510.03222): the min-p proxy and the loss on hand-computed
tokens, and the learner's proxy pass of pi_old on the tiny model."""

from __future__ import annotations

import math

import pytest
import torch
from test_lora import built
from test_trainer import tiny_config

from rlvr import algorithms
from rlvr.algorithms import lp_reg_policy_loss, min_p_proxy_logprobs
from rlvr.policy import completion_logprobs, min_p_logprobs


def test_the_proxy_keeps_tokens_within_kappa_of_the_top_and_renormalises():
    """p = (0.5, 0.3, 0.19, 0.01), kappa 0.1: the tokens with p >= 0.05 keep their share of
    0.99; the last is filtered (-inf). At temperature 2 the distribution is sqrt(p) normalised
    (0.01's share is then 0.1 / sum sqrt(p) > 0.1 x the top's: kept)."""
    p = torch.tensor([0.5, 0.3, 0.19, 0.01])
    logits = p.log().expand(4, 4)
    got = min_p_proxy_logprobs(logits, torch.tensor([0, 1, 2, 3]), kappa=0.1)
    expected = [math.log(0.5 / 0.99), math.log(0.3 / 0.99), math.log(0.19 / 0.99)]
    assert got[:3].tolist() == pytest.approx(expected, abs=1e-6)
    assert got[3].item() == float("-inf")
    warm = min_p_proxy_logprobs(logits, torch.tensor([0, 1, 2, 3]), kappa=0.1, temperature=2.0)
    root = p.sqrt() / p.sqrt().sum()
    assert warm.tolist() == pytest.approx(root.log().tolist(), abs=1e-6)  # nothing filtered
    with pytest.raises(ValueError, match="kappa"):
        min_p_proxy_logprobs(logits, torch.tensor([0, 1, 2, 3]), kappa=1.5)


def test_lp_reg_regularises_the_lowest_negative_tokens_the_proxy_rates_higher():
    """Row 0 (A = -1): three negative-advantage tokens, rho 1 selects all three (k = 3 > 1);
    token 0 has log pi_proxy = log pi + 0.5 (regularised: -A + beta k3(0.5)), token 1 was
    filtered (-inf), token 2's proxy is below pi. Row 1 (A = +1) keeps the clipped loss. With
    rho 0.5, k = max(1, int(1.5)) = 1 is not > 1: nothing is regularised."""
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.5, -0.5]], requires_grad=True)
    old = logp.detach().clone()
    adv = torch.tensor([-1.0, 1.0])
    mask = torch.ones(2, 3)
    proxy = torch.tensor([[-0.5, float("-inf"), -3.2], [-0.1, -0.1, -0.1]])
    loss, info = lp_reg_policy_loss(logp, old, adv, mask, proxy, rho=1.0, beta=0.5)
    k3 = math.exp(0.5) - 0.5 - 1
    torch.testing.assert_close(
        loss.detach(), torch.tensor([[1 + 0.5 * k3, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    )
    assert info["is_lp_regularised"].tolist() == [[True, False, False], [False, False, False]]
    loss.sum().backward()
    # d/dlogp of -A e^(logp - old) + beta (e^(q - logp) - (q - logp) - 1) at ratio 1
    assert logp.grad[0, 0].item() == pytest.approx(1 + 0.5 * (1 - math.exp(0.5)))
    assert logp.grad[0, 1].item() == pytest.approx(1.0)  # the clipped surrogate's -A
    plain, _ = lp_reg_policy_loss(logp, old, adv, mask, proxy, rho=0.5, beta=0.5)
    clipped, _ = algorithms.clipped_policy_loss(logp, old, adv)
    torch.testing.assert_close(plain, clipped)
    with pytest.raises(ValueError, match="proxy_logp"):
        algorithms.policy_loss("lp_reg", logp, old, adv, mask)


def test_the_learner_passes_pi_olds_min_p_proxy_to_the_loss(tmp_path):
    """``algorithm.policy_loss: {name: lp_reg, rho: 1, kappa: 0.4, beta: 0.5}`` on the tiny
    model, one micro-batch: the prepared proxy is min_p_logprobs of the policy before the
    update, and the step's loss is the token mean of -A (ratio 1) plus beta k3 on the selected
    tokens, those of negative advantage that the proxy rates above the policy. The learner runs
    the output layer 7 tokens at a time (train.logprob_chunk_tokens): its proxy is the one
    computed all at once, and so is min_p_logprobs' at 5."""
    algorithm = {
        "policy_loss": {"name": "lp_reg", "rho": 1.0, "kappa": 0.4, "beta": 0.5},
        "aggregation": "token-mean",
    }
    cfg = tiny_config(
        tmp_path / "run",
        steps=1,
        algorithm=algorithm,
        rollout={"dtype": "fp32"},
        train={"micro_batch_size": 8, "logprob_chunk_tokens": 7},
    )
    with built(cfg) as parts:
        learner = parts.learners
        data, _ = parts.collector.collect(1)
        step = learner.prepare(data)
        batch, t = step.batch, learner.forward.temperature
        with torch.no_grad():
            logp, _ = completion_logprobs(learner.policy, batch, t)
            proxy = min_p_logprobs(learner.policy, batch, t, 0.4)
            chunked = min_p_logprobs(learner.policy, batch, t, 0.4, chunk_tokens=5)
        mask = batch.action_mask > 0
        torch.testing.assert_close(step.proxy_logp[mask], proxy[mask])
        torch.testing.assert_close(chunked[mask], proxy[mask])
        assert (proxy[mask] == float("-inf")).any() and (proxy[mask] > logp[mask]).any()
        adv = step.advantages[:, None].expand(mask.shape)
        chosen = mask & (adv < 0) & (logp < proxy)
        assert chosen.any()
        d = torch.where(chosen, proxy, logp) - logp
        per_token = -adv + 0.5 * (d.exp() - d - 1)
        expected = per_token[mask].mean().item()
        metrics, bad = learner.update(data)
    assert bad is None
    assert metrics["policy/loss"] == pytest.approx(expected, rel=1e-4, abs=1e-5)
    assert metrics["policy/lp_regularised_frac"] == pytest.approx(
        chosen.sum().item() / mask.sum().item(), rel=1e-6
    )
