"""The weights and optimizer state of a sharded policy in a checkpoint: every rank writes its own
shards through ``torch.distributed.checkpoint`` (DCP) into ``CHECKPOINT/shards/`` (one
``__<rank>_0.distcp`` file per rank and a ``.metadata`` index written by rank 0), never
gathering the model. Parameters and AdamW moments are keyed by their names (not by position),
and DCP reshards on load, so a run resumes on any number of ranks: 2 -> 4 -> 1 reads the same
files. :func:`consolidate` turns the shards into a plain Hugging Face directory in one process
(no process group), for ``rlvr export``, ``rlvr eval`` and ``model.name``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from rlvr.distributed import SHARDS


def _state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, modules: dict[str, torch.nn.Module]
) -> dict[str, Any]:
    """What the shards hold: the model's and the optimizer's state keyed by parameter names
    (a sharded model's values are DTensor shards), and each of ``modules``' state dicts."""
    model_state, optim_state = get_state_dict(model, optimizer)
    state: dict[str, Any] = {"model": model_state, "optimizer": optim_state}
    for name, module in modules.items():
        state[f"module.{name}"] = module.state_dict()
    return state


def save_shards(
    directory: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    modules: dict[str, torch.nn.Module],
) -> None:
    """Write this rank's shards of ``model``, ``optimizer`` and ``modules`` under
    ``directory/shards`` (a collective: every rank of the group calls it)."""
    dcp.save(_state(model, optimizer, modules), checkpoint_id=Path(directory) / SHARDS)


def load_shards(
    directory: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    modules: dict[str, torch.nn.Module],
) -> None:
    """Read ``directory/shards`` into ``model``, ``optimizer`` and ``modules`` in place, resharded
    to this group's ranks (a collective; also in one process without a group)."""
    state = _state(model, optimizer, modules)
    dcp.load(state, checkpoint_id=Path(directory) / SHARDS)
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optimizer"],
    )
    for name, module in modules.items():
        module.load_state_dict(state[f"module.{name}"])


def consolidate(directory: Path, out: Path) -> None:
    """Write the policy of the sharded checkpoint ``directory`` to ``out`` as a plain Hugging
    Face model directory (``config.json``, ``model.safetensors``, the tokenizer), in this
    process (no process group): the model is built from the checkpoint's config, the shards
    read into it whole."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(directory)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=Path(directory) / SHARDS, no_dist=True)
    model.load_state_dict(state["model"])
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(directory).save_pretrained(out)
