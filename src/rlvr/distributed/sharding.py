"""Fully sharded learners (FSDP2, ``torch.distributed.fsdp.fully_shard``; Zhao et al. 2023,
"PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel", arXiv:2304.11277): each
learner of the data-parallel group holds 1/M of every parameter, its gradient and its AdamW
moments; a decoder layer's full parameters exist only while it runs (all-gathered before its
forward and backward, resharded after), and its gradients are reduce-scattered to their shards.

Gradients are summed over the ranks, not averaged: a learner's loss is normalised by the
minibatch's global token and sequence counts (:mod:`rlvr.distributed.data_parallel`), so the
sum is one process's gradient. Every rank takes part in every forward and backward (the
gathers are collectives), so a learner with fewer rows than another runs padding micro-batches
with a zero loss (:meth:`rlvr.trainer.learner.Learner.micro_batches`).
"""

from __future__ import annotations

import torch
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor


def shard(
    model: torch.nn.Module, param_dtype: torch.dtype | None = None, offload: bool = False
) -> torch.nn.Module:
    """Shard ``model`` in place over the default process group, one FSDP unit per decoder layer
    (the classes a Hugging Face model lists in ``_no_split_modules``) and the rest (embeddings,
    final norm, output layer) as the root unit; gradients summed over the ranks. Build the
    optimizer after this: the parameters become :class:`DTensor` shards.

    ``param_dtype``: mixed precision, a layer's parameters gathered and computed in this dtype
    (the shards, gradients' reduction and the optimizer stay fp32); ``offload``: the shards,
    their gradients and the optimizer's moments live in CPU memory, a layer moved to the
    device for its forward and backward."""
    layers = set(getattr(model, "_no_split_modules", None) or ())
    options: dict = {}
    if param_dtype is not None:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype, reduce_dtype=torch.float32)
    if offload:
        options["offload_policy"] = CPUOffloadPolicy()
    for module in model.modules():
        if type(module).__name__ in layers:
            fully_shard(module, **options)
    fully_shard(model, **options)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_force_sum_reduction_for_comms(True)  # gloo has no pre-multiplied sum
            module.set_gradient_divide_factor(1.0)
    return model


def is_sharded(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a shard of a parameter (or gradient) of a sharded model."""
    return isinstance(tensor, DTensor)


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a shard (gathered from every rank: each must call it), or
    ``tensor`` itself when it is not sharded."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def compute_device(model: torch.nn.Module) -> torch.device:
    """Where ``model`` computes: its parameters' device, or for a sharded model the device of
    its process group's mesh (its shards may be offloaded to CPU memory)."""
    param = next(model.parameters())
    if isinstance(param, DTensor) and param.device_mesh.device_type == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return param.device
