"""Where a run writes is checked at start (issue 24 part 8): a run or checkpoint directory that
cannot be written, or a disk without room for one checkpoint, is a one-line RunDirError before
the first step, and the run directory being made is removed again."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from test_trainer import step_rows, tiny_config
from typer.testing import CliRunner

import rlvr.run_checks
from rlvr.checkpoint import list_checkpoints
from rlvr.cli import app
from rlvr.config import build_config
from rlvr.errors import RunDirError
from rlvr.models import load_model
from rlvr.run_checks import check_writable, checkpoint_bytes
from rlvr.trainer import train
from rlvr.trainer.checkpoint_size import learner_bytes


def test_writable_really_writes_and_leaves_nothing(tmp_path):
    check_writable(tmp_path)
    check_writable(tmp_path / "a" / "b")  # made later, in tmp_path
    assert list(tmp_path.iterdir()) == []


def test_a_run_directory_under_a_file_cannot_be_written(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirError, match=r"cannot write to the run directory .*file/run.*NotADir"):
        check_writable(tmp_path / "file" / "run")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_directory_cannot_be_written(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(RunDirError, match="Permission"):
            check_writable(ro / "run")
    finally:
        ro.chmod(0o700)


def _refuse(paths: list[Path]):
    """A _probe that fails in ``paths`` (root ignores permission bits, so they are simulated)."""
    real = rlvr.run_checks._probe

    def probe(directory: Path) -> None:
        if any(directory == p.absolute() for p in paths):
            raise PermissionError(errno.EACCES, "Permission denied", str(directory / ".probe"))
        real(directory)

    return probe


def test_a_read_only_place_stops_the_run_before_anything_is_made(tmp_path, monkeypatch):
    monkeypatch.setattr(rlvr.run_checks, "_probe", _refuse([tmp_path / "runs"]))
    (tmp_path / "runs").mkdir()
    with pytest.raises(RunDirError, match="Permission denied") as info:
        train(build_config(tiny_config(tmp_path / "runs" / "a" / "run", steps=1)))
    assert "\n" not in str(info.value) and "logging.run_dir" in str(info.value)
    assert list((tmp_path / "runs").iterdir()) == []


def _learners(**algorithm):
    """(the config, a learner of the tiny model in this process, Ray's learners as the driver
    sees them: the preset and no policy or modules here)."""
    import torch

    from rlvr.trainer.build import Dtypes, build_learner, resolve_algorithm

    cfg = build_config(
        {
            "model": {"name": "tiny-random-llama"},
            "rollout": {"dtype": "fp32"},
            "train": {"autocast": "fp32"},
            "algorithm": algorithm,
        }
    )
    algo = resolve_algorithm(cfg)
    policy = load_model("tiny-random-llama")
    local = build_learner(cfg, algo, policy, 0, torch.Generator(), Dtypes.of(cfg, policy))

    class Remote:  # Ray's learners: counted on the meta device
        precision = None

    Remote.algo = algo
    return cfg, local, Remote()


def test_the_checkpoint_size_is_the_weights_and_two_adam_moments(tmp_path):
    model = load_model("tiny-random-llama")
    n = sum(p.numel() for p in model.parameters())  # tied embeddings counted once
    cfg, local, remote = _learners(preset="grpo", beta=0.0)
    tensors = len(list(model.parameters()))
    assert learner_bytes(local, cfg) == (4 * n, 4 * n, tensors)
    assert learner_bytes(remote, cfg) == (4 * n, 4 * n, tensors)
    assert checkpoint_bytes(4 * n, 4 * n, tensors, 0) == 3 * 4 * n + tensors * 2**10 + 2**20


def test_the_modules_beside_the_policy_are_counted_for_ray_learners_too(tmp_path):
    """PPO's value head, TR-DPO's mixed reference, the semi-online snapshot and the entropy
    controller: a checkpoint stores them beside the policy; Ray's learners (no modules in the
    driver) count them from the config as a learner here does, and the checkpoint fits."""
    import torch

    from rlvr.checkpoint import TrainerState
    from rlvr.models import load_tokenizer
    from rlvr.run_checks import tokenizer_bytes

    settings = {"reference_reset_every": 2, "reference_mix": 0.5, "sync_every": 2}
    cfg, local, remote = _learners(preset="ppo", beta=0.05, entropy_target=0.2, **settings)
    assert sorted(local.modules()) == ["entropy_control", "published", "reference", "value_head"]
    policy_only = learner_bytes(_learners(preset="ppo", beta=0.05)[1], cfg)
    counted = learner_bytes(local, cfg)
    assert counted[0] > 2 * policy_only[0]  # the reference and the snapshot: a policy each
    assert learner_bytes(remote, cfg) == counted  # before: the policy alone
    tokenizer = load_tokenizer("tiny-random-llama")
    for group in local.optimizer.param_groups:  # one step: AdamW's moments exist
        for param in group["params"]:
            param.grad = torch.zeros_like(param)
    local.optimizer.step()
    local.save_checkpoint(tmp_path, TrainerState(step=1), tokenizer, keep=2, pending=[])
    written = sum(f.stat().st_size for f in list_checkpoints(tmp_path)[0].iterdir())
    need = checkpoint_bytes(*counted, tokenizer_bytes(tokenizer))
    assert written <= need <= written + 2**20 + counted[2] * 2**10, (written, need)


def test_the_room_asked_for_is_the_checkpoint_the_run_writes(tmp_path, monkeypatch):
    """The estimate is the checkpoint's size plus the stated margin (1 MiB and 1 KiB a tensor:
    its other files, tens of KB); a disk with exactly that room runs, one byte less does not."""
    asked = []
    real = rlvr.run_checks.checkpoint_bytes
    monkeypatch.setattr(
        rlvr.run_checks, "checkpoint_bytes", lambda *a: asked.append(real(*a)) or asked[-1]
    )
    train(build_config(tiny_config(tmp_path / "a", steps=1)))
    written = sum(f.stat().st_size for f in list_checkpoints(tmp_path / "a")[0].iterdir())
    need = asked[0]
    tensors = len(list(load_model("tiny-random-llama").parameters()))
    assert written <= need <= written + 2**20 + tensors * 2**10, (written, need)
    monkeypatch.setattr(rlvr.run_checks, "free_bytes", lambda path: need - 1)
    with pytest.raises(RunDirError, match="not enough disk space for a checkpoint"):
        train(build_config(tiny_config(tmp_path / "b", steps=1)))
    monkeypatch.setattr(rlvr.run_checks, "free_bytes", lambda path: need)
    train(build_config(tiny_config(tmp_path / "b", steps=1)))
    assert sorted(step_rows(tmp_path / "b")) == [1]


def test_a_full_disk_stops_the_run_at_start_and_removes_its_directory(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(rlvr.run_checks, "free_bytes", lambda path: seen.append(path) or 10**6)
    run_dir = tmp_path / "runs" / "run"
    with pytest.raises(RunDirError) as info:
        train(build_config(tiny_config(run_dir, steps=1)))
    message = str(info.value)
    assert "not enough disk space for a checkpoint" in message and "\n" not in message
    assert "1.0 MB free" in message and "needs about 2.2 MB" in message, message
    assert seen == [tmp_path / "runs" / "run"]  # the disk of the run directory it made
    assert not (tmp_path / "runs").exists()  # removed again, with the parent made for it


def test_a_full_disk_keeps_the_run_an_overwrite_would_replace(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    train(build_config(tiny_config(run_dir, steps=1)))
    monkeypatch.setattr(rlvr.run_checks, "free_bytes", lambda path: 0)
    with pytest.raises(RunDirError, match="disk space"):
        train(build_config(tiny_config(run_dir, steps=2)), overwrite=True)
    assert sorted(step_rows(run_dir)) == [1] and len(list_checkpoints(run_dir)) == 1
    assert not list(run_dir.glob(".replaced-*"))


def test_a_read_only_checkpoint_directory_is_found_on_resume(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    train(build_config(tiny_config(run_dir, steps=1)))
    monkeypatch.setattr(rlvr.run_checks, "_probe", _refuse([run_dir / "checkpoints"]))
    with pytest.raises(RunDirError, match="cannot write to the checkpoint directory"):
        train(build_config(tiny_config(run_dir, steps=2)), resume=run_dir)
    assert sorted(step_rows(run_dir)) == [1]  # the run is left as it was


def test_a_run_without_checkpoints_needs_no_room_for_one(tmp_path, monkeypatch):
    monkeypatch.setattr(rlvr.run_checks, "free_bytes", lambda path: 0)
    none = {"every": 0, "save_final": False}
    train(build_config(tiny_config(tmp_path / "run", steps=1, checkpoint=none)))
    assert sorted(step_rows(tmp_path / "run")) == [1]


def test_cli_reports_it_in_one_line_and_exits_1(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    config = tmp_path / "c.json"
    config.write_text(__import__("json").dumps(tiny_config(tmp_path / "file" / "run", steps=1)))
    result = CliRunner().invoke(app, ["train", str(config)])
    assert result.exit_code == 1, result.output
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "cannot write to the run directory" in error[0]
    assert "Traceback" not in result.output
    monkeypatch.setattr(rlvr.run_checks, "free_bytes", lambda path: 0)
    config.write_text(__import__("json").dumps(tiny_config(tmp_path / "run", steps=1)))
    result = CliRunner().invoke(app, ["train", str(config)])
    assert result.exit_code == 1 and "not enough disk space" in result.stderr, result.output
    assert not (tmp_path / "run").exists()
