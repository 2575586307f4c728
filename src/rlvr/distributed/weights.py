"""Publishing the learner's weights to the rollout workers.

After each optimizer step learner rank 0 sends the policy's parameters to every rollout worker
in a ``torch.distributed`` broadcast group of its own (rank 0 = the learner, ranks 1..K = the
workers; gloo on CPU, NCCL on GPU), in flat buckets of one dtype (few large messages instead of
one per tensor). The group is a standalone process group over its own TCP store, apart from the
learners' group, so it can be formed again when a worker is replaced; the Ray object store
(``distributed.weight_sync: object_store``) is the fallback. Every publication carries the policy
version, which the workers record.
"""

from __future__ import annotations

import datetime
import socket
from collections.abc import Iterator

import torch
import torch.distributed as dist

BUCKET_BYTES = 256 << 20
"""Largest message of a broadcast: 256 MiB of parameters."""


def free_port() -> int:
    """A TCP port free on this machine now."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def buckets(tensors: list[torch.Tensor], limit: int = BUCKET_BYTES) -> list[list[int]]:
    """Indices of ``tensors`` grouped in order into runs of one dtype and at most ``limit``
    bytes (a larger tensor is a bucket of its own)."""
    out: list[list[int]] = []
    size, dtype = 0, None
    for i, t in enumerate(tensors):
        nbytes = t.numel() * t.element_size()
        if not out or t.dtype != dtype or size + nbytes > limit:
            out.append([])
            size, dtype = 0, t.dtype
        out[-1].append(i)
        size += nbytes
    return out


def whole_buckets(tensors: list[torch.Tensor]) -> Iterator[list[torch.Tensor]]:
    """``tensors`` whole, bucket by bucket (:func:`buckets`). The shards of a sharded policy are
    gathered from every rank when their bucket is due, so no rank holds more than one bucket
    (about one decoder layer) beyond its shards; every learner rank iterates it in step (the
    gathers are collectives), rank 0 sending each bucket on."""
    from rlvr.distributed.sharding import full  # DTensor's import: only where buckets go out

    for index in buckets(tensors):
        yield [full(tensors[i].detach()) for i in index]


class WeightGroup:
    """One generation of the broadcast group: ``rank`` of ``size``, rank 0 hosting the store at
    ``host:port``. Forming it blocks until every member joined (``timeout_s``)."""

    def __init__(self, host: str, port: int, rank: int, size: int, timeout_s: float) -> None:
        timeout = datetime.timedelta(seconds=timeout_s)
        store = dist.TCPStore(host, port, size, rank == 0, timeout=timeout)
        self.rank = rank
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            options = dist.ProcessGroupNCCL.Options()
            self.group = dist.ProcessGroupNCCL(store, rank, size, options)
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.group = dist.ProcessGroupGloo(store, rank, size, timeout)
            self.device = torch.device("cpu")

    def broadcast(self, tensors: list[torch.Tensor]) -> None:
        """Rank 0 sends ``tensors`` (a sharded policy's: gathered bucket by bucket with the
        other learners, :func:`whole_buckets`); the others receive into theirs (same shapes and
        dtypes, in the same order), bucket by bucket."""
        options = dist.BroadcastOptions()
        options.rootRank = 0
        whole = whole_buckets(tensors) if self.rank == 0 else None
        for index in buckets(tensors):
            if whole is not None:
                flat = torch.cat([t.reshape(-1) for t in next(whole)]).to(self.device)
            else:  # a buffer to receive into
                size = sum(tensors[i].numel() for i in index)
                flat = torch.empty(size, dtype=tensors[index[0]].dtype, device=self.device)
            self.group.broadcast([flat], options).wait()
            if self.rank != 0:
                offset = 0
                for i in index:
                    n = tensors[i].numel()
                    with torch.no_grad():
                        tensors[i].copy_(flat[offset : offset + n].view_as(tensors[i]))
                    offset += n


def named_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    """The parameters a publication carries, in a fixed order (names sorted): the trained ones
    (every weight, or a LoRA policy's adapter only: its frozen base never changes)."""
    return [p for _, p in sorted(module.named_parameters()) if p.requires_grad]
