"""The bodies of the Ray actors of ``distributed.backend: ray`` (plain classes: the backend wraps
them with ``ray.remote``, and tests can run them in-process).

* :class:`RolloutWorker` holds a rollout engine over its own copy of the policy, the reward and
  the judge; it plays and scores whole groups (its
  :class:`~rlvr.trainer.backends.local.LocalRollouts`) and receives new weights from learner
  rank 0.
* :class:`LearnerWorker` is one rank of the learners' data-parallel group
  (:mod:`rlvr.distributed.data_parallel`); rank 0 also writes checkpoints and sends weights.

Both are :class:`Reusable`: an actor whose run ended cleanly drops the run's state and waits
idle for the driver's next run (:mod:`rlvr.trainer.backends.ray_pool`).
"""

from __future__ import annotations

import abc
import contextlib
import gc
import os
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

from rlvr.checkpoint import TrainerState
from rlvr.config import Config
from rlvr.data import Problem
from rlvr.devices import resolve_device
from rlvr.distributed.data_parallel import DataParallel
from rlvr.distributed.weights import WeightGroup, free_port, named_tensors, whole_buckets
from rlvr.grading.accuracy import AccuracyRecords
from rlvr.models import load_tokenizer, quiet_transformers
from rlvr.progress import startup
from rlvr.rollout import SamplingParams
from rlvr.trainer.backends.local import local_rollouts
from rlvr.trainer.batch import Samples
from rlvr.trainer.build import (
    Dtypes,
    build_front,
    build_learner,
    load_policy,
    resolve_algorithm,
)


def _where() -> dict[str, Any]:
    """Which process and machine this is (for error messages and docs/scaling.md's "what runs
    where"), with its Ray node inside a Ray actor (not under torchrun)."""
    where: dict[str, Any] = {"pid": os.getpid(), "host": socket.gethostname()}
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        where["node"] = ray.get_runtime_context().get_node_id()
    return where


def _threads(cfg: Config, learner: bool) -> None:
    """torch threads: one per whole CPU the actor reserved (at least one; the driver gives the
    actors ``cpus_per_worker`` set); a learner uses ``train.threads`` when set (it trains while
    the rollout workers wait, unless ``rollout.max_staleness`` overlaps them)."""
    reserved = max(1, int(cfg.distributed.cpus_per_worker or 0))
    torch.set_num_threads((cfg.train.threads or reserved) if learner else reserved)


class Reusable(abc.ABC):
    """An actor body whose process outlives one run: the constructor and :meth:`rerun` start a
    run (``start_run``, the subclass's), :meth:`end_run` drops it."""

    def __init__(self, *args: Any) -> None:
        self.start_run(*args)

    @abc.abstractmethod
    def start_run(self, *args: Any) -> None:
        """Build this actor's part of a run."""

    def rerun(self, *args: Any) -> None:
        """``start_run`` in an actor kept from an earlier run; a failure ends the actor (its
        traceback on the actor's stderr), as a failing constructor ends a fresh one, so the
        driver sees the same fault either way."""
        try:
            self.start_run(*args)
        except BaseException:
            traceback.print_exc()
            import ray

            ray.actor.exit_actor()

    def end_run(self) -> bool:
        """Close and drop everything the run gave this actor; the process and its imports
        stay (``True``: ready for another run)."""
        self.close()
        self.__dict__.clear()
        gc.collect()
        return True

    @abc.abstractmethod
    def close(self) -> None:
        """Release what the run holds outside Python's memory (servers, process groups)."""


class RolloutWorker(Reusable):
    """Samples and scores groups with the policy version it was last given."""

    def start_run(self, cfg_data: dict[str, Any], user_reward: Any, index: int) -> None:
        quiet_transformers()
        cfg = Config.model_validate(cfg_data)
        _threads(cfg, learner=False)
        self.index = index
        self._cleanup = contextlib.ExitStack()
        front = build_front(cfg, user_reward, self._cleanup)
        tokenizer = load_tokenizer(cfg.model.name)
        self.policy = load_policy(cfg)
        dtypes = Dtypes.of(cfg, self.policy)
        self.rollouts = local_rollouts(cfg, front, tokenizer, self.policy, dtypes, self._cleanup)
        self.version = 0
        self.group: WeightGroup | None = None

    def ready(self) -> dict[str, Any]:
        return {**_where(), "worker": self.index, "version": self.version}

    def run(
        self, problems: list[Problem], n: int, sampling: SamplingParams, keys: torch.Tensor | None
    ) -> Samples:
        return self.rollouts.run(problems, n, sampling, keys)

    def run_reference(
        self, problems: list[Problem], n: int, sampling: SamplingParams, keys: torch.Tensor | None
    ) -> Samples:
        return self.rollouts.run_reference(problems, n, sampling, keys)

    def score(
        self, problems: list[Problem], completions: list[list[int]], group_ids: list[int]
    ) -> Samples:
        return self.rollouts.score(problems, completions, group_ids)

    def records(
        self, problems: list[Problem], sampling: SamplingParams, seed: int, first: int
    ) -> AccuracyRecords:
        return self.rollouts.records(problems, sampling, seed, first)

    def load_state(self, tensors: list[torch.Tensor], version: int) -> int:
        """New weights through the object store (``named_tensors`` order)."""
        with torch.no_grad():
            for own, new in zip(named_tensors(self.policy), tensors, strict=True):
                own.copy_(new)
        return self._serve(version)

    def join_group(self, host: str, port: int, rank: int, size: int, timeout_s: float) -> bool:
        """Join a new generation of the broadcast group (the old one is dropped)."""
        self.group = WeightGroup(host, port, rank, size, timeout_s)
        return True

    def receive(self, version: int) -> int:
        """Receive learner rank 0's broadcast of policy ``version``."""
        assert self.group is not None, "join_group first"
        self.group.broadcast(named_tensors(self.policy))
        return self._serve(version)

    def probe(self, prompt: list[int], sampling: SamplingParams, keys: torch.Tensor) -> list[Any]:
        """The publish check's completion of this worker's engine."""
        return self.rollouts.probe(prompt, sampling, keys, f" of rollout worker {self.index}")

    def parameters(self) -> list[torch.Tensor]:
        """The policy's parameters this worker holds (``named_tensors`` order; tests)."""
        return [t.detach().clone() for t in named_tensors(self.policy)]

    def _serve(self, version: int) -> int:
        self.rollouts.publish(self.policy, version)
        self.version = version
        return version

    def close(self) -> None:
        self._cleanup.close()


class LearnerWorker(Reusable):
    """Rank ``rank`` of ``world`` learners (see the module docstring)."""

    def start_run(self, cfg_data: dict[str, Any], rank: int, world: int) -> None:
        quiet_transformers()
        self.cfg = Config.model_validate(cfg_data)
        _threads(self.cfg, learner=True)
        self.rank, self.world = rank, world
        self.learner: Any = None
        self.tokenizer: Any = None
        self.weights: WeightGroup | None = None
        self.published: list[torch.Tensor] = []

    def address(self) -> str:
        """``host:port`` where rank 0 hosts the group's rendezvous."""
        import ray

        return f"{ray.util.get_node_ip_address()}:{free_port()}"

    def setup(self, address: str | None, timeout_s: float) -> dict[str, Any]:
        """Join the learners' group (at ``address``; None: as torchrun's environment
        describes it) and build the learner (policy, optimizer, schedule)."""
        cfg = self.cfg
        device = resolve_device(cfg.train.device)
        backend = "nccl" if device.type == "cuda" else "gloo"
        group = DataParallel.init(address, self.rank, self.world, backend, timeout_s)
        group.sharded = cfg.train.sharding == "fsdp"  # build_learner shards over the group
        torch.manual_seed(cfg.train.seed)  # as one process seeds torch before its parts
        self.tokenizer = load_tokenizer(cfg.model.name)
        where = f"learner {self.rank}"
        with startup(f"{where}: loading the policy {cfg.model.name}"):
            policy = load_policy(cfg)
        generator = torch.Generator().manual_seed(cfg.train.seed)
        with startup(f"{where}: choosing the precision"):
            dtypes = Dtypes.of(cfg, policy)
        algo = resolve_algorithm(cfg)  # this process's own, once
        with startup(f"{where}: building the learner"):
            pad = self.tokenizer.pad_token_id
            self.learner = build_learner(cfg, algo, policy, pad, generator, dtypes)
        self.learner.group = group
        if self.rank != 0 and not group.sharded:  # rank 0 logs the fraction changed
            self.learner.initial = None
        self._snapshot()  # version 0, what the workers load themselves
        info = {**_where(), "rank": self.rank, "lr": self.learner.lr}
        published = sum(t.numel() * t.element_size() for t in self.published)
        return {**info, "precision": self.learner.precision, "publish_bytes": published}

    def score(self, prompt: list[int], completions: list[list[int]]) -> tuple[list, Any]:
        """The publish check's log-probs (a sharded policy's forward: on every rank)."""
        return self.learner.score(prompt, completions)

    def update(self, data: Samples) -> tuple[dict[str, float], str | None, float]:
        metrics, bad = self.learner.update(data)
        return metrics, bad, self.learner.lr

    def reset_reference_if_due(self, step: int) -> None:
        self.learner.reset_reference_if_due(step)

    def mark_published(self) -> None:
        self.learner.mark_published()

    def swap_published(self) -> int:
        """Exchange the policy's weights with the semi-online snapshot (twice: as before); the
        snapshot's version (the current one without a snapshot)."""
        copy = self.learner.published_copy
        if copy is None:
            return self.learner.version
        copy.swap(self.learner.policy)
        return int(copy.version)

    def apply_optimizer_config(self, cfg_data: dict[str, Any]) -> None:
        self.learner.apply_optimizer_config(Config.model_validate(cfg_data))

    def save_checkpoint(
        self, run_dir: str, state: TrainerState, keep: int, pending: list[Any]
    ) -> None:
        """Rank 0 writes the checkpoint (a sharded policy's: every rank its shards)."""
        self.learner.save_checkpoint(Path(run_dir), state, self.tokenizer, keep, pending)

    def load_checkpoint(self, run_dir: str) -> tuple[Any, list[str], float, int]:
        """The learner's :meth:`~rlvr.trainer.learner.Learner.load_checkpoint`, its warnings, the
        learning rate and the policy version it resumes at."""
        warnings: list[str] = []
        loaded = self.learner.load_checkpoint(Path(run_dir), warnings.append)
        return loaded, warnings, self.learner.lr, self.learner.version

    def _snapshot(self) -> list[torch.Tensor]:
        """A copy of the policy's parameters as published now (``named_tensors`` order): what a
        replaced rollout worker is given, even while the next update runs (a sharded policy:
        this rank's shards of them)."""
        self.published = [t.detach().clone() for t in named_tensors(self.learner.policy)]
        return self.published

    def state(self, fresh: bool) -> Any:
        """The published parameters (``fresh``: publish the current ones first) as a Ray object
        reference made on rank 0, so they reach the workers without passing through the
        driver (a sharded policy's gathered on every rank, whole in rank 0's CPU memory)."""
        import ray

        from rlvr.distributed.sharding import full

        published = self._snapshot() if fresh else self.published
        if not self.learner.sharded:
            return ray.put(published)
        whole = [full(t).cpu() for t in published]
        return ray.put(whole) if self.rank == 0 else None

    def join_group(self, host: str, port: int, size: int, timeout_s: float) -> bool:
        self.weights = WeightGroup(host, port, 0, size, timeout_s)
        return True

    def broadcast(self) -> bool:
        """Publish the current parameters to the broadcast group (rank 0); a sharded policy's
        other ranks gather the buckets with it."""
        if self.weights is None:
            assert self.learner.sharded, "join_group first"
            self.gather(None)
        else:
            self.weights.broadcast(self._snapshot())
        return True

    def gather(self, into: torch.nn.Module | None) -> None:
        """Publish the current parameters whole, bucket by bucket (gathered with the other
        ranks when sharded), into the trained tensors of ``into`` (torchrun's rank 0: its
        engine's copy; None: gather along)."""
        targets = None if into is None else iter(named_tensors(into))
        for bucket in whole_buckets(self._snapshot()):
            if targets is not None:
                with torch.no_grad():
                    for value in bucket:
                        next(targets).copy_(value)

    def gradients(self) -> list[torch.Tensor]:
        """The policy's gradients of the last optimizer step (tests)."""
        return [p.grad.clone() for p in named_tensors(self.learner.policy)]

    def close(self) -> None:
        """Leave the learners' process group (the next run forms its own)."""
        import torch.distributed as dist

        self.weights = None
        if dist.is_initialized():
            dist.destroy_process_group()
