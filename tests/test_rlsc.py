"""RLSC (arXiv:2506.06395): the self-confidence advantage p_old(y|x) + alpha by hand, the loss
-(p_old + alpha) log pi summed over each completion on a collected step, the preset from YAML."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from test_lora import built
from test_trainer import step_rows, tiny_config

from rlvr import algorithms
from rlvr.config import load_config
from rlvr.policy import completion_logprobs
from rlvr.trainer import train
from rlvr.trainer.learner.kinds import Averages


def test_the_advantage_is_the_completions_probability_plus_alpha_by_hand():
    logp = torch.tensor([[math.log(0.5), math.log(0.5), 0.0], [math.log(0.9), 0.0, -7.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])  # padding's value ignored
    got = algorithms.rlsc_advantages(logp, mask, alpha=0.1)
    torch.testing.assert_close(got, torch.tensor([0.25 + 0.1, 0.9 + 0.1]))
    assert algorithms.rlsc_advantages(logp, mask, alpha=0.0).tolist() == pytest.approx([0.25, 0.9])
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        algorithms.rlsc_advantages(logp, mask, alpha=-0.1)


def test_rlsc_trains_each_completion_by_its_own_probability_and_from_yaml(tmp_path):
    cfg = tiny_config(tmp_path / "run", steps=2, algorithm={"preset": "rlsc"})
    del cfg["algorithm"]["kl"]
    with built(cfg) as parts:
        data, _ = parts.collector.collect(1)
        learner = parts.learners
        step = learner.prepare(data)
        mask = step.batch.action_mask.float()
        sampler = torch.zeros_like(mask)
        for i, row in enumerate(data.sampler_logprobs):
            sampler[i, : len(row)] = torch.tensor(row)
        advantages = (sampler * mask).sum(-1).double().exp().float() + 0.1
        torch.testing.assert_close(step.advantages.float(), advantages)
        # the loss: -(1/N) sum_i A_i sum_t log pi(y_it), its gradient by hand
        rows = torch.arange(len(data))
        loss = learner.kind.loss(
            learner, step, rows, (mask.sum().item(), len(data)), Averages(), True
        )
        params = [p for p in learner.policy.parameters() if p.requires_grad]
        got = torch.autograd.grad(loss, params)
        logp, _ = completion_logprobs(learner.policy, step.batch, shared_prefix=True)
        by_hand = -((advantages[:, None] * mask * logp).sum(-1)).mean()
        torch.testing.assert_close(loss, by_hand, rtol=1e-5, atol=1e-6)
        want = torch.autograd.grad(by_hand, params)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    path = tmp_path / "rlsc.yaml"
    cfg["logging"]["run_dir"] = str(tmp_path / "yaml")
    path.write_text(yaml.safe_dump(cfg))
    train(load_config(path))
    rows = step_rows(tmp_path / "yaml")
    assert all(math.isfinite(rows[s]["policy/loss"]) for s in (1, 2))
