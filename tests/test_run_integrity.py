"""A run that never lies: non-finite steps, resume overrides, damaged checkpoints, run
directories, exit statuses (issue "a run that never lies")."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from cli_forkserver import rlvr_command
from safetensors.torch import load_file
from test_trainer import TESTS, step_rows, tiny_config
from typer.testing import CliRunner

import rlvr.trainer
import rlvr.trainer.learner.state
from rlvr.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    verify_checkpoint,
)
from rlvr.config import ConfigError, build_config, load_config
from rlvr.errors import NonFiniteError
from rlvr.guards import NonFiniteGuard, first_nonfinite
from rlvr.logging import MetricsLogger, read_metrics
from rlvr.models import ModelSpecError
from rlvr.rewards.protocol import RewardConfigError
from rlvr.trainer import train

CONSTANT = {"lr_schedule": "constant", "warmup_steps": 0}


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*rlvr_command(), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**__import__("os").environ, "PYTHONPATH": TESTS},
    )


def test_first_nonfinite_and_guard_streak():
    assert first_nonfinite({"a": 1.0, "b": torch.tensor([0.0, 2.0])}) is None
    assert first_nonfinite({"a": 1.0, "b": torch.tensor([0.0, float("nan")])}) == "b"
    guard = NonFiniteGuard(limit=2)
    guard.observe(1, "loss")
    guard.observe(2, None)  # a good step resets the streak
    guard.observe(3, "gradient norm")
    assert not guard.tripped
    guard.observe(4, "loss")
    assert guard.tripped and guard.first_step == 3
    assert "first: non-finite gradient norm at step 3" in guard.message()


def test_diverging_run_stops_within_three_steps_with_a_finite_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    cfg = build_config(tiny_config(run_dir, steps=10, train={"lr": 1e20, **CONSTANT}))
    with pytest.raises(NonFiniteError) as info:
        train(cfg)
    message = str(info.value)
    assert "3 steps in a row" in message and "non-finite" in message
    rows = {r["step"]: r for r in read_metrics(run_dir) if r["step"] >= 1}
    bad = [s for s, r in rows.items() if r["train/skipped_nonfinite"] > 0]
    assert bad and max(rows) == bad[0] + 2  # stopped at the third non-finite step in a row
    assert rows[max(rows)]["train/skipped_nonfinite"] == 3
    # the checkpoint of the update just before the first bad step is set aside, not resumed
    suspect = run_dir / "checkpoints" / f"step_{bad[0] - 1:06d}.suspect"
    assert suspect.is_dir() and suspect.name in message
    last = latest_checkpoint(run_dir)
    if last is None:
        assert "No earlier checkpoint" in message
    else:
        assert str(last) in message and f"rlvr train --resume {run_dir}" in message
        assert int(last.name.split("_")[1]) <= bad[0] - 2
        for name, tensor in load_file(last / "model.safetensors").items():
            assert torch.isfinite(tensor).all() and tensor.abs().max() < 1e3, name
    # the bad value is in the log as text, not as null
    raw = (run_dir / "metrics.jsonl").read_text()
    assert '"inf"' in raw or '"nan"' in raw
    assert "null" not in raw
    # no checkpoint after the first non-finite step
    assert all(int(p.name.split("_")[1]) < bad[0] - 1 for p in list_checkpoints(run_dir))


def test_cli_nonfinite_run_exits_1_without_traceback(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(
        json.dumps(tiny_config(tmp_path / "run", steps=10, train={"lr": 1e20, **CONSTANT}))
    )
    out = run_cli("train", str(config))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "training stopped" in out.stderr and "Traceback" not in out.stderr


def test_resume_with_a_new_learning_rate_trains_at_it(tmp_path):
    run_dir = tmp_path / "run"
    train(build_config(tiny_config(run_dir, steps=2, train=CONSTANT)))
    resumed = build_config(tiny_config(run_dir, steps=4, train={"lr": 2.5e-4, **CONSTANT}))
    train(resumed, resume=run_dir)
    rows = step_rows(run_dir)
    assert rows[2]["lr"] == pytest.approx(1e-3)
    assert rows[3]["lr"] == pytest.approx(2.5e-4) and rows[4]["lr"] == pytest.approx(2.5e-4)
    assert load_config(run_dir / "config.yaml").train.lr == 2.5e-4
    record = json.loads((run_dir / "resumes.jsonl").read_text().splitlines()[-1])
    assert record["step"] == 2 and record["changes"]["train.lr"] == {"old": 1e-3, "new": 2.5e-4}


def test_resume_refuses_changes_that_redefine_the_run(tmp_path):
    run_dir = tmp_path / "run"
    train(build_config(tiny_config(run_dir, steps=1)))
    before = (run_dir / "config.yaml").read_text()
    changed = build_config(tiny_config(run_dir, steps=2, task={"level": 2}))
    with pytest.raises(ConfigError, match=r"task\.level: 1 -> 2"):
        train(changed, resume=run_dir)
    assert (run_dir / "config.yaml").read_text() == before  # never records what it did not use


def _damage(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("damaged", ["model.safetensors", "state.json", "optimizer.pt"])
def test_damaged_latest_checkpoint_falls_back_to_the_previous(tmp_path, damaged, capsys):
    run_dir = tmp_path / "run"
    train(build_config(tiny_config(run_dir, steps=3, train=CONSTANT)))
    reference = step_rows(run_dir)
    newest = latest_checkpoint(run_dir)
    _damage(newest / damaged)
    with pytest.raises(CheckpointError, match=damaged):
        verify_checkpoint(newest)
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "reward/me')  # a line half-written by a killed process
    train(build_config(tiny_config(run_dir, steps=3, train=CONSTANT)), resume=run_dir)
    err = capsys.readouterr().err
    assert f"{newest}" in err and "falling back" in err and damaged in err
    assert "half-written" in err
    rows = step_rows(run_dir)
    assert sorted(rows) == [1, 2, 3]  # step 3 was trained again from step 2's checkpoint
    assert rows[3]["policy/grad_norm"] == pytest.approx(reference[3]["policy/grad_norm"], rel=1e-5)


def test_metrics_logger_writes_nonfinite_as_text_and_reads_it_back(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=False)
    logger.log(1, {"a": float("nan"), "b": float("inf"), "c": -float("inf"), "d": 1.5})
    logger.close()
    line = (tmp_path / "metrics.jsonl").read_text()
    assert '"a": "nan"' in line and '"b": "inf"' in line and '"c": "-inf"' in line
    row = read_metrics(tmp_path)[0]
    assert row["b"] == float("inf") and row["c"] == -float("inf") and row["a"] != row["a"]


def test_tensorboard_keeps_one_point_per_step_after_a_resume(tmp_path):
    """Steps 1-3 logged, the run resumed from step 2's checkpoint and step 3 logged again:
    TensorBoard reads step 3 once, the resumed run's value."""
    import time

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = MetricsLogger(tmp_path)
    for step in (1, 2, 3):
        logger.log(step, {"reward/mean": float(step)})
    logger.close()
    time.sleep(1.1)  # event files are read in name order, which starts with the second
    resumed = MetricsLogger(tmp_path, resume_step=2)
    resumed.log(3, {"reward/mean": 30.0})
    resumed.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    points = [(e.step, e.value) for e in events.Scalars("reward/mean")]
    assert points == [(1, 1.0), (2, 2.0), (3, 30.0)]


def test_a_used_run_directory_is_refused_unless_overwrite(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir).mkdir()
    (run_dir / "notes.txt").write_text("mine")
    train(build_config(tiny_config(run_dir, steps=1)))
    with pytest.raises(ConfigError, match="already holds a run.*--resume.*--overwrite"):
        train(build_config(tiny_config(run_dir, steps=1)))
    train(build_config(tiny_config(run_dir, steps=2)), overwrite=True)
    assert sorted(step_rows(run_dir)) == [1, 2]
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_000001", "step_000002"]
    assert (run_dir / "notes.txt").read_text() == "mine"  # only rlvr's files are replaced


def test_a_run_failing_before_its_first_step_leaves_no_directory(tmp_path):
    run_dir = tmp_path / "run"
    cfg = build_config(tiny_config(run_dir, steps=1, model={"name": str(tmp_path / "nope")}))
    with pytest.raises(ModelSpecError, match="nope"):
        train(cfg)
    assert not run_dir.exists()


def test_the_final_checkpoint_is_written_once(tmp_path, monkeypatch):
    calls = []
    state = rlvr.trainer.learner.state
    original = state.save_checkpoint
    monkeypatch.setattr(
        state, "save_checkpoint", lambda *a, **k: calls.append(1) or original(*a, **k)
    )
    train(build_config(tiny_config(tmp_path / "run", steps=2)))  # every=1: step 2 is due
    assert len(calls) == 2


def test_config_errors_exit_2_without_traceback_and_debug_shows_it(tmp_path):
    out = run_cli("train", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and "config file not found" in out.stderr
    assert "Traceback" not in out.stderr
    debug = run_cli("--debug", "train", str(tmp_path / "missing.yaml"))
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_config_show_prints_values_defaults_and_help():
    from rlvr.cli import app

    result = CliRunner().invoke(app, ["config", "show", "--set", "train.lr=3e-5"])
    assert result.exit_code == 0, result.output
    assert "train.lr = 3e-05" in result.output and "(default 1e-05)" in result.output
    assert "AdamW peak learning rate" in result.output
    changed = CliRunner().invoke(app, ["config", "show", "--changed", "--set", "train.lr=3e-5"])
    assert "train.lr" in changed.output and "train.steps" not in changed.output


@pytest.mark.parametrize("name", ["code", "label_free", "demo", "curriculum"])
def test_config_show_prints_every_shipped_config(name):
    from rlvr.cli import app

    path = Path(__file__).parents[1] / "configs" / f"{name}.yaml"
    result = CliRunner().invoke(app, ["config", "show", str(path)])
    assert result.exit_code == 0, result.output
    assert "model.name" in result.output and "reward" in result.output


def test_wandb_offline_logs_each_step(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = tmp_path / "run"
    logging = {"run_dir": str(run_dir), "progress": False, "tensorboard": False}
    cfg = tiny_config(run_dir, steps=2, logging={**logging, "wandb": {"project": "t"}})
    train(build_config(cfg))
    offline = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(offline) == 1 and offline[0].stat().st_size > 0


def test_nonfinite_weights_are_never_checkpointed(tmp_path, monkeypatch):
    """Weights that turn non-finite in a step whose loss and gradients were finite stop the run
    at the checkpoint instead of being written."""
    run_dir = tmp_path / "run"
    original = rlvr.trainer.learner.Learner.optimize

    def poison_at_step_2(learner, data):
        metrics, bad = original(learner, data)
        if len(list_checkpoints(run_dir)) == 1:
            with torch.no_grad():
                next(learner.policy.parameters())[0, 0] = float("inf")
        return metrics, bad

    monkeypatch.setattr(rlvr.trainer.learner.Learner, "optimize", poison_at_step_2)
    with pytest.raises(NonFiniteError, match="not finite.*Last good checkpoint"):
        train(build_config(tiny_config(run_dir, steps=4)))
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_000001"]


def test_sigint_checkpoints_and_exits_130(tmp_path):
    import signal

    from test_trainer import _launch, _wait_for

    run_dir = tmp_path / "run"
    config = tmp_path / "c.json"
    config.write_text(json.dumps(tiny_config(run_dir, steps=50, checkpoint={"every": 0})))
    proc = _launch(config)
    _wait_for(lambda: run_dir.exists() and len(step_rows(run_dir)) >= 1, proc)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, output
    stopped = latest_checkpoint(run_dir)
    assert stopped is not None and f"resume with: rlvr train --resume {run_dir}\n" in output


def test_a_second_ctrl_c_stops_at_once_and_says_how_to_resume(tmp_path):
    """Ctrl-C twice in the middle of step 2 (its rewards take 2 s): the run stops at once (exit
    130, step 2 unfinished) and prints the command that resumes it from step 1's checkpoint."""
    import signal
    import time

    from test_trainer import _launch, _wait_for

    run_dir = tmp_path / "run"
    config = tmp_path / "c.json"
    slow = {"function": "rewards_for_tests:slow_letter_fraction"}
    config.write_text(json.dumps(tiny_config(run_dir, steps=50, reward=slow)))
    proc = _launch(config)
    _wait_for(lambda: run_dir.exists() and len(list_checkpoints(run_dir)) >= 1, proc)
    time.sleep(0.5)  # step 2 is scoring its samples (2 s)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)  # the first is handled: two signals at once would count as one
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, output
    assert (
        "stopped at once by a second Ctrl-C after step 1; resume from its last checkpoint "
        f"(step_000001) with: rlvr train --resume {run_dir}\n"
    ) in output, output
    assert sorted(step_rows(run_dir)) == [1]


def test_divergence_sets_aside_the_checkpoint_before_it_and_resume_uses_the_last_good(
    tmp_path, monkeypatch
):
    run_dir = tmp_path / "run"
    original = rlvr.trainer.learner.Learner.optimize
    calls = []

    def nan_loss_from_step_4(*args, **kwargs):
        calls.append(1)
        if len(calls) >= 4:
            return {"policy/loss": float("nan")}, "loss"
        return original(*args, **kwargs)

    monkeypatch.setattr(rlvr.trainer.learner.Learner, "optimize", nan_loss_from_step_4)
    with pytest.raises(NonFiniteError) as info:
        train(build_config(tiny_config(run_dir, steps=10, train=CONSTANT)))
    message = str(info.value)
    assert "first: non-finite loss at step 4" in message and "step_000003.suspect" in message
    assert f"Last good checkpoint: {run_dir / 'checkpoints' / 'step_000002'}" in message
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_000001", "step_000002"]
    monkeypatch.setattr(rlvr.trainer.learner.Learner, "optimize", original)
    train(build_config(tiny_config(run_dir, steps=4, train=CONSTANT)), resume=run_dir)
    assert sorted(step_rows(run_dir)) == [1, 2, 3, 4]
    record = json.loads((run_dir / "resumes.jsonl").read_text().splitlines()[-1])
    assert record["step"] == 2 and record["checkpoint"] == "step_000002"


def test_overwrite_keeps_the_old_run_when_the_new_one_fails_before_step_1(tmp_path):
    run_dir = tmp_path / "run"
    train(build_config(tiny_config(run_dir, steps=2)))
    before = sorted(step_rows(run_dir))
    broken = tiny_config(run_dir, steps=2, reward={"function": "rewards_for_tests:nope"})
    with pytest.raises(RewardConfigError, match="no callable 'nope'"):
        train(build_config(broken), overwrite=True)
    assert sorted(step_rows(run_dir)) == before and len(list_checkpoints(run_dir)) == 2
    assert not list(run_dir.glob(".replaced-*"))
    train(build_config(tiny_config(run_dir, steps=1)), overwrite=True)
    assert sorted(step_rows(run_dir)) == [1] and not list(run_dir.glob(".replaced-*"))


def test_a_python_reward_is_recorded_and_a_cli_resume_says_how_to_resume(tmp_path):
    run_dir = tmp_path / "run"
    train(build_config(tiny_config(run_dir, steps=1, reward={"function": None})), reward=len_reward)
    recorded = load_config(run_dir / "config.yaml").reward.function
    assert recorded == "test_run_integrity:len_reward"
    lam = tmp_path / "lam"
    train(
        build_config(tiny_config(lam, steps=1, reward={"function": None})), reward=lambda c, p: 0.5
    )
    marker = load_config(lam / "config.yaml").reward.function
    assert marker.startswith("<python callable") and "lambda" in marker
    out = run_cli("train", "--resume", str(lam), "--set", "train.steps=2")
    assert out.returncode == 2 and "resume it from Python" in out.stderr, out.stderr
    train(
        build_config(tiny_config(lam, steps=2, reward={"function": None})),
        resume=lam,
        reward=lambda c, p: 0.5,
    )
    assert sorted(step_rows(lam)) == [1, 2]


def len_reward(completion: str, problem) -> float:
    return min(1.0, len(completion) / 10)


def test_a_reward_failing_mid_run_says_how_to_resume(tmp_path, monkeypatch):
    from rlvr.cli import app
    from rlvr.trainer.loop import Loop

    marker, checkpoint = tmp_path / "broken", Loop.checkpoint

    def checkpoint_then_break_the_reward(self: Loop) -> None:
        checkpoint(self)
        marker.touch()

    monkeypatch.setattr(Loop, "checkpoint", checkpoint_then_break_the_reward)
    run_dir = tmp_path / "run"
    term = {"name": "rewards_for_tests:fails_when_marked", "params": {"marker": str(marker)}}
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(tiny_config(run_dir, 3, reward={"function": None, "terms": [term]}))
    )
    result = CliRunner().invoke(app, ["train", str(config)], prog_name="rlvr")
    output = " ".join(result.output.split())
    assert result.exit_code == 1, output
    assert "the reward's service went away" in output
    assert (
        f"Resume from its last checkpoint (step_000001) with: rlvr train --resume {run_dir}"
    ) in output
    assert sorted(step_rows(run_dir)) == [1]


def test_a_run_failing_before_its_first_checkpoint_says_to_resume_it_from_step_0(
    tmp_path, monkeypatch
):
    """The reward fails at step 2 of a run that checkpoints only at its end: step 1 was logged,
    so the run directory stays (a new `rlvr train` refuses it) and the error says to resume it,
    which trains from step 0 again, every earlier row (the initial evaluation's too) replaced."""
    from rlvr.rewards.protocol import RewardError
    from rlvr.trainer.loop import Loop

    marker, record = tmp_path / "broken", Loop.record

    def record_then_break_the_reward(self: Loop, *args) -> None:
        record(self, *args)
        marker.touch()

    monkeypatch.setattr(Loop, "record", record_then_break_the_reward)
    run_dir = tmp_path / "run"
    term = {"name": "rewards_for_tests:fails_when_marked", "params": {"marker": str(marker)}}
    sections = {
        "reward": {"function": None, "terms": [term]},
        "checkpoint": {"every": 0, "save_final": True},
        "eval": {"before": True, "after": False},
    }
    with pytest.raises(RewardError) as info:
        train(build_config(tiny_config(run_dir, 3, **sections)))
    assert (
        f"No checkpoint was written yet: resume it from step 0 with: rlvr train --resume {run_dir}"
    ) in str(info.value)
    assert sorted(step_rows(run_dir)) == [1] and latest_checkpoint(run_dir) is None
    with pytest.raises(ConfigError, match="already holds a run"):  # "start the run again"
        train(build_config(tiny_config(run_dir, 3, **sections)))
    monkeypatch.setattr(Loop, "record", record)
    marker.unlink()
    train(build_config(tiny_config(run_dir, 3, **sections)), resume=run_dir)
    assert [r["step"] for r in read_metrics(run_dir)] == [0, 1, 2, 3]  # one initial evaluation
    resumed = json.loads((run_dir / "resumes.jsonl").read_text())
    assert resumed["step"] == 0 and resumed["checkpoint"] is None
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_000003"]


def test_an_async_dppo_run_recorded_with_tis_cap_resumes_with_it_set_to_null(tmp_path):
    """An older rlvr recorded tis_cap: 2.0 for asynchronous DPPO, which DPPO now refuses: the
    refusal names the --set that resumes the run, and that resume works (the recorded config
    is compared as written) and records the change."""
    run_dir = tmp_path / "run"
    algorithm = {"policy_loss": "dppo_tv"}
    train(build_config(tiny_config(run_dir, 1, algorithm=algorithm, rollout={"max_staleness": 1})))
    path = run_dir / "config.yaml"
    recorded = yaml.safe_load(path.read_text())
    recorded["algorithm"]["correction"]["tis_cap"] = 2.0  # what the older validator wrote
    path.write_text(yaml.safe_dump(recorded, sort_keys=False))
    fix = "algorithm.correction.tis_cap=null"
    with pytest.raises(ConfigError, match=f"--resume RUN --set {fix}"):
        load_config(path)
    cfg = load_config(path, [fix, "train.steps=2"])
    train(cfg, resume=run_dir)
    assert sorted(step_rows(run_dir)) == [1, 2]
    changes = json.loads((run_dir / "resumes.jsonl").read_text())["changes"]
    assert changes == {
        "algorithm.correction.tis_cap": {"old": 2.0, "new": None},
        "train.steps": {"old": 1, "new": 2},
    }


def test_a_run_whose_rewards_never_vary_says_nothing_is_learning(tmp_path, capsys):
    run_dir = tmp_path / "run"
    logging = {"run_dir": str(run_dir), "progress": True, "tensorboard": False}
    reward = {"function": "rewards_for_tests:echo_value"}  # 0.5 for every completion
    train(build_config(tiny_config(run_dir, steps=4, reward=reward, logging=logging)))
    out = capsys.readouterr().out
    assert out.count("nothing is learning") == 1, out  # once, after 3 stalled steps
    assert "step 3/4" in out.split("nothing is learning")[0]
    assert "reward: 0.500" in out and "completion:" in out


def test_resume_refuses_data_that_changed_since_the_run_started(tmp_path):
    data = tmp_path / "data.jsonl"
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(20)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_dir = tmp_path / "run"
    task = {"name": "file", "path": str(data)}
    train(build_config(tiny_config(run_dir, steps=1, task=task)))
    rows[5]["answer"] = "7"  # an edited answer
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ConfigError, match="changed since this run started"):
        train(build_config(tiny_config(run_dir, steps=2, task=task)), resume=run_dir)
    rows[5]["answer"] = "6"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train(build_config(tiny_config(run_dir, steps=2, task=task)), resume=run_dir)
    assert sorted(step_rows(run_dir)) == [1, 2]


def test_adamw_is_fused_and_a_checkpoint_resumes_with_this_runs_kernel(tmp_path):
    """AdamW runs fused on the CPU and on a CUDA device (not with a GPU run's parameters
    offloaded to CPU memory: PyTorch's multi-tensor loop there); a checkpoint whose optimizer
    was fused loads its state into an optimizer running the loop, which keeps its own kernel."""
    from rlvr.models import load_model
    from rlvr.trainer.build import fused_adamw

    cfg = build_config(tiny_config(tmp_path / "run", steps=1))
    assert fused_adamw(torch.device("cpu"), cfg) is True
    assert fused_adamw(torch.device("cuda", 0), cfg) is True
    assert fused_adamw(torch.device("mps"), cfg) is None
    sharded = {"train": {"sharding": "fsdp", "shard_offload": True}}
    offload = build_config(
        tiny_config(tmp_path / "o", distributed={"backend": "ray", "learners": 2}, **sharded)
    )
    assert fused_adamw(torch.device("cuda", 0), offload) is None
    rlvr.trainer.train(cfg)
    ckpt = latest_checkpoint(tmp_path / "run")
    saved = torch.load(ckpt / "optimizer.pt", weights_only=False)
    assert saved["param_groups"][0]["fused"] is True  # the CPU run's
    model = load_model(str(ckpt))
    opt = torch.optim.AdamW(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    state = load_checkpoint(ckpt, model, opt, sched, torch.Generator())
    assert state.step == 1 and opt.param_groups[0]["fused"] is None
    assert all(opt.state[p]["step"] == 1 for p in model.parameters())
