"""Expert traces inside the groups (LUFFY, Yan et al. 2025, arXiv:2504.14945): the shaping on
hand-computed values, mixed groups as played, the learner's loss against one computed by hand
from the policy's log-probs, a run from YAML, exact resume, and the config's refusals."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from test_lora import built
from test_trainer import COMPARED, step_rows, tiny_config

from rlvr import algorithms
from rlvr.config import ConfigError, build_config, load_config
from rlvr.policy import completion_logprobs, make_batch
from rlvr.trainer import train


def test_policy_shaping_and_its_gradient_on_hand_computed_values():
    """f(p) = p / (p + 0.1): f(0.5) = 5/6, f(0.1) = 1/2; d f / d log p = gamma p / (p + gamma)^2:
    0.05 / 0.36 and 0.01 / 0.04. The plain ratio's gradient is p itself."""
    logp = torch.log(torch.tensor([[0.5, 0.1]])).requires_grad_()
    loss = algorithms.expert_loss("luffy", logp, torch.tensor([2.0]), gamma=0.1)
    assert torch.allclose(loss, torch.tensor([[-2 * 5 / 6, -2 * 0.5]]))
    loss.sum().backward()
    assert torch.allclose(logp.grad, -2 * torch.tensor([[0.05 / 0.36, 0.01 / 0.04]]))
    logp.grad = None
    algorithms.expert_loss("ratio", logp, torch.tensor([[1.0, -1.0]])).sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[-0.5, 0.1]]))
    with pytest.raises(ValueError, match="gamma must be > 0"):
        algorithms.policy_shaping(logp, gamma=0.0)


def luffy_config(run_dir, steps: int = 2, **algorithm) -> dict:
    cfg = tiny_config(run_dir, steps=steps, algorithm={"preset": "luffy", **algorithm})
    del cfg["algorithm"]["kl"]
    cfg["rollout"]["dtype"] = "fp32"
    cfg["train"]["micro_batch_size"] = 64  # one micro-batch: the logged loss is the whole loss
    return cfg


def test_a_mixed_group_holds_the_samples_then_the_worked_solution(tmp_path):
    cfg = luffy_config(tmp_path / "run")
    n, traces = cfg["rollout"]["group_size"], 1
    with built(cfg) as parts:
        data, _ = parts.collector.collect(1)
    P = len(data.problems)
    assert len(data) == P * (n + traces)
    assert data.group_ids.tolist() == [g for g in range(P) for _ in range(n + traces)]
    expert = data.expert.tolist()
    assert expert == ([False] * n + [True] * traces) * P
    for g, problem in enumerate(data.problems):
        row = g * (n + 1) + n
        text, solution = data.texts[row], problem.demonstrations[0].text
        assert text and solution.startswith(text)  # cut at the budget: then not finished
        assert data.finished[row] == (len(data.completion_ids[row]) < 12)
        assert data.sampler_logprobs[row] == [0.0] * len(data.completion_ids[row])
        assert sum(data.action_mask[row]) > 0
    # the sampler heard only the policy's samples; the metrics describe them and the traces apart
    assert len(data.sampled()) == P * n and not data.sampled().expert.any()


def test_the_loss_is_luffys_mixed_objective_computed_by_hand(tmp_path):
    """Step 1 (pi_old = pi_theta, ratio 1): token mean over every token of -A_i on the samples
    and -A_j p / (p + 0.1) on the traces, A the GRPO advantage over the whole mixed group."""
    cfg = luffy_config(tmp_path / "run")
    with built(cfg) as parts:
        data, _ = parts.collector.collect(1)
        policy = parts.learners.policy
        batch = make_batch(
            data.prompt_ids,
            data.completion_ids,
            parts.learners.pad_token_id,
            data.group_ids.tolist(),
            action_masks=data.action_mask,
        )
        with torch.no_grad():
            logp = completion_logprobs(policy, batch)[0]
        adv = algorithms.grpo(data.rewards, data.group_ids)
        assert bool((adv[data.expert] != 0).any())
        mask = batch.action_mask.float()
        p = logp.exp()
        per_token = torch.where(
            data.expert[:, None], -adv[:, None] * p / (p + 0.1), -adv[:, None].expand_as(p)
        )
        expected = (per_token * mask).sum() / mask.sum()
        on_trace = mask * data.expert[:, None]
        metrics, bad = parts.learners.update(data)
    assert bad is None
    assert metrics["policy/loss"] == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)
    prob = (p * on_trace).sum() / on_trace.sum()
    assert metrics["expert/token_prob"] == pytest.approx(prob.item(), rel=1e-4)


def test_a_luffy_run_from_yaml_logs_the_traces_and_resumes_exactly(tmp_path):
    straight = tmp_path / "straight" / "run"
    path = tmp_path / "luffy.yaml"
    path.write_text(yaml.safe_dump(luffy_config(straight, steps=3)))
    train(load_config(path))
    rows = step_rows(straight)
    assert all(rows[s]["expert/traces"] == 2.0 for s in (1, 2, 3))  # one per prompt
    assert all(math.isfinite(rows[s]["expert/token_prob"]) for s in (1, 2, 3))
    assert all(0 <= rows[s]["reward/mean"] <= 1 for s in (1, 2, 3))
    resumed = tmp_path / "resumed" / "run"
    train(build_config(luffy_config(resumed, steps=2)))
    train(build_config(luffy_config(resumed, steps=3)), resume=resumed)
    again = step_rows(resumed)
    for key in (*COMPARED, "expert/token_prob", "expert/reward_mean"):
        assert again[3][key] == rows[3][key], key


def test_expert_traces_are_refused_where_they_have_no_meaning(tmp_path):
    with pytest.raises(ConfigError, match="group-relative"):
        build_config(luffy_config(tmp_path / "a", advantage={"name": "reinforce"}))
    with pytest.raises(ConfigError, match="policy-gradient or pair objective"):
        build_config(
            tiny_config(tmp_path / "b", algorithm={"preset": "rft", "expert": {"traces": 1}})
        )
    with pytest.raises(ConfigError, match="a worked solution was sampled by no policy"):
        build_config(
            tiny_config(tmp_path / "i", algorithm={"preset": "inpo", "expert": {"traces": 1}})
        )
    with pytest.raises(ConfigError, match=r"hints count a group.s samples.*group_size \+ traces"):
        build_config(luffy_config(tmp_path / "c", stages=[{"name": "hints", "fractions": [0.5]}]))
    with pytest.raises(ConfigError, match="unknown expert-trace shaping"):
        build_config(luffy_config(tmp_path / "d", expert={"shaping": "nope"}))
    with pytest.raises(ConfigError, match="expert.traces must be|greater than or equal"):
        build_config(luffy_config(tmp_path / "e", expert={"traces": -1}))
