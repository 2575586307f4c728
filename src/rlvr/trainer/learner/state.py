"""What a learner keeps across steps and writes into checkpoints (:class:`Checkpointed`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlvr import algorithms
from rlvr.checkpoint import TrainerState, load_latest_good, load_pending, save_checkpoint
from rlvr.policy import ValueHead
from rlvr.trainer.batch import Sampled
from rlvr.trainer.learner.published import PublishedCopy
from rlvr.trainer.learner.reference import Reference

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class Checkpointed:
    """The learner's state: weights, the modules beside them, optimizer, schedule, the
    shuffling stream, the version and minibatch counts (:class:`~.engine.Learner` fields)."""

    policy: torch.nn.Module
    value_head: ValueHead | None
    reference: Reference | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    generator: torch.Generator
    version: int
    minibatches: int
    published_copy: PublishedCopy | None
    entropy_control: algorithms.EntropyController | None

    def modules(self) -> dict[str, torch.nn.Module]:
        """The modules a checkpoint stores beside the policy: the value head, the reference when
        ProRL resets it (else it is the initial model, rebuilt on resume), the semi-online
        snapshot, the entropy control."""
        out: dict[str, torch.nn.Module] = {}
        if self.value_head is not None:
            out["value_head"] = self.value_head
        stored = None if self.reference is None else self.reference.stored()
        if stored is not None:
            out["reference"] = stored
        if self.published_copy is not None:
            out["published"] = self.published_copy
        if self.entropy_control is not None:
            out["entropy_control"] = self.entropy_control
        return out

    def save_checkpoint(
        self,
        run_dir: Path,
        state: TrainerState,
        tokenizer: PreTrainedTokenizerBase,
        keep: int,
        pending: list[Sampled],
    ) -> None:
        """Write the checkpoint of ``state.step``: weights, optimizer, schedule, the shuffling
        stream, the modules of :meth:`modules` and the batches sampled ahead (``pending``); a
        sharded policy's by every rank, each writing its shards."""
        state.policy_version = self.version
        state.minibatches = self.minibatches
        save_checkpoint(
            run_dir,
            state,
            self.policy,
            tokenizer,
            self.optimizer,
            self.scheduler,
            self.generator,
            keep=keep,
            extra=self.modules(),
            pending=pending,
        )

    def load_checkpoint(
        self, run_dir: Path, warn: Callable[[str], None]
    ) -> tuple[Path, TrainerState, list[Sampled]] | None:
        """Load the latest good checkpoint of ``run_dir`` (:func:`load_latest_good`); returns it,
        its trainer state and its batches sampled ahead, or None when the run has none."""
        loaded = load_latest_good(
            run_dir,
            self.policy,
            self.optimizer,
            self.scheduler,
            self.generator,
            self.modules(),
            warn=warn,
        )
        if loaded is None:
            return None
        path, state = loaded
        self.version = state.step if state.policy_version is None else state.policy_version
        # older checkpoints: the optimizer steps, which named the stream then
        old = state.minibatches is None
        self.minibatches = self.scheduler.last_epoch if old else state.minibatches
        return path, state, load_pending(path)

    def state_dict(self) -> dict[str, Any]:
        """Everything an update depends on, in memory: weights, optimizer, schedule, version,
        minibatch count (checkpoints store the same pieces as files: :mod:`rlvr.checkpoint`)."""
        return {
            "policy": self.policy.state_dict(),
            "modules": {k: m.state_dict() for k, m in self.modules().items()},
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "version": self.version,
            "minibatches": self.minibatches,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        for name, module in self.modules().items():
            module.load_state_dict(state["modules"][name])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.version = state["version"]
        self.minibatches = state["minibatches"]
