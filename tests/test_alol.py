"""A-LoL (Baheti et al. 2023, arXiv:2305.14718): the advantage over the reference's value and
the importance-weighted NLL, by hand; the preset on the data's completions, scored by the run's
reward, against the reference's greedy completions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from test_lora import built
from test_trainer import step_rows, tiny_config

from rlvr import algorithms
from rlvr.config import ConfigError, build_config
from rlvr.policy import completion_logprobs

E = math.exp(0.5)  # row 0's sequence ratio: log pi - log pi_ref = 0.5 + 0


def _rows(ref_first: float = -1.5):
    """Two rows: row 0 has 2 tokens, row 1 one (its second token is padding)."""
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.5]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[ref_first, -2.0], [-0.5, -3.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    return logp, ref, mask


def test_alol_advantage_is_the_reward_over_the_references_value_kept_when_positive():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.75])
    values = torch.tensor([0.0, 0.0, 1.0, 0.25])
    assert algorithms.alol_advantages(rewards, values).tolist() == [1.0, 0.0, 0.0, 0.5]
    assert algorithms.alol_advantages(torch.tensor([0.2]), torch.tensor([0.5])).tolist() == [0.0]
    with pytest.raises(ValueError, match="reference_values must be"):
        algorithms.alol_advantages(rewards, values[:2])


def test_alol_weighs_each_rows_nll_by_its_advantage_and_clipped_ratio_by_hand():
    """A = (2, 0.5). Row 0: pi / pi_ref = e^0.5 = 1.6487 inside [0.1, 1.9], so l = -2 x 1.6487
    x (-1, -2) and each token's gradient -3.2974; row 1: its one token's ratio is 1 (the
    padded token does not count), l = -0.5 log pi, gradient -0.5."""
    logp, ref, mask = _rows()
    adv = torch.tensor([2.0, 0.5], dtype=torch.float64)
    loss, info = algorithms.alol_policy_loss(logp, logp.detach(), adv, mask, ref)
    expected = [[2 * E * 1.0, 2 * E * 2.0], [0.25, 0.25]]
    torch.testing.assert_close(loss, torch.tensor(expected, dtype=torch.float64))
    torch.testing.assert_close(info["ratio"][:, 0], torch.tensor([E, 1.0], dtype=torch.float64))
    (loss * mask).sum().backward()
    torch.testing.assert_close(
        logp.grad, torch.tensor([[-2 * E, -2 * E], [-0.5, 0.0]], dtype=torch.float64)
    )
    # a ratio past 1 + eps is clipped: e^1 -> 1.9, and flagged
    logp, ref, mask = _rows(ref_first=-2.0)
    loss, info = algorithms.alol_policy_loss(logp, logp.detach(), adv, mask, ref)
    assert loss[0].tolist() == pytest.approx([2 * 1.9 * 1.0, 2 * 1.9 * 2.0])
    assert info["is_clipped_high"][0].all() and not info["is_clipped_high"][1].any()
    # A-LoL seq: each token's own ratio (e^0.5, 1); ref-free: 1
    logp, ref, mask = _rows()
    loss, _ = algorithms.alol_policy_loss(logp, logp.detach(), adv, mask, ref, ratio="token")
    assert loss[0].tolist() == pytest.approx([2 * E * 1.0, 2 * 1.0 * 2.0])
    loss, _ = algorithms.alol_policy_loss(logp, logp.detach(), adv, mask, ref, ratio="none")
    assert loss[0].tolist() == pytest.approx([2.0, 4.0])
    # A-LoL KL: + kl_beta (log pi - log pi_ref) per token, gradient + kl_beta
    loss, _ = algorithms.alol_policy_loss(
        logp, logp.detach(), adv, mask, ref, ratio="none", kl_beta=0.1
    )
    assert loss[0].tolist() == pytest.approx([2.0 + 0.1 * 0.5, 4.0])
    (loss * mask).sum().backward()
    assert logp.grad[0].tolist() == pytest.approx([-2.0 + 0.1, -2.0 + 0.1])
    # through the registry, with the preset's eps = 0.9
    via, _ = algorithms.policy_loss(
        "alol", logp, logp.detach(), adv, mask, 0.9, 0.9, ref_logp=ref, ratio="token"
    )
    torch.testing.assert_close(via[0], torch.tensor([2 * E, 4.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="needs ref_logp"):
        algorithms.policy_loss("alol", logp, logp.detach(), adv, mask)
    with pytest.raises(ValueError, match="ratio must be one of"):
        algorithms.alol_policy_loss(logp, logp, adv, mask, ref, ratio="geometric")
    with pytest.raises(ValueError, match="kl_beta must be >= 0"):
        algorithms.alol_policy_loss(logp, logp, adv, mask, ref, kl_beta=-1.0)


def _data_file(path: Path, n: int = 8) -> Path:
    """Sums with a right completion, "Answer: k" (even rows), or a wrong and shorter one, "k"
    (odd rows)."""
    rows = []
    for i in range(n):
        a, b = i % 4, i // 4 + 1
        said = f"{a + b + 1}" if i % 2 else f"Answer: {a + b}"
        rows.append({"prompt": f"What is {a} + {b}?", "answer": str(a + b), "completion": said})
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def alol_config(run_dir: Path, steps: int = 1, **algorithm) -> dict:
    data = _data_file(run_dir.parent / "alol.jsonl")
    cfg = tiny_config(run_dir, steps=steps, algorithm={"preset": "alol", **algorithm})
    del cfg["algorithm"]["kl"], cfg["reward"]  # the task's verifier scores the data's rows
    cfg["task"] = {"name": "file", "path": str(data), "n_eval": 2, "prompt_template": "{question}"}
    cfg["task"]["completion_column"] = "completion"
    cfg["rollout"].update(prompts_per_step=4, max_new_tokens=4)
    cfg["train"].update(micro_batch_size=4, lr=1e-2, warmup_steps=0, lr_schedule="constant")
    return cfg


def test_the_alol_preset_learns_the_data_rows_that_beat_the_references_greedy_reward(tmp_path):
    """The data's completions scored by the run's reward (1 / their tokens); V_ref is the
    reward of the initial policy's greedy completion of the prompt, and a row learns only where
    it beats it; at the first update pi = pi_ref, so the weight is 1 and the loss is
    -sum_i A_i log pi(y_i | x_i) / N."""
    cfg = alol_config(tmp_path / "run")
    cfg["reward"] = {"function": "rewards_for_tests:counts_tokens"}
    with built(cfg) as parts:
        learner, collector = parts.learners, parts.collector
        data, _ = collector.collect(1)
        lengths = [1 / len(ids) for ids in data.completion_ids]
        assert data.rewards.tolist() == pytest.approx(lengths)
        greedy = collector.rollouts.run_reference(data.problems, 1, collector.greedy, None)
        values = collector.rewards(greedy, record=False)[data.group_ids]
        torch.testing.assert_close(data.signals["reference_values"], values)
        advantages = (data.rewards - values).clamp(min=0)
        step = learner.prepare(data)
        with torch.no_grad():
            logp, _ = completion_logprobs(learner.policy, step.batch, learner.forward.temperature)
        seq = (logp * step.batch.action_mask).sum(-1)
        metrics, _ = learner.update(data)
        expected = -(advantages * seq).sum() / len(seq)
        assert values.min() > 0 and 0 < (advantages > 0).sum() < len(advantages)
        assert metrics["policy/loss"] == pytest.approx(expected.item(), rel=1e-5)


def test_alol_trains_from_yaml_and_refuses_a_ratio_to_a_sampler_on_the_data(tmp_path):
    """Two steps of A-LoL seq from the preset; PPO's clip on the data's rows, which no policy
    sampled, is refused with the offline losses named."""
    from rlvr.trainer import train
    from rlvr.trainer.build import resolve_algorithm

    cfg = alol_config(tmp_path / "run", steps=2, policy_loss={"ratio": "token"})
    train(build_config(cfg))
    losses = [row["policy/loss"] for row in step_rows(tmp_path / "run").values()]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert algorithms.needs_reference(resolve_algorithm(build_config(cfg)))
    cfg = alol_config(tmp_path / "bad", policy_loss={"name": "token"})
    with pytest.raises((ConfigError, ValueError), match="offline policy loss \\(alol\\)"):
        build_config(cfg)


def test_a_data_completion_cut_at_the_budget_is_scored_as_trained(tmp_path):
    """A completion longer than rollout.max_new_tokens is trained on its first tokens; the
    reward reads that cut text (its tokens decoded), not the whole completion: the verifier
    gives the cut right answers no reward."""
    cfg = alol_config(tmp_path / "run")
    cfg["rollout"]["max_new_tokens"] = 2
    with built(cfg) as parts:
        data, _ = parts.collector.collect(1)
        tokenizer = parts.collector.tokenizer
    assert not any(data.finished)
    for ids, text in zip(data.completion_ids, data.texts, strict=True):
        assert len(ids) == 2 and text == tokenizer.decode(ids, skip_special_tokens=True)
    assert data.rewards.tolist() == [0.0] * len(data)
