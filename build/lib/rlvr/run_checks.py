"""Start-up checks of where a run writes: a run (or checkpoint) directory that cannot be written,
or a disk without room for one checkpoint, is a one-line :class:`~rlvr.errors.RunDirError`
before the first step instead of an ``OSError`` once steps have been computed (see
docs/design.md, "Errors and exit statuses").

Light on imports (no torch at module level): the command line calls :func:`check_writable`
before its slow imports.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from rlvr.errors import RunDirError

# Beyond the weights and AdamW's moments a checkpoint holds the tokenizer, the trainer state,
# the random streams and the batches sampled ahead; and the disk should not be left full.
MARGIN_BYTES = 64 * 2**20
MARGIN_FRACTION = 0.1


def free_bytes(path: Path) -> int:
    """Free bytes on the disk holding ``path`` (tests replace this)."""
    return shutil.disk_usage(path).free


def _existing(path: Path) -> Path:
    """``path``, or the nearest of its parents that exists (where creating it starts)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _probe(directory: Path) -> None:
    """Really create, write and remove a file in ``directory`` (permission bits alone do not
    tell: read-only mounts, ACLs, root)."""
    probe = directory / f".rlvr-write-test-{os.getpid()}"
    try:
        with probe.open("wb") as f:
            f.write(b"rlvr")
    finally:
        probe.unlink(missing_ok=True)


def check_writable(run_dir: Path, what: str = "run directory") -> None:
    """RunDirError unless a file can be written in ``run_dir`` or, when it does not exist yet,
    in the nearest parent it would be created in."""
    where = _existing(run_dir)
    try:
        if not where.is_dir():
            raise NotADirectoryError(f"{where} is not a directory")
        _probe(where)
    except OSError as err:
        inside = "" if where == Path(run_dir).absolute() else f" (it would be made in {where})"
        raise RunDirError(
            f"cannot write to the {what} {run_dir}{inside}: {type(err).__name__}: "
            f"{err.strerror or err}. Choose another logging.run_dir or make it writable"
        ) from None


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def checkpoint_bytes(weights: int, trained: int) -> int:
    """About how many bytes one checkpoint takes: ``weights`` bytes of stored weights, AdamW's
    two moments of the ``trained`` bytes of trained parameters, and a margin."""
    return int((weights + 2 * trained) * (1 + MARGIN_FRACTION)) + MARGIN_BYTES


def learner_bytes(learner: Any, model_spec: str) -> tuple[int, int]:
    """(bytes of the weights a checkpoint stores, bytes of the parameters AdamW trains) of a
    learner: counted on its modules in this process, or for Ray's learners (no policy here)
    from the model's config on the meta device (fp32, as the learners hold it)."""
    import torch

    policy = getattr(learner, "policy", None)
    if policy is None:
        from transformers import AutoConfig, AutoModelForCausalLM

        from rlvr.models import resolve

        with torch.device("meta"):
            config = AutoConfig.from_pretrained(resolve(model_spec))
            policy = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    stored = [policy, *getattr(learner, "modules", dict)().values()]
    weights = {id(p): p for m in stored for p in m.parameters()}  # tied weights once
    optimizer = getattr(learner, "optimizer", None)
    trained = (
        {id(p): p for group in optimizer.param_groups for p in group["params"]}
        if optimizer is not None
        else {k: p for k, p in weights.items() if p.requires_grad}
    )

    def size(params: dict[int, torch.Tensor]) -> int:
        return sum(p.numel() * p.element_size() for p in params.values())

    return size(weights), size(trained)


def check_run_start(cfg: Any, run_dir: Path, learner: Any) -> None:
    """Before a run's first step: RunDirError unless the run directory and its ``checkpoints``
    directory can be written and (when the run writes checkpoints) their disk has room for one
    (:func:`checkpoint_bytes` of the learner's parameters)."""
    run_dir = Path(run_dir)
    check_writable(run_dir)
    checkpoints = run_dir / "checkpoints"
    if checkpoints.exists():
        check_writable(checkpoints, "checkpoint directory")
    if cfg.checkpoint.every or cfg.checkpoint.save_final:
        check_checkpoint_room(checkpoints, *learner_bytes(learner, cfg.model.name))


def check_checkpoint_room(checkpoints: Path, weights: int, trained: int) -> None:
    """RunDirError unless the disk of ``checkpoints`` has room for one checkpoint of a policy
    with ``weights`` bytes of weights and ``trained`` bytes of trained parameters."""
    need = checkpoint_bytes(weights, trained)
    free = free_bytes(_existing(checkpoints))
    if free < need:
        raise RunDirError(
            f"not enough disk space for a checkpoint in {checkpoints}: one needs about "
            f"{_gb(need)} ({_gb(weights)} of weights + {_gb(2 * trained)} of AdamW state + "
            f"margin), the disk has {_gb(free)} free. Free some space or choose another "
            "logging.run_dir (checkpoint.every: 0 with checkpoint.save_final: false writes none)"
        )
