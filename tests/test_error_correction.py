"""EDGE-GRPO's Guided Error Correction (arXiv:2507.21848; the authors' code): each wrong reply
of a draw replaced in its place by a reflection the policy continues, the correct answer, or
the reference solution, scored and trained; a run from YAML with the entropy-driven advantage;
the refusals."""

from __future__ import annotations

import math

import pytest
import yaml
from test_lora import built
from test_trainer import step_rows, tiny_config

from rlvr.config import ConfigError, build_config, load_config
from rlvr.trainer import train
from rlvr.trainer.stages.error_correction import ANSWER, REFLECT


def gec_config(run_dir, shares=None, steps: int = 1, **algorithm) -> dict:
    cfg = tiny_config(run_dir, steps=steps)
    del cfg["reward"]  # the task's verifier: the tiny model's replies are wrong
    stage = {"name": "error_correction"}
    if shares is not None:
        stage["shares"] = shares
    cfg["algorithm"] = {"preset": "grpo", "stages": [stage], **algorithm}
    cfg["train"]["micro_batch_size"] = 64
    return cfg


def _draw(cfg):
    with built(cfg) as parts:
        data, metrics = parts.collector.collect(1)
        tokenizer = parts.collector.tokenizer
        update = None
        if cfg["algorithm"]["stages"]:
            update, bad = parts.learners.update(data)
            assert bad is None
    return data, metrics, tokenizer, update


def test_each_wrong_reply_is_replaced_in_place_by_its_correction(tmp_path):
    """The same draw without the stage gives the replies; with it, every wrong one (all, on the
    tiny model) is, by the chosen share: the reply + the reflection cue, continued by the
    policy (the given part counted in given_tokens); the reply + the boxed answer; the worked
    solution. The written ones score 1 and are given whole; the learner's update sees no
    sampler mismatch on the given tokens."""
    plain = tiny_config(tmp_path / "plain")
    del plain["reward"]
    plain["algorithm"] = {"preset": "grpo", "stages": []}
    before, _, tokenizer, _ = _draw(plain)
    assert float(before.rewards.max()) < 1.0
    groups = before.group_ids.tolist()
    for kind, shares in enumerate(([1, 0, 0], [0, 1, 0], [0, 0, 1])):
        data, metrics, _, update = _draw(gec_config(tmp_path / f"k{kind}", shares))
        assert metrics["sampling/corrected"] == len(before)
        assert data.group_ids.tolist() == groups
        for i, text in enumerate(data.texts):
            problem = data.problems[groups[i]]
            if kind == 0:
                given = before.texts[i] + REFLECT
                assert text.startswith(given)
                assert data.given_tokens[i] == len(
                    tokenizer(given, add_special_tokens=False).input_ids
                )
                assert data.sampler_logprobs[i][data.given_tokens[i] :] != []
            else:
                expected = (
                    before.texts[i] + ANSWER.format(problem.answer)
                    if kind == 1
                    else problem.demonstrations[0].text
                )
                assert text == expected and data.rewards[i] == 1.0
                assert data.given_tokens[i] == len(data.completion_ids[i])
                assert data.sampler_logprobs[i] == [0.0] * len(data.completion_ids[i])
        assert math.isfinite(update["policy/loss"]) and update["mismatch/abs_log_ratio"] < 1e-3
    cfg = gec_config(tmp_path / "mixed")  # hints after it: the tables it joins have one form
    cfg["algorithm"]["stages"].append({"name": "hints", "fractions": [0.5]})
    mixed, metrics, _, _ = _draw(cfg)
    kinds = {
        0 if t.startswith(before.texts[i] + REFLECT) else 1 if t.startswith(before.texts[i]) else 2
        for i, t in enumerate(mixed.texts)
    }
    assert kinds == {0, 1, 2}  # 1/2, 1/4, 1/4 of the 8 wrong replies


def test_edge_grpo_with_error_correction_trains_from_yaml(tmp_path):
    path = tmp_path / "edge.yaml"
    cfg = gec_config(tmp_path / "run", steps=2, advantage={"name": "edge_grpo"})
    path.write_text(yaml.safe_dump(cfg))
    train(load_config(path))
    rows = step_rows(tmp_path / "run")
    assert [rows[s]["sampling/corrected"] for s in (1, 2)] == [8.0, 8.0]
    assert all(math.isfinite(rows[s]["policy/loss"]) for s in (1, 2))
    assert rows[1]["reward/mean"] > 0  # the corrections' rewards, where the replies had none


def test_error_correction_is_refused_where_it_has_no_meaning(tmp_path):
    cases = [
        ({"expert": {"traces": 1}}, "not the data's or expert traces"),
        ({"preset": "online_dpo"}, "policy gradient, not objective 'dpo'"),
    ]
    for i, (change, message) in enumerate(cases):
        cfg = gec_config(tmp_path / str(i))
        cfg["algorithm"].update(change)
        with pytest.raises(ConfigError, match=message):
            build_config(cfg)
    cfg = gec_config(tmp_path / "shaped")
    cfg["algorithm"]["stages"].insert(0, {"name": "diver"})
    with pytest.raises(ConfigError, match="must come before diver"):
        build_config(cfg)
    cfg = gec_config(tmp_path / "group")  # a corrected reply is scored apart from its group
    cfg["reward"] = {"terms": [{"name": "majority_vote"}]}
    with pytest.raises(ConfigError, match="term.s. majority_vote score a whole group"):
        train(build_config(cfg))
