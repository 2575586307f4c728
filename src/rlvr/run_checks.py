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


def learner_bytes(learner: Any, cfg: Any) -> tuple[int, int, int]:
    """(bytes of the weights a checkpoint stores, bytes of the parameters AdamW trains, how many
    tensors it stores) of a learner: counted on its policy and the modules it checkpoints beside
    it (``modules()``: a value head, a reference that is updated, a semi-online snapshot) in
    this process; or for Ray's learners (none here) on the meta device, the policy from the
    model's config (fp32, as the learners hold it) and those modules from the run's config
    ``cfg`` and preset (:func:`_modules_by_config`)."""
    import torch

    policy = getattr(learner, "policy", None)
    if policy is None:
        from transformers import AutoConfig, AutoModelForCausalLM

        from rlvr.models import resolve

        with torch.device("meta"):
            config = AutoConfig.from_pretrained(resolve(cfg.model.name))
            policy = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            extra, trained_extra = _modules_by_config(cfg, learner, policy)
        trained = {id(p): p for p in policy.parameters() if p.requires_grad}
        trained |= {id(p): p for m in trained_extra for p in m.parameters()}
    else:
        extra = list(learner.modules().values())
        trained = {id(p): p for g in learner.optimizer.param_groups for p in g["params"]}
    weights = {id(p): p for p in policy.parameters()}  # tied weights once
    stored = [t for m in extra for t in _stored_tensors(m)]

    def size(tensors: Any) -> int:
        return sum(t.numel() * t.element_size() for t in tensors)

    return (
        size(weights.values()) + size(stored),
        size(trained.values()),
        len(weights) + len(stored),
    )


def _stored_tensors(module: Any) -> list[Any]:
    """The tensors a checkpoint stores of ``module`` (safetensors): its parameters, tied ones
    once, and its persistent buffers."""
    kept = module.state_dict().keys()
    return [*module.parameters(), *(b for n, b in module.named_buffers() if n in kept)]


def _modules_by_config(cfg: Any, learner: Any, policy: Any) -> tuple[list[Any], list[Any]]:
    """(the modules a checkpoint stores beside ``policy``, those of them AdamW trains) as
    :meth:`rlvr.trainer.learn.Learner.modules` holds them, built from ``cfg`` and the preset
    (``learner.algo``) as :func:`rlvr.trainer.build.build_learner` builds them (on the device
    current when called): PPO's value head (trained), a full reference copy in the rollout dtype
    when it is reset or mixed (``reference_reset_every``), the semi-online snapshot
    (``sync_every`` > 1), the entropy controller's state. A LoRA policy's adapters are not
    modelled here."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr import algorithms, precision
    from rlvr.policy import ValueHead
    from rlvr.trainer.learn import PublishedCopy

    algo = learner.algo
    stored: list[Any] = []
    trained: list[Any] = []
    if algo.advantage == "gae":
        head = ValueHead(policy.config.hidden_size)
        stored.append(head)
        trained.append(head)
    if algo.needs_reference and algo.reference_reset_every and cfg.model.lora is None:
        chosen = getattr(learner, "precision", None) or {}  # what ``auto`` stood for there
        name = chosen.get("rollout.dtype", cfg.rollout.dtype)
        dtype = precision.DTYPES.get(name, torch.float32)  # unresolved auto: fp32, the most
        stored.append(AutoModelForCausalLM.from_config(policy.config, dtype=dtype))
    if algo.sync_every > 1:
        stored.append(PublishedCopy(policy))
    settings = cfg.algorithm
    if settings.entropy_target is not None:
        stored.append(
            algorithms.EntropyController(
                settings.entropy_target, settings.entropy_coef_step, settings.entropy_coef_max
            )
        )
    return stored, trained


def check_run_start(cfg: Any, run_dir: Path, learner: Any, tokenizer: Any) -> None:
    """Before a run's first step: RunDirError unless the run directory and its ``checkpoints``
    directory can be written and (when the run writes checkpoints) their disk has room for one
    (:func:`checkpoint_bytes` of the learner's parameters and the ``tokenizer``)."""
    run_dir = Path(run_dir)
    check_writable(run_dir)
    checkpoints = run_dir / "checkpoints"
    if checkpoints.exists():
        check_writable(checkpoints, "checkpoint directory")
    if cfg.checkpoint.every or cfg.checkpoint.save_final:
        weights, trained, tensors = learner_bytes(learner, cfg)
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
