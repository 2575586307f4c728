"""Atomic checkpoints and exact resume.

A checkpoint is a directory ``RUN/checkpoints/step_000042`` holding

* ``model.safetensors`` (+ ``config.json`` and tokenizer files: it loads as a model spec),
* ``optimizer.pt`` and ``scheduler.pt``,
* ``rng.pt``: torch (CPU and CUDA), Python and NumPy global RNG states and the rollout generator,
* ``state.json``: the step and the prompt sampler's state (:mod:`rlvr.curriculum`).

It is written under ``step_000042.tmp-<pid>`` and renamed when complete, so a process killed
mid-write (SIGKILL included) leaves the previous checkpoint intact and a ``.tmp`` directory
that :func:`latest_checkpoint` ignores and the next save removes.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_model, save_model
from transformers import PreTrainedModel, PreTrainedTokenizerBase

PREFIX = "step_"


@dataclass
class TrainerState:
    """What, besides weights and optimiser, a run needs to continue exactly."""

    step: int  # optimiser steps completed
    sampler: dict[str, Any] = field(default_factory=dict)  # the prompt sampler's state_dict()


def checkpoint_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def rng_state(generator: torch.Generator) -> dict[str, object]:
    state: dict[str, object] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "rollout": generator.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, object], generator: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    generator.set_state(state["rollout"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    run_dir: Path,
    state: TrainerState,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    generator: torch.Generator,
    keep: int = 2,
    extra: dict[str, torch.nn.Module] | None = None,
) -> Path:
    """Write a complete checkpoint atomically and prune all but the ``keep`` newest.

    ``extra`` modules are saved as ``NAME.safetensors``: a value head, or a reference policy
    that is reset during training (ProRL) and so is not the initial model any more.
    """
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(f"{PREFIX}*.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    final = root / f"{PREFIX}{state.step:06d}"
    tmp = root / f"{final.name}.tmp-{os.getpid()}"
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    torch.save(rng_state(generator), tmp / "rng.pt")
    for name, module in (extra or {}).items():
        save_model(module, str(tmp / f"{name}.safetensors"))
    (tmp / "state.json").write_text(json.dumps(asdict(state)))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    done = [p for p in root.iterdir() if p.name.startswith(PREFIX) and ".tmp" not in p.name]
    return sorted(p for p in done if (p / "state.json").is_file())


def _load_weights(model: torch.nn.Module, file: Path) -> None:
    """Load a safetensors file into ``model``; tied output embeddings may be absent."""
    missing, unexpected = load_model(model, str(file), strict=False)
    config = getattr(model, "config", None)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise ValueError(
            f"checkpoint {file} does not match the model: missing {sorted(set(missing) - tied)}, "
            f"unexpected {sorted(unexpected)}"
        )


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load_checkpoint(
    path: Path,
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    generator: torch.Generator,
    extra: dict[str, torch.nn.Module] | None = None,
) -> TrainerState:
    """Restore weights, optimiser, scheduler and RNG states in place; return the trainer state.

    ``extra`` modules are restored from ``NAME.safetensors`` when the checkpoint holds them.
    """
    _load_weights(model, path / "model.safetensors")
    for name, module in (extra or {}).items():
        if (path / f"{name}.safetensors").is_file():
            _load_weights(module, path / f"{name}.safetensors")
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=False))
    set_rng_state(torch.load(path / "rng.pt", weights_only=False), generator)
    saved = json.loads((path / "state.json").read_text())
    if "sampler_position" in saved:  # checkpoints written before curricula: a sequential sampler
        saved["sampler"] = {"position": saved.pop("sampler_position")}
    return TrainerState(**saved)
