"""Objective kinds as registered strategies: a user's kind (``kinds_for_tests``: reward-weighted
regression) trains through the same learner with no edit of it, and an objective naming a kind
nobody registered is refused with the registered ones listed."""

from __future__ import annotations

import json

import pytest
from test_trainer import tiny_config

from rlvr.algorithms import OBJECTIVES, add_objective
from rlvr.config import build_config
from rlvr.trainer import train
from rlvr.trainer.learner import OBJECTIVE_KINDS


def test_a_users_objective_kind_trains_with_no_edit_of_the_learner(tmp_path):
    run_dir = tmp_path / "run"
    cfg = tiny_config(run_dir, steps=2, algorithm={"objective": "rwr", "minibatches": 2})
    cfg["plugins"] = ["kinds_for_tests"]
    cfg["logging"]["update_sparsity"] = True
    train(build_config(cfg))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rwr/weight_max" in r]
    assert len(steps) == 2
    for row in steps:
        assert 0.25 <= row["rwr/weight_max"] <= 1.0  # a softmax over a group of 4
        assert row["policy/loss"] > 0  # -mean log-prob of a random model's tokens
        assert row["policy/params_changed_frac"] > 0  # its gradient reached the optimizer
        assert row["policy/grad_norm"] > 0


def test_an_objective_of_an_unregistered_kind_is_refused_listing_the_kinds(tmp_path):
    if "orphan" not in OBJECTIVES:
        add_objective("orphan", "no_such_kind", citation="", summary="a kind nobody registered")
    cfg = tiny_config(tmp_path / "run", steps=1, algorithm={"objective": "orphan"})
    with pytest.raises(ValueError, match="objective kind 'no_such_kind'") as info:
        train(build_config(cfg))
    for kind in ("imitation", "pairs", "policy_gradient"):
        assert kind in str(info.value) and kind in OBJECTIVE_KINDS
