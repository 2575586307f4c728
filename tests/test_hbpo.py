"""HBPO (Lyu et al. 2025, arXiv:2507.15844; the authors' code): the budget-aware reward and the
hierarchical advantage by hand, the budget subgroups as played, the preset from YAML, the
refusals."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from test_lora import built
from test_trainer import step_rows, tiny_config

from rlvr import algorithms
from rlvr.config import ConfigError, build_config, load_config
from rlvr.data import Problem
from rlvr.rewards.length import hbpo_budget
from rlvr.trainer import train


def _f2(b: float) -> float:
    return 4 * math.cos(math.pi * b / 8192)


def test_the_budget_reward_by_hand():
    """beta 4, L 4096, alpha 1/4096. Within the budget: n 100, b 512: min(4 cos(pi 100 / 8192)
    - 412 / 4096, f2(512)) = 3.896473; above it: n 1000, b 512: 4 cos(pi 1000 / 8192) -
    488 / 4096 = 3.590309; f2 of the four budgets 3.923, 3.696, 2.828, 2.222; wrong or past
    L: 0."""
    within = 4 * math.cos(math.pi * 100 / 8192) - 412 / 4096
    assert algorithms.budget_reward(100, 512, True) == pytest.approx(within)
    assert within == pytest.approx(3.896473, abs=1e-6) and within < _f2(512)
    above = algorithms.budget_reward(1000, 512, True)
    assert above == pytest.approx(4 * math.cos(math.pi * 1000 / 8192) - 488 / 4096)
    assert above == pytest.approx(3.590309, abs=1e-6)
    ceilings = [algorithms.budget_ceiling(b) for b in algorithms.HBPO_BUDGETS]
    assert ceilings == pytest.approx([3.923141, 3.695518, 2.828427, 2.222281], abs=1e-6)
    assert algorithms.budget_reward(500, 512, True) == pytest.approx(_f2(512))  # min: f2
    assert (
        algorithms.budget_reward(100, 512, False) == algorithms.budget_reward(4097, 512, True) == 0
    )
    with pytest.raises(ValueError, match="max_len > 0"):
        algorithms.budget_reward(1, 512, True, max_len=0)


def test_the_hierarchical_advantage_by_hand():
    """One group, budgets (512, 512, 1024, 1024), rewards (3.9, 0, 3.6, 3.6): inter (r - 2.775)
    / 1.855398 (unbiased std), intra 1.95 - f2(512) and 3.6 - f2(1024), added once."""
    rewards = torch.tensor([3.9, 0.0, 3.6, 3.6], dtype=torch.float64)
    budgets = torch.tensor([512.0, 512.0, 1024.0, 1024.0])
    adv = algorithms.hbpo_advantages(rewards, torch.zeros(4, dtype=torch.long), budgets)
    std = math.sqrt((1.125**2 + 2.775**2 + 2 * 0.825**2) / 3)
    assert std == pytest.approx(1.855398, abs=1e-6)
    intra = [1.95 - _f2(512)] * 2 + [3.6 - _f2(1024)] * 2
    expected = [
        (r - 2.775) / (std + 1e-6) + i for r, i in zip(rewards.tolist(), intra, strict=True)
    ]
    assert adv.tolist() == pytest.approx(expected, abs=1e-9)
    two = algorithms.hbpo_advantages(
        torch.cat([rewards, rewards]), torch.tensor([0] * 4 + [1] * 4), torch.cat([budgets] * 2)
    )
    assert two.tolist() == pytest.approx(expected * 2, abs=1e-9)  # each group on its own
    with pytest.raises(ValueError, match="budgets must be"):
        algorithms.hbpo_advantages(rewards, torch.zeros(4, dtype=torch.long), budgets[:2])


def test_the_reward_reads_the_budget_its_reply_states():
    problem = Problem(id="p", prompt="What is 2 + 3?", answer="5")
    reply = "<think> I will answer the question with 512 tokens. 2 + 3 = 5. \\boxed{5}"
    value = hbpo_budget(reply, problem, num_tokens=100)
    assert value == pytest.approx(algorithms.budget_reward(100, 512, True))
    assert hbpo_budget(reply.replace("{5}", "{6}"), problem, num_tokens=100) == 0.0
    assert hbpo_budget("2 + 3 = 5. \\boxed{5}", problem, num_tokens=100) == 0.0  # no budget
    # the statement is not graded as the answer: a reply stating budget 5 but answering nothing
    assert hbpo_budget("<think> I will answer the question with 5 tokens", problem, 10) == 0.0
    custom = "Budget: {budget} tokens."
    mine = hbpo_budget("Budget: 64 tokens. \\boxed{5}", problem, 10, template=custom)
    assert mine == pytest.approx(algorithms.budget_reward(10, 64, True))


def hbpo_config(run_dir, steps: int = 1) -> dict:
    cfg = tiny_config(run_dir, steps=steps, algorithm={"preset": "hbpo"})
    del cfg["algorithm"]["kl"]
    cfg["algorithm"]["stages"] = [{"name": "budgets", "budgets": [6, 12]}]
    cfg["algorithm"]["advantage"] = {"max_len": 64}  # f2(b) as the reward's
    # every reply counts as right (threshold 0), so its reward follows its length and budget
    term = {"name": "hbpo_budget", "params": {"threshold": 0.0, "max_len": 64}}
    cfg["reward"] = {"terms": [term]}
    return cfg


def test_each_group_is_its_budgets_subgroups_each_reply_stating_its_budget(tmp_path):
    cfg = hbpo_config(tmp_path / "run")
    n = cfg["rollout"]["group_size"]
    with built(cfg) as parts:
        collector = parts.collector
        data, _ = collector.collect(1)
        tokenizer = collector.tokenizer
        step = parts.learners.prepare(data)
    P = len(data.problems)
    assert len(data) == P * n and data.group_ids.tolist() == [g for g in range(P) for _ in range(n)]
    budgets = [6.0, 6.0, 12.0, 12.0] * P
    assert data.signals["budgets"].tolist() == budgets
    for i, text in enumerate(data.texts):
        stated = f"<think> I will answer the question with {int(budgets[i])} tokens"
        assert text.startswith(stated)
        given = len(tokenizer(stated, add_special_tokens=False).input_ids)
        assert data.given_tokens[i] == given < len(data.completion_ids[i])
        expected = algorithms.budget_reward(
            len(data.completion_ids[i]), budgets[i], True, max_len=64
        )
        assert float(data.rewards[i]) == pytest.approx(expected, abs=1e-6)
    adv = algorithms.hbpo_advantages(
        data.rewards, data.group_ids, torch.tensor(budgets), max_len=64
    )
    torch.testing.assert_close(step.advantages.float(), adv.float())


def test_the_hbpo_preset_trains_from_yaml(tmp_path):
    path = tmp_path / "hbpo.yaml"
    path.write_text(yaml.safe_dump(hbpo_config(tmp_path / "run", steps=2)))
    train(load_config(path))
    rows = step_rows(tmp_path / "run")
    assert all(math.isfinite(rows[s]["policy/loss"]) for s in (1, 2))
    assert rows[1]["advantages/abs_mean"] > 0  # the subgroups differ in length and budget


def test_hbpo_is_refused_where_it_has_no_meaning(tmp_path):
    cfg = hbpo_config(tmp_path / "a")
    cfg["algorithm"]["stages"] = []
    with pytest.raises(ConfigError, match="hbpo reads each sample's budget subgroup"):
        build_config(cfg)
    cfg = hbpo_config(tmp_path / "b")
    cfg["rollout"]["group_size"] = 3
    with pytest.raises(ConfigError, match="group_size 3 into 2 equal subgroups"):
        build_config(cfg)
    cfg = hbpo_config(tmp_path / "c")
    cfg["algorithm"]["stages"].insert(0, {"name": "guidance"})
    with pytest.raises(ConfigError, match="algorithm.stages guidance: adds samples"):
        build_config(cfg)
    cfg = hbpo_config(tmp_path / "d")
    cfg["algorithm"]["stages"].append({"name": "error_correction"})
    with pytest.raises(ConfigError, match="error_correction would add replies outside"):
        build_config(cfg)
    cfg = hbpo_config(tmp_path / "e")
    cfg["reward"] = {"function": "rewards_for_tests:letter_fraction"}
    with pytest.raises(ConfigError, match="set reward.terms: .{name: hbpo_budget}"):
        build_config(cfg)
    cfg = hbpo_config(tmp_path / "f")
    cfg["algorithm"]["advantage"] = {"max_len": 4096}
    with pytest.raises(ConfigError, match="max_len 64 differs from advantage hbpo's 4096"):
        build_config(cfg)
    cfg = hbpo_config(tmp_path / "g")
    cfg["reward"]["terms"].append({"name": "majority_vote"})
    with pytest.raises(ConfigError, match="majority_vote score a whole group"):
        train(build_config(cfg))
