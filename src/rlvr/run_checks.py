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
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr.errors import RunDirError

SMALL_FILES_BYTES = 2**20
"""A checkpoint's files besides its tensors and tokenizer: the random streams (rng.pt, about
20 KB), the scheduler, the trainer state, the configs and the checksums (a few KB each)."""
TENSOR_ENTRY_BYTES = 2**10
"""Per stored tensor, its entries in model.safetensors' header and optimizer.pt's pickle (about
100 B and 850 B measured)."""


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


def checkpoint_bytes(weights: int, trained: int, tensors: int, tokenizer: int) -> int:
    """The bytes one checkpoint takes, at most: ``weights`` bytes of stored weights, AdamW's two
    moments of the ``trained`` bytes of trained parameters, the ``tokenizer``'s files, and the
    margin for the rest: :data:`TENSOR_ENTRY_BYTES` for each of the ``tensors`` stored and
    :data:`SMALL_FILES_BYTES`. The batches an asynchronous run has sampled ahead (pending.pt)
    grow with the run and are not counted."""
    return weights + 2 * trained + tokenizer + tensors * TENSOR_ENTRY_BYTES + SMALL_FILES_BYTES


def tokenizer_bytes(tokenizer: Any) -> int:
    """The bytes of the files a checkpoint saves of ``tokenizer`` (saved once to a temporary
    directory and measured)."""
    with tempfile.TemporaryDirectory() as directory:
        tokenizer.save_pretrained(directory)
        return sum(f.stat().st_size for f in Path(directory).rglob("*") if f.is_file())


def check_run_start(
    cfg: Any, run_dir: Path, learner_sizes: Callable[[], tuple[int, int, int]], tokenizer: Any
) -> None:
    """Before a run's first step: RunDirError unless the run directory and its ``checkpoints``
    directory can be written and (when the run writes checkpoints) their disk has room for one
    (:func:`checkpoint_bytes` of the learner's ``learner_sizes()``: bytes of weights stored,
    bytes of trained parameters, stored tensors; :func:`rlvr.trainer.checkpoint_size.learner_bytes`)
    and the ``tokenizer``)."""
    run_dir = Path(run_dir)
    check_writable(run_dir)
    checkpoints = run_dir / "checkpoints"
    if checkpoints.exists():
        check_writable(checkpoints, "checkpoint directory")
    if cfg.checkpoint.every or cfg.checkpoint.save_final:
        weights, trained, tensors = learner_sizes()
        check_checkpoint_room(checkpoints, weights, trained, tensors, tokenizer_bytes(tokenizer))


def check_checkpoint_room(
    checkpoints: Path, weights: int, trained: int, tensors: int, tokenizer: int
) -> None:
    """RunDirError unless the disk of ``checkpoints`` has room for one checkpoint
    (:func:`checkpoint_bytes`) of a policy with ``weights`` bytes of weights, ``trained`` bytes
    of trained parameters and ``tensors`` stored tensors, and a ``tokenizer`` of that many
    bytes."""
    need = checkpoint_bytes(weights, trained, tensors, tokenizer)
    free = free_bytes(_existing(checkpoints))
    if free < need:
        raise RunDirError(
            f"not enough disk space for a checkpoint in {checkpoints}: one needs about "
            f"{_gb(need)} ({_gb(weights)} of weights + {_gb(2 * trained)} of AdamW state + "
            f"{_gb(need - weights - 2 * trained)} of tokenizer and other files), the disk has "
            f"{_gb(free)} free. Free some space or choose another "
            "logging.run_dir (checkpoint.every: 0 with checkpoint.save_final: false writes none)"
        )
