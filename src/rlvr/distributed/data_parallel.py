"""The learners' data-parallel group: M processes train one policy on one batch.

Every learner gets the whole batch (advantages need whole groups, aggregation needs the global
token and sequence counts of each minibatch, docs/design.md "Aggregation"), so each computes the
same advantages and normalisers; each then runs the micro-batches of its slice of every
minibatch, and the gradients are summed (one all-reduce of the flattened gradients per optimizer
step). A loss normalised by global counts summed over ranks is one process's loss, so M learners
give one process's gradient, to rounding.

Why not ``DistributedDataParallel``: DDP all-reduces inside ``backward`` and needs every rank to
run the same number of backward passes, while a learner's share of a minibatch may be empty
(rows whose advantages are all zero are skipped) or uneven. One explicit all-reduce per step is
the same arithmetic and has no such constraint.
"""

from __future__ import annotations

import datetime
from typing import Any

import torch
import torch.distributed as dist


class DataParallel:
    """This process's place in the learners' ``torch.distributed`` group (the default group,
    gloo on CPU, NCCL on GPU): ``rank`` of ``world``; ``sharded``: the policy is sharded over
    the group (:mod:`rlvr.distributed.sharding`), whose backward passes reduce its gradients."""

    def __init__(self, rank: int, world: int, sharded: bool = False) -> None:
        self.rank, self.world, self.sharded = rank, world, sharded

    @staticmethod
    def init(
        address: str | None, rank: int, world: int, backend: str, timeout_s: float
    ) -> DataParallel:
        """Join (or start, rank 0) the group at ``tcp://address`` (None: where torchrun's
        environment says, ``MASTER_ADDR:MASTER_PORT``)."""
        dist.init_process_group(
            backend,
            init_method="env://" if address is None else f"tcp://{address}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        return DataParallel(rank, world)

    def share(self, rows: torch.Tensor) -> torch.Tensor:
        """This rank's contiguous slice of ``rows`` (sizes differ by at most one)."""
        return rows.tensor_split(self.world)[self.rank]

    def most(self, count: int) -> int:
        """The largest ``count`` of any rank."""
        value = torch.tensor([count])
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return int(value.item())

    def all_reduce_sum(self, tensors: list[torch.Tensor]) -> None:
        """Sum ``tensors`` over the group, in place."""
        for t in tensors:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)

    def all_reduce_gradients(
        self, params: list[torch.nn.Parameter], skip: tuple[str, str, float] | None
    ) -> tuple[str, str, float] | None:
        """Sum the gradients of ``params`` over the group (a rank without one adds zeros; a
        sharded learner's are summed by its backward already); if any rank hit a
        non-finite quantity (``skip``), return the lowest rank's on every rank and leave the
        gradients alone."""
        flag = torch.tensor([0.0 if skip is None else 1.0])
        dist.all_reduce(flag, op=dist.ReduceOp.SUM)
        if flag.item() > 0:
            found: list[Any] = [None] * self.world
            dist.all_gather_object(found, skip)
            return next(s for s in found if s is not None)
        if self.sharded or not params:  # every trained tensor a shard: its backward summed them
            return None
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p, g in zip(params, grads, strict=True):
            p.grad = flat[offset : offset + g.numel()].view_as(g)  # views of one buffer
            offset += g.numel()
        return None

    def merge_averages(self, sums: dict[str, float], counts: dict[str, float]) -> None:
        """Pool the ranks' running metric sums and counts (in place): the metrics of the
        update are means over every rank's micro-batches."""
        gathered: list[Any] = [None] * self.world
        dist.all_gather_object(gathered, (sums, counts))
        sums.clear()
        counts.clear()
        for other_sums, other_counts in gathered:
            for key, value in other_sums.items():
                sums[key] = sums.get(key, 0.0) + value
                counts[key] = counts.get(key, 0.0) + other_counts[key]
