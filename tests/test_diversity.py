"""DRA-GRPO's diversity-aware reward adjustment (Chen et al. 2025, arXiv:2505.09655) and DIVER's
diversity bonus (Hu et al. 2025, arXiv:2509.26209): the pure functions on hand-computed groups,
and the ``dra`` and ``diver`` stages on a tiny-model draw."""

from __future__ import annotations

import pytest
import torch
from test_lora import built
from test_trainer import tiny_config
from test_zoo_trainer_wiring import record_plays

from rlvr.algorithms import (
    diver_rewards,
    diversity_adjusted_rewards,
    equation_diversity,
    graph_cut_smi,
    textual_diversity,
)
from rlvr.config import ConfigError, build_config
from rlvr.rewards.embeddings import LexicalEmbedder
from rlvr.trainer.build import resolve_algorithm
from rlvr.trainer.stages import stages_for


def test_dra_divides_each_reward_by_one_plus_its_similarity_to_the_group():
    """Group 0: two identical completions and one orthogonal: SMI = (1, 1, 0), so rewards
    (1, 1, 1) become (1/2, 1/2, 1). Group 1: cos = 0.6*0.8 + 0.8*0.6 = 0.96, a wrong answer's
    -1 becomes -1/1.96 and a 0 stays 0. The groups never see each other."""
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.8, 0.6]])
    rewards = torch.tensor([1.0, 1.0, 1.0, -1.0, 0.0])
    ids = torch.tensor([0, 0, 0, 1, 1])
    assert graph_cut_smi(emb[:3] @ emb[:3].T).tolist() == [1.0, 1.0, 0.0]
    got = diversity_adjusted_rewards(rewards, ids, emb)
    assert got.tolist() == pytest.approx([1 / 2, 1 / 2, 1.0, -1 / 1.96, 0.0], abs=2e-6)
    assert got[2] == pytest.approx(1 / (1 + 1e-6), abs=0)  # the authors' epsilon
    alone = diversity_adjusted_rewards(torch.tensor([2.0]), torch.tensor([0]), emb[:1])
    assert alone.item() == pytest.approx(2.0)
    with pytest.raises(ValueError, match="agree on N"):
        diversity_adjusted_rewards(rewards, ids, emb[:4])
    with pytest.raises(ValueError, match="square"):
        graph_cut_smi(emb)


def test_the_dra_stage_adjusts_the_draws_rewards_and_logs_the_tasks(tmp_path):
    """``algorithm.stages: [{name: dra, embedding: lexical}]`` on the tiny model: the batch's
    rewards are the task's divided by one plus each text's summed lexical cosine to its
    group; the logged reward mean stays the task's."""
    cfg = tiny_config(
        tmp_path / "run", steps=1, algorithm={"stages": [{"name": "dra", "embedding": "lexical"}]}
    )
    with built(cfg) as parts:
        played = record_plays(parts.collector)
        data, metrics = parts.collector.collect(1)
    ((_, _, scored),) = played
    task = torch.tensor(scored.breakdown.total, dtype=torch.float64)
    emb = LexicalEmbedder().embed(list(data.texts)).double()
    expected = task.clone()
    for g in data.group_ids.unique():
        rows = data.group_ids == g
        sim = emb[rows] @ emb[rows].T
        expected[rows] = task[rows] / (1 + sim.sum(1) - sim.diagonal() + 1e-6)
    assert data.rewards.double().tolist() == pytest.approx(expected.tolist(), abs=1e-6)
    assert (expected != task).any()  # similar texts in a group: the adjustment bites
    term = metrics["reward/rewards_for_tests:letter_fraction/mean"]
    assert term == pytest.approx(task.mean().item(), abs=1e-6)


def test_dra_refuses_an_unknown_embedding(tmp_path):
    cfg = build_config(
        tiny_config(tmp_path / "run", algorithm={"stages": [{"name": "dra", "embedding": "jina"}]})
    )
    with pytest.raises(ConfigError, match="embedding must be one of auto, semantic, lexical"):
        stages_for(resolve_algorithm(cfg))


def test_diver_measures_a_responses_difference_from_its_group_by_hand():
    """Textual: two identical six-word answers have BLEU 1 with each other and 0 with a third
    sharing no word, so TD = 1 - (1 + 0) / 2 = 0.5 for each and 1 - 0 = 1 for the third.
    Equation: formulas {x+1, y}, {x+1}, none: ED = (1/2, 0, 0) (a response without a formula
    has 0). Shaped with lambda 1 and clip 0.68: only the correct ones gain: rewards (1, 0, 1)
    become (1.5, 0, 1.68)."""
    same, other = "a b c d e f", "u v w x y z"
    assert textual_diversity([same, same, other]).tolist() == [0.5, 0.5, 1.0]
    assert textual_diversity([same]).tolist() == [0.0]
    texts = [r"so $x+1$ and \(y\)", r"we get \[x+1\]", "none"]
    assert equation_diversity(texts).tolist() == [0.5, 0.0, 0.0]
    rewards, ids = torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 0, 1])
    shaped = diver_rewards(rewards, ids, [same, same, other, same])
    assert shaped.tolist() == pytest.approx([1.5, 0.0, 1.68, 1.0])  # a group of one: no bonus
    eq = diver_rewards(rewards[:3], ids[:3], texts, measure="equation", lam=2.0)
    assert eq.tolist() == pytest.approx([2.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="measure must be one of textual, equation"):
        diver_rewards(rewards, ids, [same] * 4, measure="bleu")
    with pytest.raises(ValueError, match="agree on N"):
        diver_rewards(rewards, ids, [same] * 3)


def test_the_diver_stage_adds_the_bonus_to_the_draws_rewards_until_its_step(tmp_path):
    """``algorithm.stages: [{name: diver, correct_at: 0}]`` (every sample counts as correct) on
    the tiny model: the batch's rewards are the task's plus each text's TD in its group clipped
    at 0.68; the logged reward mean stays the task's. After ``until_step`` nothing is added."""
    stage = {"name": "diver", "correct_at": 0.0, "until_step": 1}
    cfg = tiny_config(tmp_path / "run", steps=1, algorithm={"stages": [stage]})
    with built(cfg) as parts:
        played = record_plays(parts.collector)
        data, metrics = parts.collector.collect(1)
        later, _ = parts.collector.collect(2)
    ((_, _, scored), (_, _, scored_later)) = played
    task = torch.tensor(scored.breakdown.total, dtype=torch.float64)
    expected = task.clone()
    for g in data.group_ids.unique():
        rows = (data.group_ids == g).nonzero().squeeze(-1)
        td = textual_diversity([data.texts[int(i)] for i in rows])
        expected[rows] = task[rows] + td.clamp(0, 0.68)
    assert data.rewards.double().tolist() == pytest.approx(expected.tolist(), abs=1e-6)
    assert (expected != task).any()
    term = metrics["reward/rewards_for_tests:letter_fraction/mean"]
    assert term == pytest.approx(task.mean().item(), abs=1e-6)
    unshaped = torch.tensor(scored_later.breakdown.total, dtype=later.rewards.dtype)
    assert later.rewards.tolist() == pytest.approx(unshaped.tolist())
    bad = tiny_config(tmp_path / "bad", algorithm={"stages": [{"name": "diver", "sigma": 0}]})
    with pytest.raises(ConfigError, match="sigma and chars > 0"):
        stages_for(resolve_algorithm(build_config(bad)))
