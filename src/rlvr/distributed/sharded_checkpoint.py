"""The weights and optimizer state of a sharded policy in a checkpoint: every rank writes its own
shards through ``torch.distributed.checkpoint`` (DCP) into ``CHECKPOINT/shards/`` (one
``__<rank>_0.distcp`` file per rank and a ``.metadata`` index written by rank 0), never
gathering the model. Parameters and AdamW moments are keyed by their names (not by position),
and DCP reshards on load, so a run resumes on any number of ranks: 2 -> 4 -> 1 reads the same
files; an unsharded run's checkpoint is read whole into the shards (:func:`load_whole`).
:func:`consolidate` turns the shards into a plain Hugging Face directory in one process (no
process group), for ``rlvr export``, ``rlvr eval`` and ``model.name``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

from rlvr.distributed import SHARDS

POLICY = "policy"
"""The policy's name in the shards' model state (beside the modules the optimizer also steps)."""


def _trained(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, modules: dict[str, torch.nn.Module]
) -> tuple[torch.nn.Module, dict[str, torch.nn.Module]]:
    """The modules whose parameters ``optimizer`` steps as one module keyed by name (the policy
    under :data:`POLICY`, and e.g. a value head beside it), and the other ``modules``."""
    stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
    beside = {n: m for n, m in modules.items() if any(id(p) in stepped for p in m.parameters())}
    others = {n: m for n, m in modules.items() if n not in beside}
    return torch.nn.ModuleDict({POLICY: model, **beside}), others


def _state(
    trained: torch.nn.Module, optimizer: torch.optim.Optimizer, others: dict[str, torch.nn.Module]
) -> dict[str, Any]:
    """What the shards hold: the ``trained`` modules' (:func:`_trained`) and the optimizer's
    state keyed by parameter names (``policy.<name>``, ``value_head.<name>``; a sharded
    module's values are DTensor shards), and each of the ``others``' state dict."""
    model_state, optim_state = get_state_dict(trained, optimizer)
    state: dict[str, Any] = {"model": model_state, "optimizer": optim_state}
    for name, module in others.items():
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
    trained, others = _trained(model, optimizer, modules)
    dcp.save(_state(trained, optimizer, others), checkpoint_id=Path(directory) / SHARDS)


def load_shards(
    directory: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    modules: dict[str, torch.nn.Module],
) -> None:
    """Read ``directory/shards`` into ``model``, ``optimizer`` and ``modules`` in place, resharded
    to this group's ranks (a collective; also in one process without a group)."""
    trained, others = _trained(model, optimizer, modules)
    state = _state(trained, optimizer, others)
    alone = not torch.distributed.is_initialized()  # one process: no group to load over
    dcp.load(state, checkpoint_id=Path(directory) / SHARDS, no_dist=alone)
    set_state_dict(
        trained,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optimizer"],
    )
    for name, module in others.items():
        module.load_state_dict(state[f"module.{name}"])


def load_whole(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    modules: dict[str, torch.nn.Module],
    weights: dict[str, dict[str, torch.Tensor]],
    saved_optimizer: dict[str, Any],
) -> None:
    """Read an unsharded checkpoint into the sharded ``model``, ``optimizer`` and ``modules``
    (a collective: every rank calls it with the same whole tensors and keeps its shards):
    ``weights`` by module (``policy`` and ``modules``' names, each keyed by the module's
    parameter names; a LoRA policy's adapter only), ``saved_optimizer`` the optimizer's
    ``state_dict()`` as one process saved it (its parameters by position, in the order this
    optimizer holds them)."""
    trained, others = _trained(model, optimizer, modules)
    state = {f"{o}.{k}": v for o in trained for k, v in weights.get(o, {}).items()}
    unexpected = sorted(set(state) - set(trained.state_dict()))
    if unexpected:
        raise ValueError(f"the checkpoint does not fit the model: unexpected {unexpected[:3]}")
    names = {id(p): n for n, p in trained.named_parameters()}
    fqn: dict[int, str] = {}
    groups = zip(saved_optimizer["param_groups"], optimizer.param_groups, strict=True)
    for saved, group in groups:  # the same parameters, in the same order
        fqn.update({i: names[id(p)] for i, p in zip(saved["params"], group["params"], strict=True)})
    optim_state = {
        "state": {fqn[i]: moments for i, moments in saved_optimizer["state"].items()},
        "param_groups": [
            {
                **{k: v for k, v in g.items() if k != "params"},
                "params": [fqn[i] for i in g["params"]],
            }
            for g in saved_optimizer["param_groups"]
        ],
    }
    whole = StateDictOptions(full_state_dict=True, strict=False)
    set_state_dict(
        trained, optimizer, model_state_dict=state, optim_state_dict=optim_state, options=whole
    )
    for name, module in others.items():
        if name in weights:
            set_model_state_dict(
                module, weights[name], options=StateDictOptions(full_state_dict=True)
            )


def consolidate(directory: Path, out: Path) -> None:
    """Write the policy of the sharded checkpoint ``directory`` to ``out`` as a plain Hugging
    Face model directory (``config.json``, ``model.safetensors``, the tokenizer), in this
    process (no process group): the model is built from the checkpoint's config, the shards
    read into it whole."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(directory)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    prefix = f"{POLICY}."
    state = {"model": {prefix + k: v for k, v in model.state_dict().items()}}
    dcp.load(state, checkpoint_id=Path(directory) / SHARDS, no_dist=True)
    model.load_state_dict({k.removeprefix(prefix): v for k, v in state["model"].items()})
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(directory).save_pretrained(out)
