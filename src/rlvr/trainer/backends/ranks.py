"""The learners as several ranks seen from the loop (:class:`LearnerRanks`): the calls of the
:class:`~rlvr.trainer.protocols.Learners` protocol that every rank, or the ranks holding the
whole policy, must run. A backend says only how a call reaches its ranks
(:meth:`LearnerRanks.call`): Ray's actor calls (:mod:`.ray`) or rank 0's commands over a
process group (:mod:`.torchrun`). Each rank is a
:class:`~rlvr.trainer.backends.ray_actors.LearnerWorker`."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from rlvr.checkpoint import TrainerState
from rlvr.config import Config

Ranks = Literal["all", "whole"]
"""Which ranks run a call: ``all``, or ``whole``: those a call on the whole policy needs (every
one when it is sharded, as gathering its layers is a collective; else rank 0)."""


class LearnerRanks(ABC):
    """What the learners' ranks share (see the module docstring).

    Attributes:
        sharded: the policy is sharded over the ranks (``train.sharding: fsdp``).
        version: optimizer updates so far.
        lr: the learning rate of the next optimizer step.
    """

    sharded: bool
    version: int
    lr: float

    @abstractmethod
    def call(self, ranks: Ranks, what: str, name: str, *args: Any) -> list[Any]:
        """``LearnerWorker.name(*args)`` on ``ranks``; their results, rank 0's first. ``what``
        names the call where a rank fails."""

    def score(self, prompt: list[int], completions: list[list[int]]) -> tuple[list, Any]:
        """Rank 0's :meth:`~rlvr.trainer.learner.Learner.score`."""
        return self.call("whole", "publish check", "score", prompt, completions)[0]

    def reset_reference_if_due(self, step: int) -> None:
        self.call("all", "reference reset", "reset_reference_if_due", step)

    def mark_published(self) -> None:
        self.call("all", "publishing weights", "mark_published")

    @contextlib.contextmanager
    def published(self) -> Iterator[int]:
        """Every rank's policy holds the weights last published for the block (rank 0's are
        broadcast); their version."""
        versions = self.call("all", "resume", "swap_published")
        try:
            yield versions[0]
        finally:
            self.call("all", "resume", "swap_published")

    def apply_optimizer_config(self, cfg: Config) -> None:
        self.call("all", "resume", "apply_optimizer_config", cfg.model_dump(mode="json"))

    def save_checkpoint(
        self, run_dir: Path, state: TrainerState, tokenizer: Any, keep: int, pending: list[Any]
    ) -> None:
        """Rank 0's checkpoint of the whole policy, or every rank's shards of it."""
        state.policy_version = self.version
        path = str(Path(run_dir).resolve())
        self.call("whole", "checkpoint", "save_checkpoint", path, state, keep, pending)

    def load_checkpoint(
        self, run_dir: Path, warn: Callable[[str], None]
    ) -> tuple[Path, TrainerState, list[Any]] | None:
        """Every rank loads the run's latest good checkpoint (rank 0's warnings heard)."""
        path = str(Path(run_dir).resolve())
        loaded, warnings, self.lr, self.version = self.call(
            "all", "resume", "load_checkpoint", path
        )[0]
        for text in warnings:
            warn(text)
        return loaded

    def weights(self) -> LearnerRanks:
        return self
