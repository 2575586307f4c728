"""Run directories: one run per directory, and what a resume may change.

A new run refuses a directory that already holds a run (its metrics would mix with the old
ones and checkpoint pruning would delete the wrong files) unless asked to overwrite it. A
resume compares the config it is given with the run's ``config.yaml``: keys that fix what the
run *is* (model, task, curriculum, algorithm family, seed) cannot change; the others (length,
learning rate and schedule, sampling, eval, logging, checkpoints) apply from the resumed step
and every change is recorded in ``resumes.jsonl``.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

from rlvr.config import (
    Config,
    ConfigError,
    build_config,
    load_config,
    read_file,
)
from rlvr.flat_config import nest_algorithm

# What rlvr writes into a run directory (eval-* directories too); --overwrite removes these only.
RUN_ARTIFACTS = (
    "config.yaml",
    "precision.json",
    "metrics.jsonl",
    "samples.jsonl",
    "resumes.jsonl",
    "checkpoints",
    "tensorboard",
    "wandb",
    "report.html",
)

# Keys a resume cannot change: the weights, optimiser and sampler state in the checkpoint only
# make sense for the run they came from. A key matches itself and everything under it.
FIXED_ON_RESUME = (
    "model",
    "task",
    "curriculum",
    "algorithm.preset",
    "algorithm.advantage.name",
    "train.seed",
    "logging.run_dir",
    "rollout.max_staleness",
)

# Keys of the optimiser and its schedule: a change is applied to the resumed optimiser.
OPTIMIZER_KEYS = (
    "train.lr",
    "train.steps",
    "train.warmup_steps",
    "train.lr_schedule",
    "train.min_lr_ratio",
    "train.weight_decay",
    "train.betas",
    "algorithm.ppo_epochs",
    "algorithm.minibatches",
)


def run_artifacts(run_dir: Path) -> list[str]:
    """Names of the rlvr files and directories in ``run_dir`` (empty if it holds no run)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = [name for name in RUN_ARTIFACTS if (run_dir / name).exists()]
    return found + sorted(p.name for p in run_dir.glob("eval-*"))


def remove_artifacts(run_dir: Path) -> None:
    """Delete what :func:`run_artifacts` lists (never other files of the directory)."""
    for name in run_artifacts(run_dir):
        path = Path(run_dir) / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def check_new_run(run_dir: Path, overwrite: bool) -> None:
    """ConfigError if ``run_dir`` holds another run and ``overwrite`` is not set."""
    found = run_artifacts(run_dir)
    if found and not overwrite:
        raise ConfigError(
            f"run directory {run_dir} already holds a run ({', '.join(found[:4])}"
            f"{', ...' if len(found) > 4 else ''}): use `rlvr train --resume {run_dir}` to "
            "continue it, --overwrite to replace it, or a new logging.run_dir"
        )


def prepare_new_run(run_dir: Path, overwrite: bool) -> Path | None:
    """Make ``run_dir`` ready for a new run: refuse (ConfigError) a directory holding another
    run unless ``overwrite``, in which case that run's files are moved into a hidden directory
    that is returned (:func:`restore_replaced` puts them back if the new run fails before its
    first step; :func:`discard_replaced` deletes them once it has taken one)."""
    check_new_run(run_dir, overwrite)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    found = run_artifacts(run_dir)
    if not found:
        return None
    backup = Path(run_dir) / f".replaced-{os.getpid()}"
    backup.mkdir()
    for name in found:
        (Path(run_dir) / name).rename(backup / name)
    return backup


def restore_replaced(run_dir: Path, backup: Path | None) -> None:
    """Put a replaced run back (after removing what the failed new run wrote)."""
    if backup is None or not backup.is_dir():
        return
    remove_artifacts(run_dir)
    for path in backup.iterdir():
        path.rename(Path(run_dir) / path.name)
    backup.rmdir()


def discard_replaced(backup: Path | None) -> None:
    """Delete a replaced run for good."""
    if backup is not None and backup.is_dir():
        shutil.rmtree(backup)


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def recorded_config(path: Path) -> dict[str, Any]:
    """A run's ``config.yaml`` as its config's values (``model_dump(mode="json")``), for a
    resume to compare with: the file loaded and validated; or, where this rlvr refuses it (an
    older rlvr recorded a value since refused, e.g. ``tis_cap: 2.0`` with DPPO, which the
    resume's ``--set`` corrects), the values the file holds over the defaults."""
    try:
        return load_config(path).model_dump(mode="json")
    except ConfigError:
        written = nest_algorithm(read_file(path))[0]  # an older rlvr's flat algorithm keys
        return _overlay(build_config({}).model_dump(mode="json"), written)


def _overlay(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top``'s values over ``base``'s, section by section (a value of ``top`` that is not a
    mapping replaces the whole of ``base``'s)."""
    out = dict(base)
    for key, value in top.items():
        below = base.get(key)
        both = isinstance(value, dict) and isinstance(below, dict)
        out[key] = _overlay(below, value) if both else value
    return out


def config_changes(saved: dict[str, Any], new: Config) -> dict[str, tuple[Any, Any]]:
    """``{dotted key: (saved value, new value)}`` for every leaf that differs between the values
    a run recorded (:func:`recorded_config`) and the config ``new``."""
    a = _flatten(saved)
    b = _flatten(new.model_dump(mode="json"))
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def _matches(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def check_resume_changes(changes: dict[str, tuple[Any, Any]]) -> None:
    """ConfigError naming every changed key that a resume cannot apply."""
    refused = [k for k in changes if _matches(k, FIXED_ON_RESUME)]
    if refused:
        lines = [f"{k}: {changes[k][0]!r} -> {changes[k][1]!r}" for k in refused]
        raise ConfigError(
            "cannot change on --resume (the checkpoint belongs to the run as configured):\n  "
            + "\n  ".join(lines)
            + "\nstart a new run (a new logging.run_dir) to change these"
        )


def changes_optimizer(changes: dict[str, tuple[Any, Any]]) -> bool:
    """Whether a resume's changes touch the learning rate, its schedule or AdamW's settings."""
    return any(_matches(k, OPTIMIZER_KEYS) for k in changes)


def record_resume(run_dir: Path, step: int, checkpoint: Path | None, changes: dict) -> None:
    """Append one line to ``RUN/resumes.jsonl``: when, from which step and checkpoint, and the
    config keys that changed (old and new values)."""
    row = {
        "time": datetime.now().isoformat(timespec="seconds"),
        "step": step,
        "checkpoint": None if checkpoint is None else checkpoint.name,
        "changes": {k: {"old": old, "new": new} for k, (old, new) in changes.items()},
    }
    with (Path(run_dir) / "resumes.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")
