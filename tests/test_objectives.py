"""Objectives beyond the policy gradient (docs/objectives.md): SFT, rejection-sampling
fine-tuning, on-policy distillation, DPO / IPO / REBEL offline, online and semi-online, and the
SFT term beside RL. Each formula on a hand-computed example, each objective trained on the tiny
model, and the resume of each exact."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from test_lora import built
from test_trainer import COMPARED, step_rows, tiny_config

from rlvr import algorithms
from rlvr.algorithms import PRESETS, PairLogps, preference_pairs
from rlvr.config import ConfigError, build_config
from rlvr.data import Demonstration, Problem
from rlvr.envs.chat import encode_demonstration
from rlvr.models import load_model, load_tokenizer, stop_token_ids
from rlvr.policy import completion_logprobs, make_batch
from rlvr.trainer import train


def _t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


# ---------------------------------------------------------------- the formulas, by hand

PAIRS = PairLogps(
    chosen=_t([-1.0, -2.0]),
    rejected=_t([-3.0, -1.0]),
    ref_chosen=_t([-1.5, -2.0]),
    ref_rejected=_t([-2.5, -1.5]),
    old_chosen=_t([-1.2, -2.2]),
    old_rejected=_t([-2.8, -1.1]),
    reward_margin=_t([1.0, 0.5]),
)
# h = (chosen - ref_chosen) - (rejected - ref_rejected) = [0.5 + 0.5, 0 - 0.5] = [1.0, -0.5]
# REBEL's delta = (chosen - old_chosen) - (rejected - old_rejected) = [0.2 + 0.2, 0.2 - 0.1]


def _softplus(x: float) -> float:
    return math.log1p(math.exp(x))  # -log sigmoid(-x)


def test_dpo_on_hand_computed_pairs():
    loss, info = algorithms.dpo_loss(PAIRS, beta=0.1)
    # -log sigmoid(beta h) = softplus(-beta h)
    torch.testing.assert_close(loss, _t([_softplus(-0.1), _softplus(0.05)]))
    torch.testing.assert_close(info["reward_margin"], _t([0.1, -0.05]))
    torch.testing.assert_close(info["accuracy"], _t([1.0, 0.0]).float())
    smooth, _ = algorithms.dpo_loss(PAIRS, beta=0.1, label_smoothing=0.2)
    expected = [
        0.8 * _softplus(-0.1) + 0.2 * _softplus(0.1),
        0.8 * _softplus(0.05) + 0.2 * _softplus(-0.05),
    ]
    torch.testing.assert_close(smooth, _t(expected))


def test_length_normalised_dpo_on_hand_computed_pairs():
    """Tulu 3's eq. 6: h_norm = 0.5 / 2 - (-0.5) / 4 = 0.375 and 0 / 1 - 0.5 / 5 = -0.1."""
    pairs = dataclasses.replace(PAIRS, chosen_tokens=_t([2.0, 1.0]), rejected_tokens=_t([4.0, 5.0]))
    loss, info = algorithms.dpo_norm_loss(pairs, beta=5.0)
    torch.testing.assert_close(loss, _t([_softplus(-5 * 0.375), _softplus(5 * 0.1)]))
    torch.testing.assert_close(info["accuracy"], _t([1.0, 0.0]).float())
    with pytest.raises(ValueError, match="token counts"):
        algorithms.dpo_norm_loss(PAIRS)


def test_exo_on_hand_computed_pairs():
    """EXO eq. 16 at beta 0.1, e = 1e-3: h = 1 gives p = sigmoid(0.1) = 0.52498, so
    l = p log(p / 0.999) + (1 - p) log((1 - p) / 0.001); h = -0.5 gives p = sigmoid(-0.05)."""

    def exo(x: float, e: float) -> float:
        p = 1 / (1 + math.exp(-x))
        return p * math.log(p / (1 - e)) + (1 - p) * math.log((1 - p) / e)

    loss, info = algorithms.exo_loss(PAIRS, beta=0.1)
    torch.testing.assert_close(loss, _t([exo(0.1, 1e-3), exo(-0.05, 1e-3)]))
    assert loss[0].item() == pytest.approx(
        0.52498 * math.log(0.52498 / 0.999) + 0.47502 * math.log(475.02), rel=1e-4
    )
    torch.testing.assert_close(info["accuracy"], _t([1.0, 0.0]).float())
    # the reverse KL is 0 where the policy's pair distribution is the labels' (1 - e, e)
    e = 0.2
    h = math.log((1 - e) / e) / 0.1  # sigmoid(beta h) = 1 - e
    chosen = PAIRS.ref_chosen + (PAIRS.rejected - PAIRS.ref_rejected) + h
    at_labels = dataclasses.replace(PAIRS, chosen=chosen)
    zero, _ = algorithms.exo_loss(at_labels, beta=0.1, label_smoothing=e)
    assert abs(zero[0].item()) < 1e-5
    # its gradient on h: p (1 - p) beta [log(p / (1 - e)) - log((1 - p) / e)], negative below
    h = torch.tensor([1.0], requires_grad=True)
    zeros = {f: _t([0.0]) for f in ("rejected", "ref_chosen", "ref_rejected", "old_chosen")}
    one = PairLogps(chosen=h, old_rejected=_t([0.0]), reward_margin=_t([1.0]), **zeros)
    algorithms.exo_loss(one, beta=0.1)[0].sum().backward()
    p = 1 / (1 + math.exp(-0.1))
    expected = p * (1 - p) * 0.1 * (math.log(p / 0.999) - math.log((1 - p) / 1e-3))
    assert h.grad.item() == pytest.approx(expected, rel=1e-5) and h.grad.item() < 0
    with pytest.raises(ValueError, match="label_smoothing"):
        algorithms.exo_loss(PAIRS, label_smoothing=0.0)


def test_ipo_on_hand_computed_pairs():
    loss, info = algorithms.ipo_loss(PAIRS, tau=0.1)
    torch.testing.assert_close(loss, _t([(1.0 - 5.0) ** 2, (-0.5 - 5.0) ** 2]))  # (h - 1/(2 tau))^2
    torch.testing.assert_close(info["reward_margin"], _t([0.1, -0.05]))


def test_rebel_on_hand_computed_pairs():
    loss, info = algorithms.rebel_loss(PAIRS, eta=1.0)
    torch.testing.assert_close(loss, _t([(0.4 - 1.0) ** 2, (0.1 - 0.5) ** 2]))
    torch.testing.assert_close(info["log_ratio_margin"], _t([0.4, 0.1]))
    halved, _ = algorithms.rebel_loss(PAIRS, eta=2.0)
    torch.testing.assert_close(halved, _t([(0.2 - 1.0) ** 2, (0.05 - 0.5) ** 2]))


def test_copg_on_hand_computed_pairs():
    """CoPG's (r - r' - beta h)^2 at beta 0.1: (1 - 0.1)^2 and (0.5 + 0.05)^2; with a reward
    difference of 1/2 it is beta^2 x IPO at tau = beta; its gradient pushes h towards
    (r - r') / beta."""
    loss, info = algorithms.copg_loss(PAIRS, beta=0.1)
    torch.testing.assert_close(loss, _t([(1.0 - 0.1) ** 2, (0.5 + 0.05) ** 2]))
    torch.testing.assert_close(info["reward_margin"], _t([0.1, -0.05]))
    half = dataclasses.replace(PAIRS, reward_margin=_t([0.5, 0.5]))
    ipo, _ = algorithms.ipo_loss(half, tau=0.1)
    torch.testing.assert_close(algorithms.copg_loss(half, beta=0.1)[0], 0.01 * ipo)
    chosen = _t([-1.0]).requires_grad_()
    one = dataclasses.replace(
        PAIRS, **{k: getattr(PAIRS, k)[:1] for k in ("rejected", "ref_chosen", "ref_rejected")}
    )
    one = dataclasses.replace(one, chosen=chosen, reward_margin=_t([1.0]))
    algorithms.copg_loss(one, beta=0.1)[0].sum().backward()
    assert chosen.grad.item() == pytest.approx(2 * (1.0 - 0.1) * -0.1)  # descent raises log pi(y_c)
    with pytest.raises(ValueError, match="reference"):
        algorithms.copg_loss(PairLogps(**{**PAIRS.__dict__, "ref_chosen": None}))


def test_tpo_on_hand_computed_pairs():
    """TPO at beta 0.1, alpha 0.5: margins 0.1 (-1 + 3) = 0.2 and 0.1 (-2 + 1) = -0.1 on the
    policy's own log-probs (no reference), plus 0.5 x the chosen's NLL per token (1/2, 2/4)."""
    pairs = dataclasses.replace(
        PAIRS, ref_chosen=None, ref_rejected=None, chosen_tokens=_t([2.0, 4.0])
    )
    loss, info = algorithms.tpo_loss(pairs, beta=0.1, alpha=0.5)
    torch.testing.assert_close(loss, _t([_softplus(-0.2) + 0.25, _softplus(0.1) + 0.25]))
    torch.testing.assert_close(info["reward_margin"], _t([0.2, -0.1]))
    torch.testing.assert_close(info["gold_nll"], _t([0.5, 0.5]))
    torch.testing.assert_close(info["accuracy"], _t([1.0, 0.0]).float())
    no_gold, _ = algorithms.tpo_loss(pairs, beta=0.1, alpha=0.0)
    torch.testing.assert_close(no_gold, _t([_softplus(-0.2), _softplus(0.1)]))
    with pytest.raises(ValueError, match="token counts"):
        algorithms.tpo_loss(PAIRS)
    with pytest.raises(ValueError, match="alpha"):
        algorithms.tpo_loss(pairs, alpha=-1.0)


def test_inpo_on_hand_computed_pairs():
    """INPO at eta 0.25 (target 1/(2 eta) = 2), ratio 1/3: h_theta = (2, -1), h_ref = (1, -0.5),
    h_t = (1.8, -1.1) of the sampling snapshot, anchored margins 2 - 1/3 - 1.2 = 0.4667 and
    -1 + 1/6 + 0.7333 = -0.1; with ratio 1 it is IPO at tau = eta."""
    pairs = dataclasses.replace(
        PAIRS, sampler_chosen=_t([-1.1, -2.1]), sampler_rejected=_t([-2.9, -1.0])
    )
    loss, info = algorithms.inpo_loss(pairs, eta=0.25, ratio=1 / 3)
    anchored = [2 - 1 / 3 - 2 / 3 * 1.8, -1 + 0.5 / 3 + 2 / 3 * 1.1]
    torch.testing.assert_close(info["anchored_margin"], _t(anchored))
    torch.testing.assert_close(loss, _t([(a - 2.0) ** 2 for a in anchored]))
    torch.testing.assert_close(info["accuracy"], _t([1.0, 0.0]).float())
    ipo, _ = algorithms.ipo_loss(PAIRS, tau=0.25)
    torch.testing.assert_close(algorithms.inpo_loss(pairs, eta=0.25, ratio=1.0)[0], ipo)
    chosen = _t([-1.0, -2.0]).requires_grad_()
    algorithms.inpo_loss(dataclasses.replace(pairs, chosen=chosen), eta=0.25)[0].sum().backward()
    assert chosen.grad.tolist() == pytest.approx([2 * (a - 2.0) for a in anchored])  # < 0
    with pytest.raises(ValueError, match="sampling policy"):
        algorithms.inpo_loss(PAIRS)
    with pytest.raises(ValueError, match="reference"):
        algorithms.inpo_loss(dataclasses.replace(pairs, ref_chosen=None))
    with pytest.raises(ValueError, match="ratio"):
        algorithms.inpo_loss(pairs, ratio=1.5)
    with pytest.raises(ValueError, match="reads the log-probs its pairs were sampled with"):
        algorithms.resolve("inpo", objective={"samples": "data", "sync_every": 1})


def test_disco_on_hand_computed_groups():
    """Question 0 (rewards 1, 0, 1, 0; scores -1, -2, -3, -4): DisCO-b's J = -2 - (-3) = 1;
    DisCO's at tau 1 is -2 - log((e^-2 + e^-4) / 2), whose gradient weighs the negatives by
    softmax(s / tau). Question 1 is all correct (no J, not valid); question 2 has one correct
    answer. A graded reward (0.5) is refused. The penalty is (beta / 2) [KL - delta]_+^2."""
    scores = _t([[-1.0, -2.0, -3.0, -4.0], [-1.0, -1.0, -1.0, -1.0], [-5.0, -1.0, -2.0, -3.0]])
    rewards = _t([[1, 0, 1, 0], [1, 1, 1, 1], [0, 1, 0, 0]])
    basic, valid = algorithms.disco_objective(scores, rewards)
    torch.testing.assert_close(basic, _t([1.0, 0.0, -1.0 + 10.0 / 3]))
    assert valid.tolist() == [True, False, True]
    with pytest.raises(ValueError, match="0/1 reward"):
        algorithms.disco_objective(scores, _t([[0.5, 1, 0, 0]] * 3))
    s = scores.clone().requires_grad_()
    hard, _ = algorithms.disco_objective(s, rewards, tau=1.0)
    expected0 = -2.0 - math.log((math.exp(-2) + math.exp(-4)) / 2)
    assert hard[0].item() == pytest.approx(expected0)
    hard[0].backward()
    w = torch.softmax(_t([-2.0, -4.0]), 0)
    torch.testing.assert_close(s.grad[0], _t([0.5, -w[0].item(), 0.5, -w[1].item()]))
    logp = _t([[-1.0, -3.0, 0.0], [-2.0, -2.0, -2.0]])
    old = _t([[-1.0, -2.0, 0.0], [-2.0, -2.0, -1.0]])
    mask = _t([[1, 1, 0], [1, 1, 1]])
    torch.testing.assert_close(algorithms.disco_scores(logp, old, mask), _t([-2.0, -2.0]))
    ratio = algorithms.disco_scores(logp, old, mask, "Lratio")
    torch.testing.assert_close(ratio, _t([(1 + math.exp(-1)) / 2, (2 + math.exp(-1)) / 3]))
    from rlvr.algorithms.disco import kl_penalty_squared_hinge

    assert kl_penalty_squared_hinge(_t(3e-4), 1e-4, 1e3).item() == pytest.approx(2e-5)
    assert kl_penalty_squared_hinge(_t(5e-5), 1e-4, 1e3).item() == 0.0
    with pytest.raises(ValueError, match="score"):
        algorithms.disco_scores(logp, old, mask, "ratio")
    with pytest.raises(ValueError, match="tau"):
        algorithms.disco_objective(scores, rewards, tau=0.0)


def test_disco_trains_whole_questions_per_micro_batch_with_pi_olds_kl(tmp_path):
    """The disco preset on the tiny model, one group of 4 per micro-batch: with one minibatch
    the update's loss is -mean_q J_q from the policy's own log-probs (KL 0: pi = pi_old); with
    the preset's 4 minibatches the later ones see pi moved from pi_old (KL > 0)."""
    cfg = objective_config(tmp_path / "run", "disco", steps=1, minibatches=1)
    cfg["train"]["micro_batch_size"] = 4
    with built(cfg) as parts:
        learner = parts.learners
        data, _ = parts.collector.collect(1)
        rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0])  # correct or wrong
        data = data.with_columns(rewards=rewards)
        step = learner.prepare(data)
        assert step.units == 2 and step.rows.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
        with torch.no_grad():
            logp, _ = completion_logprobs(learner.policy, step.batch, learner.forward.temperature)
        mask = step.batch.action_mask.float()
        scores = algorithms.disco_scores(logp, logp, mask).view(2, 4)
        terms, valid = algorithms.disco_objective(scores, rewards.view(2, 4), 10.0)
        assert valid.all() and (terms != 0).all()
        metrics, bad = learner.update(data)
    assert bad is None
    assert metrics["policy/loss"] == pytest.approx(-terms.mean().item(), rel=1e-4, abs=1e-6)
    assert metrics["disco/kl"] == pytest.approx(0.0, abs=1e-6)
    cfg = objective_config(tmp_path / "four", "disco", steps=2)
    cfg["train"]["micro_batch_size"] = 4
    train(build_config(cfg))
    rows = step_rows(tmp_path / "four")
    assert any(row["disco/kl"] > 0 for row in rows.values())


def test_drpo_weighs_the_correct_answers_by_their_length_on_hand_computed_groups():
    """DRPO's weights over question 0's correct answers (lengths 2 and 4 of L_max 10, lambda
    0.1): softmax(8, 6) = (1, e^-2) / (1 + e^-2); the wrong ones get 0, and so does a question
    without a correct answer. J = the weighted correct scores - DisCO's negative term, and
    its gradient is the weight on each correct score (none through the weights). lambda -> inf
    is DisCO's mean."""
    lengths = _t([[2, 5, 4, 1], [3, 3, 3, 3]])
    rewards = _t([[1, 0, 1, 0], [0, 0, 0, 0]])
    weights = algorithms.drpo_positive_weights(lengths, rewards, 0.1, 10)
    z = 1 + math.exp(-2)
    torch.testing.assert_close(weights, _t([[1 / z, 0, math.exp(-2) / z, 0], [0, 0, 0, 0]]))
    uniform = algorithms.drpo_positive_weights(lengths, rewards, 1e9, 10)
    torch.testing.assert_close(uniform[0], _t([0.5, 0, 0.5, 0]))
    scores = _t([[-1.0, -2.0, -3.0, -4.0], [-1.0, -1.0, -1.0, -1.0]]).requires_grad_()
    terms, valid = algorithms.disco_objective(scores, rewards, None, weights)
    assert valid.tolist() == [True, False]
    assert terms[0].item() == pytest.approx((-1 - 3 * math.exp(-2)) / z - (-3.0))
    terms[0].backward()
    torch.testing.assert_close(scores.grad[0], _t([1 / z, -0.5, math.exp(-2) / z, -0.5]))
    with pytest.raises(ValueError, match="lam"):
        algorithms.drpo_positive_weights(lengths, rewards, 0.0, 10)
    # the loss: log-probs -1 on every token, so each score is -1 whatever the length
    mask = _t([[[1] * 2 + [0] * 2, [1] * 4, [1] * 4, [1, 0, 0, 0]]])
    logp = -mask.clone()
    terms, penalty, info = algorithms.drpo_loss((logp, logp, mask, rewards[:1]), 10, lam=0.1)
    torch.testing.assert_close(info["positive_weights"], weights[:1])
    assert terms.item() == pytest.approx(0.0, abs=1e-6) and penalty.item() == 0.0  # -1 - (-1)


def test_drpo_reads_the_runs_max_new_tokens_and_its_completions_lengths(tmp_path):
    """The drpo preset on the tiny model (one minibatch, one group per micro-batch): the
    update's loss is -mean_q J_q with the correct answers weighed by their lengths (truncated
    here to 12, 3, 12, 6 / 2, 12, 9, 12 tokens) against rollout.max_new_tokens (12); rlvr fills
    max_new_tokens, a config that sets it is refused."""
    cfg = objective_config(tmp_path / "run", "drpo", steps=1, minibatches=1)
    cfg["train"]["micro_batch_size"] = 4
    cfg["rollout"]["max_new_tokens"] = 12
    keep = [12, 3, 12, 6, 2, 12, 9, 12]
    with built(cfg) as parts:
        learner = parts.learners
        data, _ = parts.collector.collect(1)
        rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0])
        data = data.with_columns(
            rewards=rewards,
            completion_ids=[ids[:k] for ids, k in zip(data.completion_ids, keep, strict=True)],
            sampler_logprobs=[
                lp[:k] for lp, k in zip(data.columns["sampler_logprobs"], keep, strict=True)
            ],
        )
        step = learner.prepare(data)
        mask = step.batch.action_mask.float()
        assert mask.sum(-1).tolist() == keep
        with torch.no_grad():
            logp, _ = completion_logprobs(learner.policy, step.batch, learner.forward.temperature)
        scores = algorithms.disco_scores(logp, logp, mask).view(2, 4)
        weights = algorithms.drpo_positive_weights(
            mask.sum(-1).view(2, 4), rewards.view(2, 4), 0.1, 12
        )
        assert weights[0, 1] > weights[0, 0] > 0  # the 3-token correct answer weighs more
        terms, valid = algorithms.disco_objective(scores, rewards.view(2, 4), 10.0, weights)
        assert valid.all()
        metrics, bad = learner.update(data)
    assert bad is None
    assert metrics["policy/loss"] == pytest.approx(-terms.mean().item(), rel=1e-4, abs=1e-6)
    cfg["algorithm"]["objective"] = {"max_new_tokens": 99}
    with pytest.raises(ConfigError, match="max_new_tokens is set by rlvr"):
        build_config(cfg)


def test_gvpo_regresses_centred_implicit_rewards_on_centred_rewards_by_hand():
    """One group of 3 (beta 0.5): sequence log-ratios (0.2, -0.4, 0.8) give implicit rewards
    r = (0.1, -0.2, 0.4), centred (0, -0.3, 0.3); rewards (1, 0, 0.5) centred (0.5, -0.5, 0);
    L = (0.25 + 0.04 + 0.09) / (2 * 2) = 0.095, and d L / d log pi(o_i,t) = beta / (G - 1) x
    (centred r_i - centred R_i) = 0.25 x (-0.5, 0.2, 0.3) on each of o_i's tokens. On-policy
    (pi = pi_old) the gradient is -beta / (G - 1) (R_i - R̄): Dr. GRPO's direction."""
    old = torch.zeros(1, 3, 2, dtype=torch.float64)
    logp = torch.tensor([[[0.1, 0.1], [-0.4, 0.0], [0.5, 0.3]]], dtype=torch.float64)
    logp.requires_grad_(True)
    mask = torch.tensor([[[1, 1], [1, 0], [1, 1]]], dtype=torch.float64)
    rewards = torch.tensor([[1.0, 0.0, 0.5]], dtype=torch.float64)
    terms, penalty, info = algorithms.gvpo_loss((logp, old, mask, rewards), beta=0.5)
    assert terms.item() == pytest.approx(-0.095) and penalty.item() == 0.0
    assert info["implicit_reward"].item() == pytest.approx(0.1)
    (-terms.sum()).backward()
    expected = 0.25 * torch.tensor([-0.5, 0.2, 0.3], dtype=torch.float64)[:, None] * mask[0]
    torch.testing.assert_close(logp.grad[0], expected)
    on_policy = logp.detach().clone().requires_grad_(True)
    terms, _, _ = algorithms.gvpo_loss((on_policy, on_policy.detach(), mask, rewards), beta=0.5)
    (-terms.sum()).backward()
    drgrpo = -0.25 * torch.tensor([0.5, -0.5, 0.0], dtype=torch.float64)[:, None] * mask[0]
    torch.testing.assert_close(on_policy.grad[0], drgrpo)
    with pytest.raises(ValueError, match="beta"):
        algorithms.gvpo_loss((logp, old, mask, rewards), beta=0.0)
    with pytest.raises(ValueError, match="at least 2"):
        algorithms.gvpo_loss((logp[:, :1], old[:, :1], mask[:, :1], rewards[:, :1]))


def _update_on_graded_rewards(cfg: dict) -> tuple[torch.Tensor, dict[str, float]]:
    """One update of ``cfg``'s first step (micro-batches of 4) with two groups' graded rewards
    put in place of the sampled ones: the rewards [8] and the update's metrics."""
    cfg["train"]["micro_batch_size"] = 4
    with built(cfg) as parts:
        data, _ = parts.collector.collect(1)
        rewards = torch.tensor([1.0, 0.0, 0.5, 0.0, 0.2, 0.2, 0.8, 0.2])
        metrics, bad = parts.learners.update(data.with_columns(rewards=rewards))
    assert bad is None
    return rewards, metrics


def test_gvpo_trains_whole_groups_from_the_preset(tmp_path):
    """The gvpo preset on the tiny model with one minibatch: pi = pi_old, so the update's
    loss is the mean over groups of sum_i (R_i - R̄)^2 / (2 (G - 1)); the preset's 4
    minibatches then move pi off pi_old (a non-zero implicit reward is logged)."""
    cfg = objective_config(tmp_path / "run", "gvpo", steps=1, minibatches=1)
    rewards, metrics = _update_on_graded_rewards(cfg)
    centred = rewards.view(2, 4) - rewards.view(2, 4).mean(-1, keepdim=True)
    expected = (0.5 * centred.pow(2).sum(-1) / 3).mean().item()
    assert metrics["policy/loss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["gvpo/implicit_reward"] == pytest.approx(0.0, abs=1e-6)
    cfg = objective_config(tmp_path / "four", "gvpo", steps=2)
    cfg["train"]["micro_batch_size"] = 4
    train(build_config(cfg))
    rows = step_rows(tmp_path / "four")
    assert any(abs(row["gvpo/implicit_reward"]) > 0 for row in rows.values())


def test_mpo_contrasts_the_above_mean_set_with_its_group_by_hand():
    """One group of 3 (beta 0.5, alpha 1): sequence log-ratios to pi_ref (0.2, -0.4, 0.8) and
    rewards (1, 0, 0.5), mean 0.5, so Y+ = {y_0} and z = beta s + alpha (r - 0.5) =
    (0.6, -0.7, 0.4). J = 0.6 - log(e^0.6 + e^-0.7 + e^0.4) = 0.6 - log 3.81048 = -0.73776,
    and d J / d s_i = beta (p+_i - p_i) with p = softmax(z) = (0.47818, 0.13032, 0.39150), p+ =
    (1, 0, 0). A group of equal rewards has no Y+ and adds nothing; with two answers and
    alpha 0, J is DPO's log sigmoid(beta (s_c - s_r))."""
    ref = torch.zeros(2, 3, 2, dtype=torch.float64)
    logp = torch.tensor([[[0.1, 0.1], [-0.4, 0.0], [0.5, 0.3]]] * 2, dtype=torch.float64)
    logp.requires_grad_(True)
    mask = torch.tensor([[[1, 1], [1, 0], [1, 1]]] * 2, dtype=torch.float64)
    rewards = torch.tensor([[1.0, 0.0, 0.5], [0.3, 0.3, 0.3]], dtype=torch.float64)
    groups = (logp, logp.detach(), mask, rewards)
    terms, penalty, info = algorithms.mpo_loss(groups, ref, beta=0.5, alpha=1.0)
    assert terms.tolist() == pytest.approx([-0.73776, 0.0], abs=1e-5) and penalty.item() == 0
    assert info["valid"].tolist() == [True, False]
    assert info["positive_mass"].item() == pytest.approx(0.47818, abs=1e-5)
    assert info["implicit_reward"].item() == pytest.approx(0.1)  # beta mean s, both groups
    (-terms.sum()).backward()
    per_sequence = -0.5 * torch.tensor([1 - 0.47818, -0.13032, -0.39150], dtype=torch.float64)
    torch.testing.assert_close(logp.grad[0], per_sequence[:, None] * mask[0], atol=1e-5, rtol=0)
    assert not logp.grad[1].any()
    pair = torch.tensor([[0.7, -0.2]], dtype=torch.float64)  # s(y_c), s(y_r)
    j, _, _ = algorithms.mpo_objective(pair, torch.tensor([[1.0, 0.0]]), beta=0.5, alpha=0.0)
    assert j.item() == pytest.approx(torch.nn.functional.logsigmoid(torch.tensor(0.45)).item())
    _, _, z = algorithms.mpo_objective(pair, torch.tensor([[1.0, 0.0]]), beta=0.5, alpha=2.0)
    assert z[0].tolist() == pytest.approx([0.35 + 1.0, -0.1 - 1.0])  # weights e^(+-alpha / 2)
    for beta, alpha in ((0.0, 1.0), (0.1, -1.0)):
        with pytest.raises(ValueError, match="beta must be > 0 and alpha >= 0"):
            algorithms.mpo_objective(pair, torch.tensor([[1.0, 0.0]]), beta, alpha)


def test_mpo_reads_pi_refs_log_probs_and_trains_from_the_preset(tmp_path):
    """The mpo preset on the tiny model: the run keeps a reference, and at step 1 pi = pi_ref,
    so s = 0 and each group's J is alpha's alone: logsumexp over Y+ of (r - r̄) minus that over
    the group. Two steps from the preset then move pi off pi_ref."""
    rewards, metrics = _update_on_graded_rewards(objective_config(tmp_path / "run", "mpo", steps=1))
    deviation = rewards.view(2, 4) - rewards.view(2, 4).mean(-1, keepdim=True)
    chosen = deviation.masked_fill(deviation <= 0, float("-inf")).logsumexp(-1)
    expected = -(chosen - deviation.logsumexp(-1)).mean().item()
    assert metrics["policy/loss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["mpo/implicit_reward"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["mpo/valid_groups_frac"] == 1.0
    cfg = objective_config(tmp_path / "two", "mpo", steps=2)
    train(build_config(cfg))
    rows = step_rows(tmp_path / "two")
    assert abs(rows[2]["mpo/implicit_reward"]) > 0


def _tgdpo_tokens(teacher_chosen, teacher_rejected):
    """One pair: chosen log pi (-1, -2), log pi_ref (-1.2, -1.5); rejected log pi (-0.5, pad),
    log pi_ref (-0.4, pad); the teacher's log-probs as given."""
    chosen = torch.tensor([[-1.0, -2.0]], dtype=torch.float64, requires_grad=True)
    rejected = torch.tensor([[-0.5, 0.0]], dtype=torch.float64, requires_grad=True)
    tokens = algorithms.PairTokens(
        chosen=chosen,
        rejected=rejected,
        ref_chosen=torch.tensor([[-1.2, -1.5]], dtype=torch.float64),
        ref_rejected=torch.tensor([[-0.4, 0.0]], dtype=torch.float64),
        teacher_chosen=teacher_chosen,
        teacher_rejected=teacher_rejected,
        chosen_mask=torch.tensor([[1.0, 1.0]], dtype=torch.float64),
        rejected_mask=torch.tensor([[1.0, 0.0]], dtype=torch.float64),
    )
    pairs = PairLogps(
        **{
            **PAIRS.__dict__,
            "chosen": chosen.sum(-1),
            "rejected": rejected.sum(-1),
            "ref_chosen": tokens.ref_chosen.sum(-1),
            "ref_rejected": tokens.ref_rejected.sum(-1),
        }
    )
    return pairs, tokens


def test_tgdpo_weighs_each_tokens_log_ratio_by_the_teachers_token_reward_by_hand():
    """beta 0.5, alpha 0.5. Chosen: d = (0.2, -0.5), the teacher's (-0.7, -1.5) give r = 0.5
    (0.5, 0) = (0.25, 0), weights 0.5 (1 + 0.5 r) = (0.5625, 0.5), sum 0.1125 - 0.25 = -0.1375.
    Rejected: d = -0.1, r = 0.5 (-1.4 + 0.4) = -0.5, weight 0.5 (1 + 0.25) = 0.625, sum
    -0.0625. h = -0.075, L = log(1 + e^0.075) = 0.731350; dL/dh = -sigmoid(0.075) = -0.518741,
    so the chosen tokens' gradients are -0.518741 (0.5625, 0.5) and the rejected token's
    +0.518741 x 0.625. With the teacher equal to the reference, or alpha 0, it is DPO."""
    teacher = torch.tensor([[-0.7, -1.5]], dtype=torch.float64), torch.tensor([[-1.4, 0.0]])
    pairs, tokens = _tgdpo_tokens(teacher[0], teacher[1].double())
    loss, info = algorithms.tgdpo_loss(pairs, tokens, beta=0.5, alpha=0.5)
    assert loss.item() == pytest.approx(0.731350, abs=1e-6)
    assert info["reward_margin"].item() == pytest.approx(-0.075)
    assert info["chosen_token_reward"].item() == pytest.approx(0.125)  # (0.25 + 0) / 2
    assert info["rejected_token_reward"].item() == pytest.approx(-0.5)
    loss.sum().backward()
    torch.testing.assert_close(
        tokens.chosen.grad, -0.518741 * torch.tensor([[0.5625, 0.5]]).double(), atol=1e-6, rtol=0
    )
    torch.testing.assert_close(
        tokens.rejected.grad, 0.518741 * torch.tensor([[0.625, 0.0]]).double(), atol=1e-6, rtol=0
    )
    dpo, _ = algorithms.dpo_loss(pairs, beta=0.5)  # h = 0.5 (-0.3 + 0.1)
    assert dpo.item() == pytest.approx(-torch.nn.functional.logsigmoid(torch.tensor(-0.1)).item())
    for teacher_chosen, teacher_rejected, alpha in (
        (tokens.ref_chosen, tokens.ref_rejected, 0.5),  # pi_r = pi_ref: r = 0
        (teacher[0], teacher[1].double(), 0.0),
    ):
        pairs, tokens = _tgdpo_tokens(teacher_chosen, teacher_rejected)
        loss, _ = algorithms.tgdpo_loss(pairs, tokens, beta=0.5, alpha=alpha)
        assert loss.item() == pytest.approx(dpo.item())
    pairs, tokens = _tgdpo_tokens(None, None)
    with pytest.raises(ValueError, match="model.teacher"):
        algorithms.tgdpo_loss(pairs, tokens)
    pairs, tokens = _tgdpo_tokens(*teacher)
    for beta, alpha in ((0.0, 0.5), (0.1, -1.0)):
        with pytest.raises(ValueError, match="beta must be > 0 and alpha >= 0"):
            algorithms.tgdpo_loss(pairs, tokens, beta=beta, alpha=alpha)


def test_tgdpo_reads_the_teachers_token_rewards_and_equals_dpo_with_the_initial_policy(
    tmp_path,
):
    """The tgdpo preset on the data's pairs. With model.teacher the initial policy (the
    reference), every token reward is 0 and the run's losses are DPO's. With a DPO-trained
    checkpoint as the teacher (the authors' setup), its token rewards favour the chosen tokens
    and the run moves apart from DPO's."""
    losses = {}
    for preset in ("dpo", "tgdpo"):
        cfg = objective_config(tmp_path / preset, preset, steps=2)
        cfg["model"]["teacher"] = "tiny-random-llama"
        cfg["train"].update(lr=1e-2, lr_schedule="constant", warmup_steps=0)
        if preset == "dpo":
            cfg["checkpoint"] = {"every": 0, "save_final": True}
        train(build_config(cfg))
        losses[preset] = [row["policy/loss"] for row in step_rows(tmp_path / preset).values()]
    assert losses["tgdpo"] == pytest.approx(losses["dpo"], rel=1e-5)
    rows = step_rows(tmp_path / "tgdpo")
    assert rows[2]["preference/chosen_token_reward"] == 0.0
    cfg = objective_config(tmp_path / "guided", "tgdpo", steps=2)
    cfg["model"]["teacher"] = str(tmp_path / "dpo/checkpoints/step_000002")
    cfg["train"].update(lr=1e-2, lr_schedule="constant", warmup_steps=0)
    train(build_config(cfg))
    rows = step_rows(tmp_path / "guided")
    first = rows[1]
    assert first["preference/chosen_token_reward"] > first["preference/rejected_token_reward"]
    assert first["policy/loss"] == pytest.approx(math.log(2))  # pi = pi_ref: h = 0
    assert rows[2]["policy/loss"] != pytest.approx(losses["dpo"][1], rel=1e-4)
    cfg["model"]["teacher"] = None
    cfg["logging"]["run_dir"] = str(tmp_path / "no_teacher")
    with pytest.raises(ConfigError, match="needs a teacher: set model.teacher"):
        train(build_config(cfg))


def test_pair_losses_need_their_inputs_and_valid_strengths():
    no_reference = PairLogps(**{**PAIRS.__dict__, "ref_chosen": None, "ref_rejected": None})
    with pytest.raises(ValueError, match="dpo.*reference"):
        algorithms.dpo_loss(no_reference)
    algorithms.rebel_loss(no_reference)  # REBEL regresses on log-ratios to the sampler only
    for fn, key in ((algorithms.dpo_loss, "beta"), (algorithms.ipo_loss, "tau")):
        with pytest.raises(ValueError, match=key):
            fn(PAIRS, **{key: 0.0})


def test_online_dpo_picks_the_best_and_worst_of_each_group_and_skips_ties():
    rewards = _t([1, 0, 1, 0.5, 0.5, 0, 2, 2, 3])
    groups = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 3])
    chosen, rejected, skipped = preference_pairs(rewards, groups, "best_worst")
    assert chosen.tolist() == [0, 6] and rejected.tolist() == [1, 5]  # first of the best/worst
    assert skipped == 2  # the tied group and the group of one
    chosen, rejected, skipped = preference_pairs(rewards, groups, "adjacent")
    assert chosen.tolist() == [0, 3, 6] and rejected.tolist() == [1, 4, 5] and skipped == 0
    # ids need not be contiguous nor sorted; groups come in order of their first sample
    chosen, rejected, _ = preference_pairs(_t([0, 1, 1, 0]), torch.tensor([5, 2, 5, 2]))
    assert chosen.tolist() == [2, 1] and rejected.tolist() == [0, 3]


def test_the_margin_pairing_takes_every_pair_of_a_group_a_margin_apart():
    """DNO's large-margin pairs: a 6-point judge's scores (6, 3, 5, 4, 1) with margin 2 and
    chosen >= 5 give (6, 3), (6, 4), (6, 1), (5, 3), (5, 1); a group whose best is below 5 gives
    none; with 0/1 rewards and margin 1, every (right, wrong) pair; the student's own positive
    takes the relaxed margin (DNO: 1), a gold response's the full one."""
    rewards = _t([6, 3, 5, 4, 1, 4, 2, 2])
    groups = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1])
    chosen, rejected, skipped = preference_pairs(rewards, groups, "margin", 2.0, 5.0)
    assert list(zip(chosen.tolist(), rejected.tolist(), strict=True)) == [
        (0, 1),
        (0, 3),
        (0, 4),
        (2, 1),
        (2, 4),
    ]
    assert skipped == 1
    chosen, rejected, _ = preference_pairs(rewards, groups, "margin", 2.0)
    assert (chosen[-2:].tolist(), rejected[-2:].tolist()) == ([5, 5], [6, 7])  # 4 vs the 2s
    chosen, rejected, skipped = preference_pairs(
        _t([1, 0, 0, 1, 1, 1]), torch.tensor([0] * 4 + [1] * 2), "margin", 1.0
    )
    assert (chosen.tolist(), rejected.tolist(), skipped) == ([0, 0, 3, 3], [1, 2, 1, 2], 1)
    with pytest.raises(ValueError, match="margin > 0"):
        preference_pairs(rewards, groups, "margin")
    # a gold response (6) needs the margin 2, a student's positive (5) the relaxed 1
    scores, one = _t([6, 5, 4, 3]), torch.zeros(4, dtype=torch.long)
    gold = torch.tensor([True, False, False, False])
    chosen, rejected, _ = preference_pairs(scores, one, "margin", 2.0, 5.0, gold, 1.0)
    pairs = list(zip(chosen.tolist(), rejected.tolist(), strict=True))
    assert pairs == [(0, 2), (0, 3), (1, 2), (1, 3)]
    chosen, rejected, _ = preference_pairs(scores, one, "margin", 2.0, 5.0, gold)
    assert list(zip(chosen.tolist(), rejected.tolist(), strict=True)) == [(0, 2), (0, 3), (1, 3)]


def test_dno_iterates_from_pi_t_as_both_sampler_and_reference(tmp_path):
    """The dno preset with iterations of 2 updates: the sampler is synced and the reference
    reset to the same pi_t every 2 steps, so the first update of each iteration starts at
    pi = pi_ref (DPO's margin 0 exactly) and the second does not; every (right, wrong) pair
    of a 0/1 reward is trained. margin and min_chosen belong to the margin pairing."""
    cfg = objective_config(tmp_path / "run", "dno", steps=4)
    cfg["reward"] = {"function": "rewards_for_tests:is_letter"}
    cfg["rollout"].update(max_new_tokens=1, group_size=6, prompts_per_step=4)
    cfg["train"].update(lr=5e-2, lr_schedule="constant", warmup_steps=0, micro_batch_size=32)
    cfg["algorithm"].update(objective={"sync_every": 2}, reference={"reset_every": 2})
    cfg["logging"]["samples_per_step"] = 24  # all of them
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    margins = [rows[step]["preference/reward_margin"] for step in (1, 2, 3, 4)]
    assert abs(margins[0]) < 1e-6 and abs(margins[2]) < 1e-6  # float rounding of the passes
    assert abs(margins[1]) > 1e-4 and abs(margins[3]) > 1e-4
    samples = [json.loads(x) for x in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    for step in (1, 3):
        groups: dict[str, list[float]] = {}
        for row in samples:
            if row["step"] == step:
                groups.setdefault(row["prompt"], []).append(row["reward"])
        pairs = sum(r.count(1.0) * r.count(0.0) for r in groups.values())
        assert rows[step]["preference/pairs"] == pairs
    bad = objective_config(tmp_path / "bad", "online_dpo", steps=1, objective={"margin": 2.0})
    with pytest.raises(ConfigError, match="select the pairs of pairing: margin"):
        build_config(bad)
    alone = objective_config(tmp_path / "bad", "dno", steps=1, objective={"student_margin": 1.0})
    with pytest.raises(ConfigError, match="student_margin .* needs expert.traces > 0"):
        build_config(alone)


def test_dno_pairs_each_groups_gold_response_with_the_samples_it_beats(tmp_path):
    """DNO-Prct's groups hold the policy's samples and a gold response (expert.traces: the
    problem's worked solution, scored by the same reward); the margin pairing pairs it with
    every sample it beats by the margin, and DPO trains on those pairs (log 2 at step 1)."""
    cfg = objective_config(tmp_path / "run", "dno", steps=1, expert={"traces": 1})
    del cfg["reward"]  # the arithmetic task's answer check: the worked solution is right
    cfg["train"]["micro_batch_size"] = 64
    with built(cfg) as parts:
        data, _ = parts.collector.collect(1)
        metrics, bad = parts.learners.update(data)
    assert bad is None
    gold = data.expert
    assert int(gold.sum()) == len(data.problems) and (data.rewards[gold] == 1.0).all()
    chosen, rejected, _ = preference_pairs(data.rewards, data.group_ids, "margin", 1.0)
    assert metrics["preference/pairs"] == len(chosen) >= len(data.problems)
    assert gold[chosen].any() and not gold[rejected].any()
    assert metrics["policy/loss"] == pytest.approx(math.log(2))


def test_rejection_sampling_keeps_exactly_the_verified_samples():
    assert algorithms.verified(_t([1.0, 0.5, 0.0, 1.2])).tolist() == [1, 0, 0, 1]
    assert algorithms.verified(_t([1.0, 0.5, 0.0]), threshold=0.5).tolist() == [1, 1, 0]
    logp = _t([[-1.0, -2.0], [-0.5, -0.25]])
    torch.testing.assert_close(algorithms.nll_loss(logp, _t([1.0, 0.0])), _t([[1.0, 2.0], [0, 0]]))


def test_distillation_advantage_is_the_per_token_reverse_kl():
    student = _t([[-1.0, -2.0, -0.5], [-0.1, -3.0, 0.0]])
    teacher = _t([[-1.5, -1.0, -0.5], [-0.3, -2.0, -9.0]])
    mask = _t([[1, 1, 1], [1, 1, 0]])
    advantages = algorithms.reverse_kl_advantages(student, teacher, mask)
    # -(log pi_s - log pi_T) on each trained token, 0 on padding
    torch.testing.assert_close(advantages, _t([[-0.5, 1.0, 0.0], [-0.2, 1.0, 0.0]]))
    torch.testing.assert_close(
        algorithms.reverse_kl_advantages(student, teacher, mask, coef=2.0), 2 * advantages
    )
    assert torch.count_nonzero(algorithms.reverse_kl_advantages(student, student, mask)) == 0
    inputs = algorithms.AdvantageInputs(
        rewards=_t([1.0, 0.0]),
        group_ids=torch.tensor([0, 0]),
        mask=mask,
        student_logp=student,
        teacher_logp=teacher,
    )
    mixed = algorithms.compute_advantages("reverse_kl", inputs, task_weight=0.5)
    grpo = algorithms.grpo(_t([1.0, 0.0]), torch.tensor([0, 0]))  # +-0.7071
    torch.testing.assert_close(mixed.advantages, advantages + 0.5 * grpo[:, None] * mask)


# ---------------------------------------------------------------- demonstrations as tokens


def test_sft_masks_exactly_the_assistant_tokens_of_a_chat():
    """A multi-turn chat with a tool result: the ids are the chat template's own, and the loss
    mask covers exactly each assistant message's content and its end-of-turn token."""
    tokenizer = load_tokenizer("tiny-random-llama")
    stops = stop_token_ids(tokenizer)
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"}]
    turns = [
        {"role": "assistant", "content": "<tool_call>add(2, 3)</tool_call>"},
        {"role": "tool", "content": "5"},
        {"role": "assistant", "content": "Answer: 5"},
    ]
    prompt_ids, ids, mask = encode_demonstration(tokenizer, prompt, turns, stops)
    template = tokenizer.apply_chat_template(prompt + turns, tokenize=True, return_dict=True)
    assert prompt_ids + ids == list(template["input_ids"])  # token-exact: the template's ids
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    expected = []
    for turn in turns:
        if turn["role"] == "assistant":
            expected += tokenizer(turn["content"], add_special_tokens=False)["input_ids"] + [end]
    assert [t for t, m in zip(ids, mask, strict=True) if m] == expected
    assert len(mask) == len(ids) and sum(mask) == len(expected)


def test_openai_tool_calls_become_hermes_calls_for_a_template_without_them():
    """SFT data in OpenAI's format (``tool_calls`` with JSON-text arguments): a template that
    does not render tool calls (ChatML here) gets them as the Hermes blocks rlvr's agent loop
    parses, trained on as assistant tokens."""
    from rlvr.envs.parsers import parse_hermes

    tokenizer = load_tokenizer("tiny-random-llama")
    call = {"type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
    turns = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "5"},
        {"role": "assistant", "content": "Answer: 5"},
    ]
    prompt = [{"role": "user", "content": "2+3?"}]
    _, ids, mask = encode_demonstration(tokenizer, prompt, turns, stop_token_ids(tokenizer))
    first = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m][: mask.index(0)])
    parsed = parse_hermes(first)
    assert [(c.name, c.arguments) for c in parsed.calls] == [("add", {"a": 2, "b": 3})]


def test_sft_rows_of_a_file_train_on_their_demonstrations(tmp_path):
    """The three ways a file gives demonstrations: a completion column (text or messages), and
    a messages column ending with assistant turns (the chat before them is the prompt)."""
    from rlvr.data import make_task

    rows = [
        {"prompt": "What is 1 + 1?", "answer": "2", "completion": "1 + 1 = 2\nAnswer: 2"},
        {
            "prompt": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "What is 2 + 2?"},
                {"role": "assistant", "content": "Answer: 4"},
            ],
            "answer": "4",
        },
    ]
    path = tmp_path / "chats.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    task = make_task("file", path=str(path), eval_fraction=0.0, prompt_template="{question}")
    problems = {p.id: p for p in (task.train_problem(i) for i in range(2))}
    chat_row, text_row = problems["file-train-1"], problems["file-train-0"]
    assert chat_row.chat == (("user", "Hi"),)  # the chat before its first assistant message
    roles = [t["role"] for t in chat_row.demonstrations[0].turns()]
    assert roles == ["assistant", "user", "assistant"]  # every assistant turn is trained on
    assert text_row.demonstrations == ()  # no completion column named
    path.write_text(json.dumps(rows[0]))
    given = make_task(
        "file", path=str(path), eval_fraction=0.0, completion_column="completion"
    ).train_problem(0)
    assert given.demonstrations[0].turns() == [
        {"role": "assistant", "content": "1 + 1 = 2\nAnswer: 2"}
    ]


# ---------------------------------------------------------------- on the tiny model


def preference_file(path: Path, n: int = 24) -> Path:
    rows = []
    for i in range(n):
        a, b = i % 6, i // 6
        rows.append(
            {
                "prompt": f"What is {a} + {b}?",
                "answer": str(a + b),
                "completion": f"{a} + {b} = {a + b}\nAnswer: {a + b}",
                "chosen": f"Answer: {a + b}",
                "rejected": f"I do not know {a}",
            }
        )
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def objective_config(run_dir: Path, preset: str, steps: int = 4, **algorithm) -> dict:
    """A tiny run of ``preset``: the data file's demonstrations or pairs for SFT and offline
    DPO / IPO, the arithmetic task's worked solutions for the SFT term, sampled groups
    otherwise."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    data = preference_file(run_dir.parent / "prefs.jsonl")
    cfg = tiny_config(run_dir, steps=steps, algorithm={"preset": preset, **algorithm})
    del cfg["algorithm"]["kl"]
    cfg["rollout"]["dtype"] = "fp32"
    if preset in ("sft", "dpo", "dpo_norm", "exo", "ipo", "rpo", "tpo", "tgdpo"):
        task = {"name": "file", "path": str(data), "n_eval": 4, "prompt_template": "{question}"}
        if preset == "sft":
            task["completion_column"] = "completion"
        else:
            task.update(chosen_column="chosen", rejected_column="rejected")
        cfg["task"] = task
    if preset == "on_policy_distillation":
        cfg["model"]["teacher"] = "tiny-random-llama"
    if preset in ("disco", "drpo"):  # correct (1) or wrong (0): a one-token letter or not
        cfg["reward"] = {"function": "rewards_for_tests:is_letter"}
        cfg["rollout"]["max_new_tokens"] = 1
    return cfg


def test_inpo_anchors_at_the_log_probs_the_sampler_drew_the_pairs_with(tmp_path):
    """INPO's pi_t is the snapshot that sampled the pairs: the engine's log-probs, not a learner
    pass. At step 1 the policy, the reference and the sampler agree, so the anchored margin
    h - h_ref / 3 - 2 h_t / 3 is ~0; with the sampler's log-probs zeroed it is 2 h / 3."""
    cfg = objective_config(tmp_path / "run", "inpo", steps=1, objective={"eta": 0.25})
    cfg["train"]["micro_batch_size"] = 16
    with built(cfg) as parts:
        learner = parts.learners
        data, _ = parts.collector.collect(1)
        step = learner.prepare(data)
        with torch.no_grad():
            logp, _ = completion_logprobs(learner.policy, step.batch, learner.forward.temperature)
        seq = (logp * step.batch.action_mask).sum(-1)
        h = seq[step.pairs[:, 0]] - seq[step.pairs[:, 1]]
        assert len(h) > 0 and h.abs().max() > 1e-3
        zeroed = data.with_columns(sampler_logprobs=[[0.0] * len(x) for x in data.sampler_logprobs])
        metrics, bad = learner.update(zeroed)
        assert bad is None
        assert metrics["preference/anchored_margin"] == pytest.approx(
            (2 / 3 * h).mean().item(), abs=1e-4
        )
        expected = ((2 / 3 * h - 2.0) ** 2).mean().item()
        assert metrics["policy/loss"] == pytest.approx(expected, rel=1e-4)
    with built(cfg) as parts:
        data, _ = parts.collector.collect(1)
        metrics, bad = parts.learners.update(data)
        assert bad is None and metrics["preference/anchored_margin"] == pytest.approx(0, abs=1e-4)


def test_rft_trains_on_the_verified_samples_only(tmp_path):
    cfg = objective_config(tmp_path / "run", "rft", params={"advantage": {"threshold": 0.25}})
    with built(cfg) as parts:
        data, _ = parts.collector.collect(1)
        step = parts.learners.prepare(data)
        kept = data.rewards >= 0.25
        assert 0 < int(kept.sum()) < len(data)  # some verified, some not
        assert torch.equal(step.train_mask.sum(-1) > 0, kept)
        metrics, bad = parts.learners.update(data)
        assert bad is None and metrics["policy/trained_samples_frac"] == kept.float().mean().item()


def test_packing_does_not_change_the_loss_or_its_gradient():
    model = load_model("tiny-random-llama")
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 200, (n,), generator=g).tolist() for n in (5, 9, 3)]
    completions = [torch.randint(3, 200, (n,), generator=g).tolist() for n in (4, 7, 2, 6)]
    batch = make_batch(prompts, completions, 0, [0, 1, 2, 1])
    grads = []
    for packed in (False, True):
        model.zero_grad()
        logp, _ = completion_logprobs(model, batch, packed=packed)
        (-logp.sum()).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        if not packed:
            unpacked = logp.detach()
    torch.testing.assert_close(logp.detach(), unpacked, rtol=0, atol=1e-6)
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_sft_learning_with_equal_rewards_is_not_called_a_stall(tmp_path, capsys):
    """Every SFT group has equal rewards, yet its NLL falls: the "nothing is learning" warning
    is for updates made of reward differences only."""
    run_dir = tmp_path / "run"
    cfg = objective_config(run_dir, "sft", steps=3)
    cfg["logging"]["progress"] = True
    train(build_config(cfg))
    rows = step_rows(run_dir)
    assert all(rows[s]["groups/zero_variance_frac"] == 1.0 for s in (1, 2, 3))
    assert rows[3]["sft/nll"] < rows[1]["sft/nll"]
    assert "nothing is learning" not in capsys.readouterr().out
    learns = {
        name: algorithms.learns_from_reward_differences(algorithms.get_preset(name))
        for name in ("grpo", "rloo", "online_dpo", "rebel", "sft", "rft", "dpo", "ppo", "remax")
        + ("on_policy_distillation",)
    }
    assert [name for name, yes in learns.items() if yes] == ["grpo", "rloo", "online_dpo", "rebel"]


def test_sft_with_and_without_packing_trains_alike(tmp_path):
    rows = []
    for packing in (True, False):
        run_dir = tmp_path / f"packing-{packing}"
        cfg = objective_config(run_dir, "sft", steps=2)
        cfg["train"]["packing"] = packing
        train(build_config(cfg))
        rows.append(step_rows(run_dir))
    for step in (1, 2):
        for key in ("policy/loss", "sft/nll", "policy/grad_norm"):
            assert rows[0][step][key] == pytest.approx(rows[1][step][key], rel=1e-5), key
    assert rows[0][2]["sft/nll"] < rows[0][1]["sft/nll"]  # it learns the demonstrations


def test_offline_dpo_raises_the_chosen_minus_rejected_margin(tmp_path):
    run_dir = tmp_path / "run"
    cfg = objective_config(run_dir, "dpo", steps=8)
    cfg["train"].update(lr=1e-2, lr_schedule="constant", warmup_steps=0)
    cfg["checkpoint"] = {"every": 0, "save_final": True}
    train(build_config(cfg))
    rows = step_rows(run_dir)
    assert rows[1]["preference/reward_margin"] == 0.0  # the policy starts as the reference
    assert rows[8]["preference/reward_margin"] > 0.1 and rows[8]["preference/accuracy"] == 1.0
    # on every pair of the file, the trained policy's log-ratio margin over the reference grew
    tokenizer = load_tokenizer("tiny-random-llama")
    stops = stop_token_ids(tokenizer)
    lines = [json.loads(x) for x in (run_dir.parent / "prefs.jsonl").read_text().splitlines()]
    margins = []
    for model in (
        load_model("tiny-random-llama"),
        load_model(str(run_dir / "checkpoints/step_000008")),
    ):
        total = []
        for row in lines:
            seqs = []
            for key in ("chosen", "rejected"):
                turns = [{"role": "assistant", "content": row[key]}]
                chat = [{"role": "user", "content": row["prompt"]}]
                prompt, ids, mask = encode_demonstration(tokenizer, chat, turns, stops)
                batch = make_batch([prompt], [ids], 0, action_masks=[mask])
                with torch.no_grad():
                    logp, _ = completion_logprobs(model, batch)
                seqs.append(float((logp * batch.action_mask).sum()))
            total.append(seqs[0] - seqs[1])
        margins.append(total)
    assert sum(b > a for a, b in zip(*margins, strict=True)) == len(lines)


def test_rpo_adds_the_chosen_completions_nll_per_token_to_dpo(tmp_path):
    """RPO (Pang et al. 2024): DPO + alpha * NLL(chosen) / |chosen|. At step 1 the policy is
    its reference, so DPO's loss is log 2 on every pair and the logged loss is log 2 plus
    alpha times the chosen NLL; training lowers that NLL, which plain DPO need not."""
    rows = {}
    for preset in ("rpo", "dpo"):
        run_dir = tmp_path / preset
        cfg = objective_config(run_dir, preset, steps=4)
        cfg["train"].update(lr=1e-2, lr_schedule="constant", warmup_steps=0)
        train(build_config(cfg))
        rows[preset] = step_rows(run_dir)
    rpo = rows["rpo"]
    assert rpo[1]["policy/loss"] == pytest.approx(math.log(2) + rpo[1]["preference/chosen_nll"])
    assert rpo[4]["preference/chosen_nll"] < rpo[1]["preference/chosen_nll"]
    assert "preference/chosen_nll" not in rows["dpo"][1]
    assert rows["dpo"][1]["policy/loss"] == pytest.approx(math.log(2))


def test_dpo_with_lora_takes_the_disabled_adapter_as_its_reference(tmp_path):
    cfg = objective_config(tmp_path / "run", "dpo", steps=2)
    cfg["model"]["lora"] = {"rank": 4, "alpha": 8}
    cfg["train"]["lr"] = 5e-2
    with built(cfg) as parts:
        learner = parts.learners
        assert learner.reference.copy is None and learner.reference.adapter == "base"  # no copy
        data, _ = parts.collector.collect(1)
        step = learner.prepare(data)
        assert torch.equal(
            step.ref_logp, step.old_logp if step.old_logp is not None else step.ref_logp
        )
        metrics, bad = learner.update(data)
        assert bad is None and metrics["policy/loss"] == pytest.approx(math.log(2), abs=1e-6)
        data, _ = parts.collector.collect(2)
        metrics, _ = learner.update(data)
        assert metrics["preference/reward_margin"] != 0.0  # the adapter moved off the base


def test_online_dpo_trains_on_the_pairs_of_its_groups(tmp_path):
    with built(objective_config(tmp_path / "run", "online_dpo")) as parts:
        data, _ = parts.collector.collect(1)
        step = parts.learners.prepare(data)
        chosen, rejected, skipped = preference_pairs(data.rewards, data.group_ids)
        assert step.pairs.tolist() == torch.stack([chosen, rejected], 1).tolist()
        metrics, bad = parts.learners.update(data)
        assert bad is None
        assert metrics["preference/pairs"] == len(chosen)
        assert metrics["preference/skipped_groups"] == skipped
        assert metrics["policy/loss"] == pytest.approx(math.log(2), abs=1e-6)  # h = 0 at first


def test_semi_online_dpo_samples_from_a_snapshot_refreshed_every_s_updates(tmp_path):
    run_dir = tmp_path / "run"
    cfg = objective_config(run_dir, "semi_online_dpo", steps=5, sync_every=2)
    cfg["train"].update(lr=5e-2, lr_schedule="constant", warmup_steps=0)
    train(build_config(cfg))
    rows = step_rows(run_dir)
    assert [rows[s]["rollout/synced"] for s in range(1, 6)] == [0.0, 1.0, 0.0, 1.0, 0.0]
    assert [rows[s]["staleness/max"] for s in range(1, 6)] == [0.0, 1.0, 0.0, 1.0, 0.0]
    assert all(rows[s]["rollout/publish_check_diff"] < 1e-5 for s in (2, 4))  # synced steps


def test_distillation_from_the_student_itself_gives_zero_advantages(tmp_path):
    run_dir = tmp_path / "run"
    train(build_config(objective_config(run_dir, "on_policy_distillation", steps=1)))
    row = step_rows(run_dir)[1]
    assert row["advantages/abs_mean"] < 1e-5  # teacher = student: reverse KL ~ 0 per token


def test_distillation_scores_the_samples_with_the_teacher(tmp_path):
    """The learner's teacher scores each sampled token as a direct forward of the teacher
    does, and the step's advantages are -(sampler - teacher) on each token."""
    sft_dir = tmp_path / "teacher"
    sft = objective_config(sft_dir, "sft", steps=2)
    sft["train"]["lr"] = 5e-2
    sft["checkpoint"] = {"every": 0, "save_final": True}
    train(build_config(sft))
    teacher_spec = str(sft_dir / "checkpoints/step_000002")
    cfg = objective_config(tmp_path / "run", "on_policy_distillation")
    cfg["model"]["teacher"] = teacher_spec
    with built(cfg) as parts:
        data, _ = parts.collector.collect(1)
        step = parts.learners.prepare(data)
        teacher = load_model(teacher_spec)
        for i in (0, len(data) - 1):
            prompt = data.prompt_ids[int(data.group_ids[i])]
            batch = make_batch([prompt], [data.completion_ids[i]], 0)
            with torch.no_grad():
                taught, _ = completion_logprobs(teacher, batch)
            t = len(data.completion_ids[i])
            want = -(torch.tensor(data.sampler_logprobs[i]) - taught[0])
            torch.testing.assert_close(step.advantages[i, :t].cpu(), want, rtol=0, atol=1e-5)
        assert step.advantages.abs().max() > 0.01


def test_distillation_needs_a_teacher_with_the_students_vocabulary(tmp_path):
    cfg = objective_config(tmp_path / "run", "on_policy_distillation")
    del cfg["model"]["teacher"]
    with pytest.raises(ConfigError, match="model.teacher"):
        train(build_config(cfg))


def test_sft_term_beside_rl_trains_on_the_worked_solutions(tmp_path):
    run_dir = tmp_path / "run"
    cfg = objective_config(run_dir, "grpo", steps=3, sft_coef=0.5)
    cfg["train"].update(lr=1e-2)
    train(build_config(cfg))
    rows = step_rows(run_dir)
    assert all(math.isfinite(rows[s]["sft/nll"]) for s in (1, 2, 3))
    assert rows[3]["sft/nll"] < rows[1]["sft/nll"]


def test_data_presets_need_the_datas_completions(tmp_path):
    cfg = objective_config(tmp_path / "run", "sft")
    del cfg["task"]["completion_column"]
    with pytest.raises(Exception, match="no completion to train on"):
        train(build_config(cfg))
    bad = tiny_config(tmp_path / "x", algorithm={"preset": "dpo", "dynamic_sampling": True})
    del bad["algorithm"]["kl"]
    with pytest.raises(ConfigError, match="samples: data"):
        build_config(bad)
    with pytest.raises(ConfigError, match="sft_coef"):
        build_config(tiny_config(tmp_path / "y", algorithm={"preset": "sft", "sft_coef": 1.0}))


RESUMED = (
    "sft",
    "dpo",
    "dpo_norm",
    "exo",
    "tpo",
    "rft",
    "online_dpo",
    "semi_online_dpo",
    "rebel",
    "copg",
    "inpo",
    "disco",
    "mpo",
    "dno",
    "on_policy_distillation",
)


@pytest.mark.parametrize("preset", [*RESUMED, "sft_coef"])
def test_resume_of_each_objective_is_exact(tmp_path, preset):
    """4 steps in one go against 2 steps, then a resume to 4: the same numbers (semi-online
    with s = 3: the checkpoint of step 2 holds the snapshot of version 0 the engine serves; DNO
    with iterations of 3: also the reference, reset at step 3)."""
    extra: dict = {"sync_every": 3} if preset == "semi_online_dpo" else {}
    if preset == "rft":
        extra = {"params": {"advantage": {"threshold": 0.3}}}
    name = "grpo" if preset == "sft_coef" else preset
    if preset == "sft_coef":
        extra = {"sft_coef": 0.5}
    if preset == "dno":  # letter_fraction's graded rewards; pi_t the sampler and reference of 3
        extra = {"objective": {"sync_every": 3, "margin": 0.1}, "reference": {"reset_every": 3}}

    def config(run_dir: Path, steps: int) -> dict:
        cfg = objective_config(run_dir, name, steps=steps, **extra)
        cfg["train"]["lr"] = 1e-2
        if PRESETS[name].minibatches > 1:  # LR steps per minibatch: the same whatever the length
            cfg["train"].update(lr_schedule="constant", warmup_steps=0)
        return cfg

    straight = tmp_path / "straight" / "run"
    train(build_config(config(straight, 4)))
    resumed = tmp_path / "resumed" / "run"
    train(build_config(config(resumed, 2)))
    train(build_config(config(resumed, 4)), resume=resumed)
    a, b = step_rows(straight), step_rows(resumed)
    assert sorted(b) == [1, 2, 3, 4]
    for step in (3, 4):
        for key in COMPARED:
            assert a[step][key] == b[step][key], (preset, step, key)
    # it trained (DNO's step 4 starts an iteration at pi = pi_ref: log 2 as at step 1)
    assert any(a[step]["policy/loss"] != a[1]["policy/loss"] for step in (3, 4))


def test_problems_carry_their_demonstrations():
    demo = Demonstration.of([{"role": "assistant", "content": "Answer: 2"}], reward=0.0)
    problem = Problem("p", "1 + 1?", "2", demonstrations=(demo,))
    assert hash(problem) == hash(Problem("p", "1 + 1?", "2", demonstrations=(demo,)))
    assert demo.text == "Answer: 2" and demo.reward == 0.0


def test_shards_of_the_datas_completions_merge_with_their_groups_offset():
    """Ray rollout workers play shards of a draw's problems; the data's completions (as many
    per problem as it gives) come back with group ids offset by the problems before them."""
    from rlvr.data import Problem
    from rlvr.rewards.combined import RewardBreakdown
    from rlvr.trainer.batch import Samples
    from rlvr.trainer.rollouts import merge_shards

    def shard(problems: int, groups: list[int], rewards: list[float]) -> Samples:
        n = len(groups)
        return Samples(
            problems=[Problem(f"p{i}", "q", "a") for i in range(problems)],
            prompt_ids=[[1]] * problems,
            columns={
                "completion_ids": [[2, 3]] * n,
                "sampler_logprobs": [[0.0, 0.0]] * n,
                "finished": [True] * n,
                "texts": ["x"] * n,
                "group_ids": torch.tensor(groups),
                "breakdown": RewardBreakdown.single("data", rewards),
                "action_mask": [[1, 1]] * n,
            },
            info={"seconds": 1.0, "tokens_per_s": 0.0, "reward_seconds": 0.0},
        )

    merged = merge_shards([shard(2, [0, 0, 1, 1], [1, 0, 1, 0]), shard(1, [0, 0], [1, 0])])
    assert merged.group_ids.tolist() == [0, 0, 1, 1, 2, 2]
    assert merged.breakdown.total == [1, 0, 1, 0, 1, 0] and len(merged.prompt_ids) == 3


def test_an_sft_run_with_groups_of_one_is_evaluated(tmp_path):
    """rlvr eval keeps the run's algorithm: an SFT run's rollout.group_size 1 is valid for it."""
    from rlvr.evaluation import evaluate

    cfg = objective_config(tmp_path / "run", "sft", steps=1)
    cfg["rollout"]["group_size"] = 1
    train(build_config(cfg))
    summary = evaluate(tmp_path / "run", n=1, out=tmp_path / "eval", progress=False)
    assert summary["n_prompts"] > 0 and summary["metrics"]["pass@1"] >= 0
