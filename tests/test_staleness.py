"""Asynchronous rollouts in one process (rollout.max_staleness): batches sampled ahead with the
weights before each update, the bound enforced and logged, the behaviour weight (AReaL's
decoupled objective) on by default, and max_staleness 0 the synchronous loop to the bit."""

from __future__ import annotations

import pytest
import torch
import yaml
from safetensors.torch import load_file
from test_trainer import step_rows, tiny_config

from rlvr.config import build_config
from rlvr.trainer import train
from rlvr.trainer.backends import build_parts
from rlvr.trainer.metrics import staleness


def test_staleness_zero_is_the_synchronous_loop_to_the_bit(tmp_path):
    """Collect, update, publish by hand for two steps = the loop with max_staleness 0."""
    run_dir = tmp_path / "run"
    train(build_config(tiny_config(run_dir, steps=2, rollout={"max_staleness": 0})))
    torch.manual_seed(0)  # as train() seeds torch before building the parts
    parts = build_parts(build_config(tiny_config(tmp_path / "by_hand", steps=2)))
    for step in (1, 2):
        data, _ = parts.collector.collect(step)
        assert data.policy_version == step - 1
        metrics, bad = parts.learners.update(data)
        assert bad is None
        parts.collector.publish(parts.learners.weights(), parts.learners.version)
        assert step_rows(run_dir)[step]["policy/loss"] == metrics["policy/loss"]
    saved = load_file(str(run_dir / "checkpoints" / "step_000002" / "model.safetensors"))
    ours = parts.learners.policy.state_dict()
    assert all(torch.equal(saved[k], ours[k]) for k in saved)


def test_batches_are_never_older_than_the_bound(tmp_path):
    run_dir = tmp_path / "run"
    train(build_config(tiny_config(run_dir, steps=5, rollout={"max_staleness": 2})))
    rows = step_rows(run_dir)
    assert [rows[s]["staleness/max"] for s in range(1, 6)] == [0.0, 1.0, 2.0, 2.0, 2.0]
    assert all(rows[s]["staleness/mean"] == rows[s]["staleness/max"] for s in rows)


def test_a_batch_beyond_the_bound_is_refused():
    class Batch:
        policy_version = 3

    assert staleness(4, Batch(), 1) == {"staleness/mean": 1.0, "staleness/max": 1.0}
    with pytest.raises(RuntimeError, match="staleness 2 outside"):
        staleness(5, Batch(), 1)


def test_asynchronous_runs_truncate_the_behaviour_weight_unless_told_otherwise(tmp_path):
    cfg = build_config(tiny_config(tmp_path / "run", steps=1, rollout={"max_staleness": 1}))
    assert cfg.algorithm.correction.tis_cap == 2.0
    train(cfg)
    recorded = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    # the config a run records is what it used
    assert recorded["algorithm"]["correction"]["tis_cap"] == 2.0
    masked = tiny_config(
        tmp_path / "m",
        rollout={"max_staleness": 1},
        algorithm={"correction": {"mis_band": [0.5, 2]}},
    )
    assert build_config(masked).algorithm.correction.tis_cap is None
    assert build_config(tiny_config(tmp_path / "s")).algorithm.correction.tis_cap is None
