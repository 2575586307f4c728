"""``distributed.backend: torchrun``: the learners are the processes ``torchrun`` starts on this
node (or on several, with its rendezvous), one per device; rank 0 also runs the loop, the
prompt sampler and the rollout engine, the other ranks follow it.

    torchrun --nproc-per-node 4 -m rlvr train CONFIG --set distributed.backend=torchrun

Every rank is a :class:`~rlvr.trainer.backends.ray_actors.LearnerWorker` in the process group
torchrun describes (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...). Rank 0 drives: each call of
the loop on the learners (an update, a checkpoint, a publish) is sent to the other ranks as a
command over a gloo group of its own, then run by rank 0's learner, so all ranks run the same
collectives in the same order. With ``train.sharding: fsdp`` the policy is sharded over the
ranks; without, each holds a replica and the gradients are summed (data parallel).

Rank 0's engine samples from a whole copy of the policy in the rollout dtype (``rollout.dtype``;
rank 0's scorers of the reference answer's probability read it too), which each publish fills
bucket by bucket from the learners' shards (:func:`rlvr.distributed.weights.whole_buckets`).
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from rlvr import algorithms
from rlvr.config import Config, ConfigError
from rlvr.data import limit_task_prompts
from rlvr.guards import vocabulary_size
from rlvr.models import load_tokenizer
from rlvr.progress import startup
from rlvr.trainer.backends.local import LocalRollouts, local_rollouts
from rlvr.trainer.backends.ranks import LearnerRanks, Ranks
from rlvr.trainer.backends.ray_actors import LearnerWorker
from rlvr.trainer.batch import Samples
from rlvr.trainer.build import (
    Dtypes,
    RunParts,
    build_front,
    build_sampler,
    load_policy,
    sampling_params,
)
from rlvr.trainer.collect import Collector


def rank() -> int:
    """This process's rank in torchrun's group (0 when not started by torchrun)."""
    return int(os.environ.get("RANK", "0"))


def world_size(cfg: Config) -> int:
    """torchrun's world size; ``distributed.learners`` must be it (or the default 1)."""
    world = int(os.environ.get("WORLD_SIZE", "0"))
    if not world:
        raise ConfigError(
            "distributed.backend: torchrun runs under torchrun: torchrun --nproc-per-node N "
            "-m rlvr train CONFIG"
        )
    if cfg.distributed.learners not in (1, world):
        raise ConfigError(
            f"distributed.learners is {cfg.distributed.learners} but torchrun started {world} "
            "processes: leave learners at 1 (torchrun's count is used) or make them equal"
        )
    return world


class Commands:
    """Rank 0's calls on the learners, sent to the other ranks over a gloo group of their own
    (torchrun's default group may be NCCL, which carries no Python objects)."""

    def __init__(self, timeout_s: float) -> None:
        self.group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))

    def send(self, name: str, args: tuple) -> None:
        dist.broadcast_object_list([(name, args)], src=0, group=self.group)

    def receive(self) -> tuple[str, tuple]:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]


def _start(cfg: Config) -> tuple[LearnerWorker, Commands]:
    """This process's learner rank, in torchrun's group."""
    world = world_size(cfg)
    if torch.cuda.is_available():  # one device per process: this node's LOCAL_RANK-th
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    worker = LearnerWorker(cfg.model_dump(mode="json"), rank(), world)
    worker.setup(None, cfg.distributed.timeout_s)
    return worker, Commands(cfg.distributed.timeout_s)


def follow(cfg: Config) -> None:
    """A rank other than 0: run rank 0's commands on this learner until it closes."""
    worker, commands = _start(cfg)
    try:
        while True:
            name, args = commands.receive()
            if name == "close":
                return
            getattr(worker, name)(*args)
    finally:
        dist.destroy_process_group()


class TorchrunLearners(LearnerRanks):
    """The learners seen from rank 0 (:class:`~rlvr.trainer.protocols.Learners`): rank 0's
    learner called in this process, the other ranks sent the same call as a command."""

    def __init__(self, cfg: Config, algo: algorithms.Algorithm) -> None:
        self.worker, self.commands = _start(cfg)
        self.algo = algo
        self.sharded = cfg.train.sharding == "fsdp"
        learner = self.worker.learner
        self.version, self.precision, self.lr = learner.version, learner.precision, learner.lr

    def call(self, ranks: Ranks, what: str, name: str, *args: Any) -> list[Any]:
        if ranks == "all" or self.sharded:
            self.commands.send(name, args)
        return [getattr(self.worker, name)(*args)]

    @property
    def device(self) -> torch.device:
        return self.worker.learner.device

    def update(
        self, data: Samples, meanwhile: Callable[[], None] = lambda: None
    ) -> tuple[dict[str, float], str | None]:
        meanwhile()  # rank 0's engine samples from the published copy: before, as in one process
        metrics, bad, self.lr = self.call("all", "update", "update", data)[0]
        self.version = self.worker.learner.version
        return metrics, bad

    def gather_into(self, served: torch.nn.Module) -> None:
        """Copy the policy's trained tensors into ``served`` (the engine's copy), gathered
        bucket by bucket with the other ranks when sharded (which gather along)."""
        if self.sharded:
            self.commands.send("gather", (None,))
        self.worker.gather(served)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.commands.send("close", ())
            dist.destroy_process_group()


@dataclass
class ServedRollouts(LocalRollouts):
    """Rank 0's rollouts: the engine samples from ``served``, a whole copy of the policy that
    each publish refills from the learners."""

    served: torch.nn.Module | None = None

    def publish(self, weights: TorchrunLearners, version: int) -> dict[str, float]:
        assert self.served is not None
        weights.gather_into(self.served)
        return super().publish(self.served, version)


def build(
    cfg: Config,
    user_reward: Callable[..., float] | None,
    cleanup: contextlib.ExitStack,
) -> RunParts:
    """Rank 0's parts (see the module docstring); the other ranks :func:`follow`."""
    front = build_front(cfg, user_reward, cleanup)
    tokenizer = load_tokenizer(cfg.model.name)
    learners = TorchrunLearners(cfg, front.algo)
    cleanup.callback(learners.close)
    with startup(f"loading the served copy of {cfg.model.name}"):
        served = load_policy(cfg)  # the engine's copy; its trained tensors are the published
    trained = {n for n, p in learners.worker.learner.policy.named_parameters() if p.requires_grad}
    for name, param in served.named_parameters():
        param.requires_grad_(name in trained)
    front.task, _ = limit_task_prompts(front.task, tokenizer, served, cfg)
    sampling, greedy = sampling_params(cfg, tokenizer, front.token_stats)
    dtypes = Dtypes.of(cfg, served)
    served.to(dtypes.rollout)  # the engine samples from it as it is: no second copy
    with startup("building the rollout engine"):
        local = local_rollouts(cfg, front, tokenizer, served, dtypes, cleanup)
    rollouts = ServedRollouts(**vars(local), served=served)
    sampler = build_sampler(cfg, front.task, front.algo)
    collector = Collector(rollouts, sampler, front.algo, cfg, sampling, greedy, tokenizer=tokenizer)
    return front.parts(tokenizer, learners, collector, vocabulary_size(served, tokenizer))
