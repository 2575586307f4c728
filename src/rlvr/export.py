"""``rlvr export RUN OUT``: a run's trained policy as a directory other tools load.

* a LoRA run (its checkpoints hold the adapter in PEFT's format): the adapter
  (``adapter_config.json`` + ``adapter_model.safetensors`` + the tokenizer;
  ``PeftModel.from_pretrained(base, OUT)`` loads it; its ``base_model_name_or_path`` is the
  run's ``model.name``), or with ``merge`` a plain Hugging Face model directory with the adapter
  merged into the base weights by PEFT (``merge_and_unload``): ``config.json`` +
  ``model.safetensors`` + tokenizer, which transformers and vLLM load like any model;
* a full fine-tuning run: its plain model directory (``merge`` changes nothing); a sharded
  run's (``train.sharding: fsdp``) consolidated from its ranks' shards in this process (a
  sharded LoRA run's checkpoint holds its adapter whole, exported as above).

RUN is a run directory (its latest complete checkpoint) or one checkpoint directory; the
checkpoint is verified against its checksums first.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from rlvr import adapters
from rlvr.checkpoint import CheckpointError, latest_checkpoint, verify_checkpoint
from rlvr.distributed import is_sharded_checkpoint
from rlvr.distributed.sharded_checkpoint import consolidate
from rlvr.errors import RlvrError
from rlvr.models import adapter_base, load_model, load_tokenizer

MODEL_FILES = ("model.safetensors", "config.json", "generation_config.json")
"""The files of a plain model checkpoint that belong to the model (the rest is trainer state)."""


class ExportError(RlvrError, ValueError):
    """A run or checkpoint that cannot be exported, or an output directory in the way."""


@dataclass(frozen=True)
class Exported:
    """What :func:`export` wrote: the directory, the checkpoint it came from, and its kind
    (``adapter``, ``merged`` or ``model``)."""

    out: Path
    checkpoint: Path
    kind: str


def find_checkpoint(run: Path) -> Path:
    """The checkpoint of ``run``: itself when it is one, else the run's latest complete one."""
    run = Path(run)
    if (run / "state.json").is_file():
        return run
    found = latest_checkpoint(run)
    if found is None:
        raise ExportError(
            f"{run} is neither a run directory with a complete checkpoint nor a checkpoint "
            "directory (RUN/checkpoints/step_NNNNNN)"
        )
    return found


def export(run: Path, out: Path, merge: bool = False, overwrite: bool = False) -> Exported:
    """Write the policy of ``run`` (a run or checkpoint directory) to ``out`` (see the module
    docstring); written under a temporary name and renamed, so ``out`` is never half a model."""
    checkpoint = find_checkpoint(run)
    try:
        verify_checkpoint(checkpoint)
    except CheckpointError as err:
        raise ExportError(f"cannot export {checkpoint}: {err}") from None
    out = Path(out)
    if out.exists() and not overwrite:
        raise ExportError(f"{out} exists; choose another directory or pass --overwrite")
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    lora = adapter_base(checkpoint) is not None  # a sharded LoRA run's has its adapter whole
    if is_sharded_checkpoint(checkpoint) and not lora:  # its shards consolidated
        consolidate(checkpoint, tmp)
        kind = "model"
    elif lora and merge:
        _merged(checkpoint, tmp)
        kind = "merged"
    else:
        tmp.mkdir(parents=True)
        keep = (adapters.ADAPTER_CONFIG, adapters.ADAPTER_WEIGHTS) if lora else MODEL_FILES
        for file in checkpoint.iterdir():
            if file.name in keep:
                shutil.copy2(file, tmp / file.name)
        load_tokenizer(str(checkpoint)).save_pretrained(tmp)
        kind = "adapter" if lora else "model"
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return Exported(out, checkpoint, kind)


def _merged(checkpoint: Path, out: Path) -> None:
    """The base model with the checkpoint's adapter merged by PEFT, saved as a plain model."""
    from peft import PeftModel

    base = load_model(adapter_base(checkpoint), torch.float32)
    merged = PeftModel.from_pretrained(base, str(checkpoint)).merge_and_unload()
    merged.save_pretrained(out, safe_serialization=True)
    load_tokenizer(str(checkpoint)).save_pretrained(out)
