"""Reference-answer probability rewards (RLPR, VeriFree) and the trainer's log-prob interface."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.data import Problem
from rlvr.rewards import CombinedReward, get_reward
from rlvr.rewards.reference_probability import (
    answer_probe,
    reference_answer_logprobs,
    reference_probability,
    sequence_score,
    split_reasoning,
    turn_answer_probabilities,
)

PROBLEM = Problem("p0", "What is 3 + 4?", answer="7")


def test_split_reasoning_cuts_at_the_final_answer():
    assert split_reasoning("3 + 4 = 7.\nAnswer: 7") == "3 + 4 = 7.\n"
    assert split_reasoning("so \\boxed{7}") == "so "
    assert split_reasoning("Answer: 6? no.\nThe answer is 7") == "Answer: 6? no.\n"
    assert split_reasoning("no marker at all") == "no marker at all"


def test_answer_probe_moves_the_space_into_the_answer():
    assert answer_probe("3 + 4 = 7.\n", "7") == ("3 + 4 = 7.\nAnswer:", " 7")
    assert answer_probe("", "7") == ("Answer:", " 7")  # the debiasing probe: no reasoning
    assert answer_probe("x", "7", "\\boxed{{answer}}") == ("x\n\\boxed{", "7}")
    with pytest.raises(ValueError, match="answer"):
        answer_probe("x", "7", "Result: ")


def test_sequence_scores_on_hand_computed_probabilities():
    lps = [math.log(0.5), math.log(0.25)]
    assert sequence_score(lps, "mean") == pytest.approx(0.375)  # (0.5 + 0.25) / 2
    assert sequence_score(lps, "product") == pytest.approx(0.125)  # 0.5 * 0.25
    assert sequence_score(lps, "geometric") == pytest.approx(math.sqrt(0.125))
    with pytest.raises(ValueError):
        sequence_score([], "mean")


def test_rlpr_debiasing_clips_to_the_unit_interval():
    with_reasoning = [math.log(0.9), math.log(0.7)]  # mean 0.8
    bare = [math.log(0.5), math.log(0.1)]  # mean 0.3
    assert reference_probability("", PROBLEM, with_reasoning, bare) == pytest.approx(0.5)
    # reasoning that lowers the answer's probability scores 0, not a negative reward
    assert reference_probability("", PROBLEM, bare, with_reasoning) == 0.0
    assert get_reward("rlpr").fn("", PROBLEM, with_reasoning, bare) == pytest.approx(0.5)
    verifree = get_reward("verifree").fn("", PROBLEM, with_reasoning)
    assert verifree == pytest.approx(0.9 * 0.7)


def test_log_probs_equal_a_teacher_forced_forward(tiny):
    model, tok = tiny
    prompts = [tok("Q: 3 + 4?\n")["input_ids"], tok("Q: 1?\n")["input_ids"]]
    completions = ["think 3 + 4 = 7\nAnswer: 8", "just guess", "Answer: 1"]
    groups, refs = [0, 0, 1], ["7", "7", "1"]
    out = reference_answer_logprobs(model, tok, prompts, groups, completions, refs, micro_batch=2)
    # by hand: one full forward over prompt + context + answer for sample 0
    context, answer = answer_probe(split_reasoning(completions[0]), "7")
    ctx = prompts[0] + tok(context, add_special_tokens=False)["input_ids"]
    ans = tok(answer, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ctx + ans])).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    expected = [logp[len(ctx) - 1 + i, t].item() for i, t in enumerate(ans)]
    assert out["reference_logprobs"][0] == pytest.approx(expected, abs=1e-5)
    # the no-reasoning probe is computed once per prompt and shared by its samples
    assert out["reference_logprobs_bare"][0] == out["reference_logprobs_bare"][1]
    assert len(out["reference_logprobs"][2]) == len(
        tok(" 1", add_special_tokens=False)["input_ids"]
    )


def test_turn_answer_probabilities_equal_teacher_forced_forwards(tiny):
    """IGPO's P_k: the answer's geometric-mean token probability after the prompt and the
    episode up to where action k starts (action runs of the mask: tokens 0-2 and 5-6)."""
    model, tok = tiny
    prompts = [tok("Q: 3 + 4?\n")["input_ids"]]
    episode = tok("search it\nobs: seven\nnow", add_special_tokens=False)["input_ids"][:7]
    assert len(episode) == 7
    mask = [1, 1, 1, 0, 0, 1, 1]
    got = turn_answer_probabilities(model, tok, prompts, [0], [episode], [mask], ["7"])
    context, answer = answer_probe("", "7")
    ctx_ids = tok(context, add_special_tokens=False)["input_ids"]
    ans = tok(answer, add_special_tokens=False)["input_ids"]
    expected = []
    for start in (0, 5):
        ids = prompts[0] + episode[:start] + ctx_ids
        with torch.no_grad():
            logits = model(torch.tensor([ids + ans])).logits[0].float()
        logp = torch.log_softmax(logits, -1)
        mean = sum(logp[len(ids) - 1 + i, t].item() for i, t in enumerate(ans)) / len(ans)
        expected.append(math.exp(mean))
    assert len(got) == 1 and got[0] == pytest.approx(expected, rel=1e-4)
    assert got[0][0] != got[0][1]  # the context differs
    # two episodes of one prompt: their shared probes are scored once, to the same values
    twice = turn_answer_probabilities(
        model, tok, prompts, [0, 0], [episode, episode], [mask, mask], ["7", "7"]
    )
    assert twice == [got[0], got[0]]


def test_rlpr_through_combined_reward():
    lps = [[math.log(0.9)], [math.log(0.2)]]
    bare = [[math.log(0.4)], [math.log(0.4)]]
    with CombinedReward(["rlpr", ("verifree", 2.0)]) as reward:
        out = reward(
            ["a", "b"],
            [PROBLEM, PROBLEM],
            reference_logprobs=lps,
            reference_logprobs_bare=bare,
        )
    assert out.components["rlpr"] == pytest.approx([0.5, 0.0])
    assert out.components["verifree"] == pytest.approx([0.9, 0.2])
    assert out.total == pytest.approx([2.3, 0.4])


def test_reference_rewards_run_in_the_trainer(tmp_path):
    from rlvr.config import build_config
    from rlvr.logging import read_metrics
    from rlvr.trainer import train

    cfg = build_config(
        {
            "model": {"name": "tiny-random-llama"},
            "task": {"name": "arithmetic", "level": 1, "n_eval": 4},
            "reward": {"terms": [{"name": "rlpr"}, {"name": "verifree"}]},
            "rollout": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 6},
            "train": {"steps": 2, "threads": 1},
            "eval": {"before": False, "after": False},
            "logging": {"run_dir": str(tmp_path), "progress": False, "tensorboard": False},
            "checkpoint": {"every": 0, "save_final": False},
        }
    )
    train(cfg)
    rows = [r for r in read_metrics(tmp_path) if r["step"] >= 1]
    assert len(rows) == 2
    for row in rows:
        assert 0.0 <= row["reward/rlpr/mean"] <= 1.0
        assert 0.0 < row["reward/verifree/mean"] < 1.0  # a random model: small, positive
        assert math.isfinite(row["policy/loss"])
