"""Label-free rewards: TTRL majority vote, alone and through CombinedReward."""

from __future__ import annotations

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
