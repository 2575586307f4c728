"""Label-free rewards: TTRL majority vote, alone and through CombinedReward."""

from __future__ import annotations

import pytest

from rlvr.data import Problem
from rlvr.rewards import CombinedReward, get_reward
from rlvr.rewards.label_free import majority_answer, majority_vote

PROBLEM = Problem("p0", "What is 2 + 2?", answer="unused: label-free rewards never read it")


def test_majority_vote_rewards_the_most_frequent_answer():
    group = ["Answer: 4", "2 + 2 = 4", "Answer: 5", "no idea", "\\boxed{4.0}"]
    # answers 4, 4, 5, None, 4.0 -> majority 4 (numeric equality: 4.0 votes with 4)
    assert majority_vote(group, PROBLEM) == [1.0, 1.0, 0.0, 0.0, 1.0]
    assert majority_answer(group) == repr(4.0)


def test_majority_vote_ties_and_empty_groups():
    assert majority_vote(["Answer: 7", "Answer: 8"], PROBLEM) == [1.0, 0.0]  # first seen wins
    assert majority_vote(["nothing", "here"], PROBLEM) == [0.0, 0.0]
    # a majority of one vote is not confident enough with min_votes=2
    assert majority_vote(["Answer: 1", "Answer: 2"], PROBLEM, min_votes=2) == [0.0, 0.0]


def test_majority_vote_is_a_registered_group_reward():
    assert get_reward("majority_vote").kind == "group"
    problems = [PROBLEM] * 3 + [Problem("p1", "q", "unused")] * 2
    completions = ["Answer: 4", "Answer: 4", "Answer: 3", "Answer: 9", "Answer: 1"]
    with CombinedReward(["majority_vote"]) as reward:
        out = reward(completions, problems)
    assert out.total == [1.0, 1.0, 0.0, 1.0, 0.0]


def test_token_stats_on_hand_computed_logits():
    import math

    import torch

    from rlvr.rollout.sampling import token_stats

    # p = (1/2, 1/4, 1/4): H = 1.5 log 2; KL(U || p) = -log 3 - (log 1/2 + 2 log 1/4) / 3
    logits = torch.tensor([[math.log(2.0), 0.0, 0.0]])
    entropy, certainty = token_stats(logits)
    assert entropy.item() == pytest.approx(1.5 * math.log(2.0), rel=1e-6)
    expected = -math.log(3) - (math.log(0.5) + 2 * math.log(0.25)) / 3
    assert certainty.item() == pytest.approx(expected, rel=1e-6)
    # a uniform distribution has maximal entropy and zero self-certainty
    entropy, certainty = token_stats(torch.zeros(1, 5))
    assert entropy.item() == pytest.approx(math.log(5)) and certainty.item() == pytest.approx(0)


def test_confidence_rewards_run_in_the_trainer(tmp_path):
    from rlvr.config import build_config
    from rlvr.logging import read_metrics
    from rlvr.trainer import train

    terms = [{"name": "self_certainty"}, {"name": "negative_entropy", "weight": 0.5}]
    cfg = build_config(
        {
            "model": {"name": "tiny-random-llama"},
            "task": {"name": "arithmetic", "level": 1, "n_eval": 4},
            "reward": {"terms": terms},
            "rollout": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 6},
            "train": {"steps": 1, "threads": 1},
            "eval": {"before": False, "after": False},
            "logging": {"run_dir": str(tmp_path), "progress": False, "tensorboard": False},
            "checkpoint": {"every": 0, "save_final": False},
        }
    )
    train(cfg)
    row = [r for r in read_metrics(tmp_path) if r["step"] == 1][0]
    certainty, neg_entropy = row["reward/self_certainty/mean"], row["reward/negative_entropy/mean"]
    assert certainty > 0 and neg_entropy < 0  # a random model: high entropy, low certainty
    assert row["reward/mean"] == pytest.approx(certainty + 0.5 * neg_entropy, rel=1e-5)


def test_confidence_rewards_are_registered_with_their_fields():
    with CombinedReward(["self_certainty", "negative_entropy"]) as reward:
        assert {"self_certainty", "token_entropy"} <= reward.field_names()
        out = reward(
            ["a", "b"], [PROBLEM, PROBLEM], self_certainty=[0.5, 1.0], token_entropy=[2.0, 1.0]
        )
    assert out.total == [0.5 - 2.0, 1.0 - 1.0]
