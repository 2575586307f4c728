"""Atomic checkpoints and exact resume.

A checkpoint is a directory ``RUN/checkpoints/step_000042`` holding

* ``model.safetensors`` (+ ``config.json`` and tokenizer files: it loads as a model spec), or
  for a LoRA policy its adapter in PEFT's format (``adapter_config.json`` +
  ``adapter_model.safetensors``, naming the base model: it loads as a model spec too, and
  ``PeftModel.from_pretrained`` loads it),
* ``optimizer.pt`` and ``scheduler.pt``,
* ``rng.pt``: torch (CPU and CUDA), Python and NumPy global RNG states and the rollout generator,
* ``state.json``: the step, the policy version and the prompt sampler's state
  (:mod:`rlvr.curriculum`),
* ``pending.pt`` (asynchronous runs, ``rollout.max_staleness`` >= 1): the batches already
  sampled for the next steps, with the policy versions that sampled them,
* ``checksums.json``: the SHA-256 of every other file, checked before a resume loads them.

A sharded policy's checkpoint (``train.sharding: fsdp``) holds ``config.json`` and
``shards/`` (each rank's shards of the weights, the optimizer and the modules beside them,
:mod:`rlvr.distributed.sharded_checkpoint`) instead of the weight and optimizer files.

It is written under ``step_000042.tmp-<pid>`` and renamed when complete, so a process killed
mid-write (SIGKILL included) leaves the previous checkpoint intact and a ``.tmp`` directory
that :func:`latest_checkpoint` ignores and the next save removes. A checkpoint damaged later
(truncated weights, an edited ``state.json``, a checksum mismatch) is skipped by
:func:`load_latest_good`, which falls back to the previous one and says which file was bad.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, load_model, save_model
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr import adapters
from rlvr.distributed import is_sharded_checkpoint, is_sharded_model, local_part
from rlvr.errors import RlvrError

PREFIX = "step_"
CHECKSUMS = "checksums.json"


class CheckpointError(RlvrError):
    """A checkpoint that cannot be written (non-finite weights) or loaded (damaged files)."""


@dataclass
class TrainerState:
    """What, besides weights and optimiser, a run needs to continue exactly."""

    step: int  # optimiser steps completed
    sampler: dict[str, Any] = field(default_factory=dict)  # the prompt sampler's state_dict()
    skipped_nonfinite: int = 0  # steps skipped for NaN/inf rewards, loss or gradients so far
    data_sha256: str | None = None  # rlvr.data.data_fingerprint of a file or dataset task
    policy_version: int | None = None  # optimizer updates so far (None: = step, older runs)
    minibatches: int | None = None  # the learner's minibatches so far (None: older runs)
    replay: dict[str, Any] = field(default_factory=dict)  # the replay buffer's state_dict()
    stages: dict[str, Any] = field(default_factory=dict)  # each stage state's, by stage name
    temperature: list[float] | None = None  # HAPO's adaptive temperature statistics in use


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
    pending: list[Any] | None = None,
) -> Path:
    """Write a complete checkpoint atomically and prune all but the ``keep`` newest.

    ``extra`` modules are saved as ``NAME.safetensors``: a value head, or a reference policy
    that is reset during training (ProRL) and so is not the initial model any more;
    ``pending``: batches sampled ahead (asynchronous rollouts), pickled to ``pending.pt``. Raises
    :class:`CheckpointError` (and writes nothing) if a weight or optimiser state is NaN/inf.

    A policy sharded over the default process group (a collective then: every rank calls it):
    each rank writes its shards of the weights, the optimizer and ``extra``
    (:mod:`rlvr.distributed.sharded_checkpoint`), rank 0 the model's config and the trainer's
    files, then the checksums, and renames the directory when every rank is done.
    """
    extra = extra or {}
    sharded = is_sharded_model(model)
    bad = first_nonfinite_state(model, optimizer, extra)
    if sharded:  # any rank's: every rank writes nothing
        bad = _first_of_ranks(bad)
    if bad is not None:
        raise CheckpointError(f"not writing checkpoint step {state.step}: {bad} is not finite")

    def trainer_files(tmp: Path) -> None:
        _trainer_files(tmp, state, tokenizer, scheduler, generator, pending)

    if sharded:
        return _save_sharded(run_dir, state.step, keep, model, optimizer, extra, trainer_files)
    final, tmp = _begin(run_dir, state.step, os.getpid())
    if adapters.has_lora(model):
        adapters.save_adapter(model, tmp)
    else:
        model.save_pretrained(tmp, safe_serialization=True)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    for name, module in extra.items():
        save_model(module, str(tmp / f"{name}.safetensors"))
    trainer_files(tmp)
    return _finish(run_dir, tmp, final, keep)


def _first_of_ranks(found: str | None) -> str | None:
    """The lowest rank's ``found`` that is not None, on every rank."""
    import torch.distributed as dist

    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, found)
    return next((f for f in everyone if f is not None), None)


def _save_sharded(
    run_dir: Path,
    step: int,
    keep: int,
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    extra: dict[str, torch.nn.Module],
    trainer_files: Callable[[Path], None],
) -> Path:
    """A sharded policy's checkpoint (:func:`save_checkpoint`): the directory rank 0 names,
    every rank's shards, rank 0's files (with a LoRA adapter's whole files, as an unsharded
    run writes them), then checksummed and renamed by rank 0."""
    import torch.distributed as dist

    from rlvr.distributed.sharded_checkpoint import save_shards
    from rlvr.distributed.sharding import full

    rank = dist.get_rank()
    names: list[Any] = [os.getpid()]
    dist.broadcast_object_list(names, src=0)  # the directory rank 0 names
    final, tmp = _begin(run_dir, step, names[0], create=rank == 0)
    dist.barrier()
    save_shards(tmp, model, optimizer, extra)
    adapter = None
    if adapters.has_lora(model):  # gathered whole by every rank: export and eval read it
        adapter = {k: full(v) for k, v in adapters.adapter_state(model).items()}
    if rank == 0:
        model.config.save_pretrained(tmp)
        if adapter is not None:
            adapters.save_adapter(model, tmp, tensors=adapter)
        trainer_files(tmp)
    dist.barrier()  # every rank's shards are written
    if rank == 0:
        _finish(run_dir, tmp, final, keep)
    dist.barrier()  # the checkpoint is complete for every rank
    return final


def _begin(run_dir: Path, step: int, pid: int, create: bool = True) -> tuple[Path, Path]:
    """The final and the temporary directory of step ``step``'s checkpoint; ``create``: make
    the temporary one, after removing partial writes of earlier runs."""
    root = checkpoint_dir(run_dir)
    final = root / f"{PREFIX}{step:06d}"
    tmp = root / f"{final.name}.tmp-{pid}"
    if create:
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(f"{PREFIX}*.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir()
    return final, tmp


def _trainer_files(
    tmp: Path,
    state: TrainerState,
    tokenizer: PreTrainedTokenizerBase,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    generator: torch.Generator,
    pending: list[Any] | None,
) -> None:
    """The tokenizer, schedule, RNG states, batches sampled ahead and ``state.json``."""
    tokenizer.save_pretrained(tmp)
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    torch.save(rng_state(generator), tmp / "rng.pt")
    if pending:
        torch.save(pending, tmp / "pending.pt")
    (tmp / "state.json").write_text(json.dumps(asdict(state)))


def _finish(run_dir: Path, tmp: Path, final: Path, keep: int) -> Path:
    """Checksum ``tmp``, rename it to ``final`` and prune all but the ``keep`` newest."""
    (tmp / CHECKSUMS).write_text(json.dumps(_checksums(tmp), indent=1))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def first_nonfinite_state(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    extra: dict[str, torch.nn.Module] | None = None,
) -> str | None:
    """The name of the first parameter or optimiser state tensor holding NaN/inf, else None
    (of a sharded model: of this rank's shards)."""
    modules = {"": model, **{f"{k}.": m for k, m in (extra or {}).items()}}
    for prefix, module in modules.items():
        for name, param in module.named_parameters():
            if not torch.isfinite(local_part(param)).all():
                return f"weight {prefix}{name}"
    if optimizer is not None:
        for index, values in enumerate(optimizer.state.values()):
            for key, value in values.items():
                if torch.is_tensor(value) and not torch.isfinite(local_part(value)).all():
                    return f"optimizer state {key} of parameter {index}"
                if isinstance(value, float) and not math.isfinite(value):
                    return f"optimizer state {key} of parameter {index}"
    return None


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _checksums(directory: Path) -> dict[str, str]:
    """SHA-256 of every file of a checkpoint directory, by path relative to it (a sharded
    checkpoint's ``shards/`` included; checksums.json itself excluded)."""
    return {
        p.relative_to(directory).as_posix(): _sha256(p)
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != CHECKSUMS
    }


def verify_checkpoint(path: Path) -> None:
    """Raise :class:`CheckpointError` naming the first file of ``path`` that is missing or whose
    SHA-256 differs from ``checksums.json`` (checkpoints written before checksums pass)."""
    listed = path / CHECKSUMS
    if not listed.is_file():
        return
    try:
        expected = json.loads(listed.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{listed} is unreadable ({err})") from None
    for name, digest in expected.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"{file} is missing")
        if _sha256(file) != digest:
            raise CheckpointError(f"{file} does not match its checksum (damaged or edited)")


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    done = [p for p in root.iterdir() if p.name.startswith(PREFIX) and _step_of(p) is not None]
    return sorted(p for p in done if (p / "state.json").is_file())


def _step_of(path: Path) -> int | None:
    """The step of a checkpoint directory named ``step_000042`` (None for any other name:
    ``.tmp-<pid>`` partial writes, ``.suspect`` set-aside checkpoints)."""
    digits = path.name[len(PREFIX) :]
    return int(digits) if digits.isdigit() else None


def set_aside(run_dir: Path, from_step: int) -> list[Path]:
    """Rename the checkpoints of step ``from_step`` and later to ``step_NNNNNN.suspect`` (kept
    for inspection, never loaded by a resume); returns their new paths."""
    moved = []
    for path in list_checkpoints(run_dir):
        if _step_of(path) >= from_step:
            target = path.with_name(path.name + ".suspect")
            if target.exists():
                shutil.rmtree(target)
            path.rename(target)
            moved.append(target)
    return moved


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


def _whole_weights(
    path: Path, model: torch.nn.Module, extra: dict[str, torch.nn.Module]
) -> dict[str, dict[str, torch.Tensor]]:
    """An unsharded checkpoint's weights by module, keyed by ``model``'s parameter names: the
    policy's (a LoRA policy's adapter only; the tied output layer left out) and each of
    ``extra``'s the checkpoint holds."""
    if adapters.has_lora(model):
        names = {adapters.peft_name(n): n for n in adapters.adapter_parameters(model)}
        saved = load_file(str(path / adapters.ADAPTER_WEIGHTS))
        if set(saved) != set(names):
            raise CheckpointError(f"the adapter of {path} does not fit the model's")
        policy = {names[k]: v for k, v in saved.items()}
    else:
        policy = load_file(str(path / "model.safetensors"))
    out = {"policy": policy}
    for name in extra:
        if (path / f"{name}.safetensors").is_file():
            out[name] = load_file(str(path / f"{name}.safetensors"))
    return out


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

    ``extra`` modules are restored from ``NAME.safetensors`` when the checkpoint holds them. A
    sharded checkpoint (:mod:`rlvr.distributed.sharded_checkpoint`) is read into a policy
    sharded over any number of ranks (a collective then: every rank calls it). The optimizer
    keeps its own kernel choice (fused or not, :func:`~rlvr.trainer.build.fused_adamw`): a
    checkpoint made on another device or setting resumes with this run's.
    """
    kernels = [(g.get("fused"), g.get("foreach")) for g in optimizer.param_groups]
    if is_sharded_checkpoint(path):
        from rlvr.distributed.sharded_checkpoint import load_shards

        load_shards(path, model, optimizer, extra or {})
    elif is_sharded_model(model):  # an unsharded run's, resumed sharded
        from rlvr.distributed.sharded_checkpoint import load_whole

        weights = _whole_weights(path, model, extra or {})
        saved = torch.load(path / "optimizer.pt", weights_only=False)
        load_whole(model, optimizer, extra or {}, weights, saved)
    else:
        if adapters.has_lora(model):
            adapters.load_adapter_weights(model, path / adapters.ADAPTER_WEIGHTS)
        else:
            _load_weights(model, path / "model.safetensors")
        for name, module in (extra or {}).items():
            if (path / f"{name}.safetensors").is_file():
                _load_weights(module, path / f"{name}.safetensors")
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    for group, (fused, foreach) in zip(optimizer.param_groups, kernels, strict=True):
        group["fused"], group["foreach"] = fused, foreach  # this run's, not the saved ones
    scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=False))
    set_rng_state(torch.load(path / "rng.pt", weights_only=False), generator)
    saved = json.loads((path / "state.json").read_text())
    if "sampler_position" in saved:  # checkpoints written before curricula: a sequential sampler
        saved["sampler"] = {"position": saved.pop("sampler_position")}
    return TrainerState(**saved)


def load_pending(path: Path) -> list[Any]:
    """The batches a checkpoint holds sampled ahead (empty when it has none)."""
    file = Path(path) / "pending.pt"
    return torch.load(file, weights_only=False) if file.is_file() else []


def load_latest_good(
    run_dir: Path,
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    generator: torch.Generator,
    extra: dict[str, torch.nn.Module] | None = None,
    warn: Callable[[str], None] = print,
) -> tuple[Path, TrainerState] | None:
    """Load the newest checkpoint of ``run_dir`` that verifies and loads, newest first; each one
    skipped is reported through ``warn`` with the file that failed. None if the run has no
    checkpoint; :class:`CheckpointError` if it has some and none loads."""
    found = list_checkpoints(run_dir)
    for path in reversed(found):
        try:
            verify_checkpoint(path)
            return path, load_checkpoint(path, model, optimizer, scheduler, generator, extra)
        except Exception as err:  # any damage: a bad file must not end the resume
            warn(f"checkpoint {path} is damaged ({err}); falling back to the previous one")
    if found:
        raise CheckpointError(
            f"no checkpoint of {run_dir} could be loaded ({len(found)} damaged); start a new "
            "run or restore a checkpoint directory"
        )
    return None
