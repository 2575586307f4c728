"""DRA-GRPO's diversity-aware reward adjustment (Chen et al. 2025, arXiv:2505.09655): the pure
function on a hand-computed group, and the ``dra`` stage on a tiny-model draw."""

from __future__ import annotations

import pytest
import torch
from test_lora import built
from test_trainer import tiny_config
from test_zoo_trainer_wiring import record_plays

from rlvr.algorithms import diversity_adjusted_rewards, graph_cut_smi
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
