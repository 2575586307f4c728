"""A collapsed policy stops the run (issue 24 part 8): uniform over the vocabulary, or a gradient
of exactly zero while the rewards differ, ``train.max_collapsed_steps`` steps in a row."""

from __future__ import annotations

import json
import math

import pytest
from test_run_integrity import CONSTANT
from test_trainer import step_rows, tiny_config
from typer.testing import CliRunner

from rlvr.checkpoint import list_checkpoints
from rlvr.cli import app
from rlvr.config import build_config
from rlvr.errors import CollapseError
from rlvr.guards import CollapseGuard, vocabulary_size
from rlvr.logging import read_metrics
from rlvr.models import load_model, load_tokenizer
from rlvr.trainer import train

V = 259  # tiny-random-llama's vocabulary
UNIFORM = math.log(V)
# what `train.lr: 1e6` gives on tiny-random-llama from its second step on (measured)
COLLAPSED = {
    "policy/entropy": 5.556828022003174,
    "policy/grad_norm": 0.0,
    "policy/trained_samples_frac": 1.0,
    "groups/zero_variance_frac": 0.0,
}
HEALTHY = {  # its first step: a random model is near-uniform, but not uniform
    "policy/entropy": 5.538744926452637,
    "policy/grad_norm": 1.0997257232666016,
    "policy/trained_samples_frac": 1.0,
    "groups/zero_variance_frac": 0.0,
}


def test_the_vocabulary_is_the_output_layer_else_the_tokenizer():
    tokenizer = load_tokenizer("tiny-random-llama")
    assert vocabulary_size(load_model("tiny-random-llama"), tokenizer) == V
    assert vocabulary_size(None, tokenizer) == len(tokenizer) == V  # Ray: no policy here


def test_a_uniform_policy_is_collapsed_a_near_uniform_one_is_not():
    guard = CollapseGuard(limit=3, vocab_size=V)
    assert "log 259" in guard.collapsed(COLLAPSED)
    assert guard.collapsed({"policy/entropy": UNIFORM - 5e-4}) is not None  # within tolerance
    assert guard.collapsed({"policy/entropy": UNIFORM + 0.01}) is not None  # a padded vocabulary
    assert guard.collapsed(HEALTHY) is None
    assert guard.collapsed({"policy/entropy": UNIFORM - 0.01}) is None
    assert guard.collapsed({"policy/entropy": float("nan")}) is None  # NonFiniteGuard's
    assert guard.collapsed({}) is None


def test_a_zero_gradient_counts_only_when_there_was_something_to_learn():
    guard = CollapseGuard(limit=3, vocab_size=V)
    zero = {"policy/grad_norm": 0.0, "policy/entropy": 2.0}
    assert "gradient norm exactly 0" in guard.collapsed(
        {**zero, "groups/zero_variance_frac": 0.5, "policy/trained_samples_frac": 1.0}
    )
    # every group's rewards equal (no advantage) or nothing trained on: no signal, no collapse
    assert guard.collapsed({**zero, "groups/zero_variance_frac": 1.0}) is None
    assert guard.collapsed({**zero, "policy/trained_samples_frac": 0.0}) is None
    assert guard.collapsed({**zero, "policy/grad_norm": 1e-12}) is None


def test_sampled_log_probs_of_minus_log_v_are_a_uniform_policy():
    guard = CollapseGuard(limit=3, vocab_size=V)
    # every advantage zero: no entropy measured, but the sampler saw the uniform policy
    quiet = {"policy/grad_norm": 0.0, "policy/trained_samples_frac": 0.0}
    uniform = [[-UNIFORM] * 5, [-UNIFORM + 1e-6] * 3]
    assert "every sampled token" in guard.collapsed(quiet, uniform)
    assert guard.collapsed(quiet, [[-UNIFORM] * 5, [-UNIFORM, -2.0]]) is None
    assert guard.collapsed(quiet, []) is None


def test_the_guard_warns_once_and_trips_after_limit_in_a_row():
    guard = CollapseGuard(limit=3, vocab_size=V)
    assert guard.observe(1, HEALTHY) is None
    warning = guard.observe(2, COLLAPSED)
    assert warning.startswith("step 2: the policy looks collapsed") and "3 such steps" in warning
    assert guard.observe(3, COLLAPSED) is None and not guard.tripped  # warned once
    assert guard.observe(4, HEALTHY) is None and guard.streak == 0  # a good step resets it
    assert guard.observe(5, COLLAPSED) is not None
    guard.observe(6, COLLAPSED)
    guard.observe(7, COLLAPSED)
    assert guard.tripped and guard.first_step == 5
    assert "3 steps in a row from step 5" in guard.message() and "train.lr" in guard.message()


def test_lr_1e6_collapses_and_stops_the_run_naming_it(tmp_path, capsys):
    run_dir = tmp_path / "run"
    cfg = build_config(tiny_config(run_dir, steps=10, train={"lr": 1e6, **CONSTANT}))
    with pytest.raises(CollapseError) as info:
        train(cfg)
    message = str(info.value)
    rows = step_rows(run_dir)
    # step 1's update collapses the policy; steps 2-4 see it and stop the run
    assert max(rows) == 4
    for step in (2, 3, 4):
        assert rows[step]["policy/entropy"] == pytest.approx(UNIFORM, abs=1e-4)
        assert rows[step]["policy/grad_norm"] == 0.0
    assert "3 steps in a row from step 2" in message and "log 259" in message
    # the collapsed weights of step 1's checkpoint are set aside, none is resumed from
    assert "step_000001.suspect" in message and "No earlier checkpoint" in message
    assert list_checkpoints(run_dir) == []
    assert (run_dir / "checkpoints" / "step_000001.suspect").is_dir()
    printed = capsys.readouterr().out
    assert printed.count("the policy looks collapsed") == 1, printed  # on its first step only


def test_healthy_runs_never_trip_it(tmp_path):
    # every step has a gradient, and one whose rewards never vary (zero gradient, no signal)
    limit1 = {"max_collapsed_steps": 1}
    train(build_config(tiny_config(tmp_path / "a", steps=3, train=limit1)))
    constant = {"function": "rewards_for_tests:echo_value"}  # 0.5 for every completion
    train(build_config(tiny_config(tmp_path / "b", steps=3, train=limit1, reward=constant)))
    rows = [r for r in read_metrics(tmp_path / "b") if r["step"] >= 1]
    assert [r["step"] for r in rows] == [1, 2, 3]  # every step logged, none stopped
    assert all(r["policy/grad_norm"] == 0.0 for r in rows)  # zero, yet not a collapse


def test_cli_collapsed_run_exits_1_without_traceback(tmp_path):
    config = tmp_path / "c.json"
    run_dir = tmp_path / "run"
    config.write_text(json.dumps(tiny_config(run_dir, steps=10, train={"lr": 1e6, **CONSTANT})))
    result = CliRunner().invoke(app, ["train", str(config)])
    assert result.exit_code == 1, result.output
    assert "error: training stopped: the policy collapsed" in result.stderr
    assert "Traceback" not in result.output
