"""The seams of the spine, typed: what the loop and the collector need of the rollout side
(:class:`Rollouts`) and of the learning side (:class:`Learners`), implemented in one process
(``rlvr.trainer.backends.local``) and on Ray (``rlvr.trainer.backends.ray``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from rlvr import algorithms
from rlvr.checkpoint import TrainerState
from rlvr.config import Config
from rlvr.data import Problem
from rlvr.rollout import SamplingParams
from rlvr.trainer.batch import Sampled, Samples
from rlvr.trainer.publish_check import EngineProbe

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Weights = Any
"""What the learners hand the rollouts to serve their policy: the policy module itself in one
process, the learners' handle on Ray (whose rank 0 broadcasts the tensors to the workers)."""

Update = tuple[dict[str, float], str | None]
"""An update's metrics, and the non-finite quantity that stopped it (None: it completed)."""


class Rollouts(Protocol):
    """Where groups are played and scored: in this process or on Ray rollout workers; the same
    results either way."""

    def run(
        self, problems: list[Problem], n: int, sampling: SamplingParams, keys: torch.Tensor | None
    ) -> Samples:
        """Play and score ``n`` episodes of each problem (:class:`~rlvr.trainer.rollouts.Player`),
        episode i from the stream ``keys[i]``."""

    def run_reference(
        self, problems: list[Problem], n: int, sampling: SamplingParams, keys: torch.Tensor | None
    ) -> Samples:
        """As :meth:`run`, sampled from the initial (reference) policy: an engine kept for it when
        the advantage needs the reference's rewards (AAPO)."""

    def score(
        self, problems: list[Problem], completions: list[list[int]], group_ids: list[int]
    ) -> Samples:
        """Given one-step completions (token ids nothing sampled; row i answers
        ``problems[group_ids[i]]``) scored by the run's reward, as a table whose tokens are all
        given (:meth:`rlvr.trainer.rollouts.OneStep.score`)."""

    def publish(self, weights: Weights, version: int) -> dict[str, float]:
        """Serve ``weights`` (what :meth:`Learners.weights` returns) as policy ``version``;
        statistics of the publication (Ray: ``rollout/publish_bytes``), else empty."""

    def evaluate(
        self, problems: list[Problem], sampling: SamplingParams, seed: int
    ) -> dict[str, float]:
        """Held-out accuracy of the served policy (:func:`rlvr.grading.accuracy_metrics`)."""

    def probe(
        self, prompt: list[int], sampling: SamplingParams, keys: torch.Tensor
    ) -> list[EngineProbe]:
        """One completion of ``prompt`` from each stream of ``keys`` [S] by every engine (one
        per Ray rollout worker; S per engine, in one batch): the publish check
        (:mod:`rlvr.trainer.publish_check`)."""

    def worker_stats(self) -> dict[str, float]:
        """Per-worker metrics of the last draws (empty in one process)."""


class Learners(Protocol):
    """The learning side: the policy's trained weights, optimizer and schedule, one process's
    :class:`~rlvr.trainer.learner.Learner` or the Ray learners' group."""

    algo: algorithms.Algorithm
    version: int
    """Optimizer updates so far (the policy version the rollouts serve after a publish)."""
    precision: dict[str, Any] | None
    """What ``auto`` precision settings stood for where the policy trains, and why
    (:meth:`rlvr.precision.Choice.record`); None when none was ``auto``."""

    @property
    def device(self) -> torch.device:
        """Where the policy trains."""

    @property
    def lr(self) -> float:
        """The learning rate of the next optimizer step."""

    def update(self, data: Samples, meanwhile: Callable[[], None] = ...) -> Update:
        """One step's update (advantages, epochs x minibatches of optimizer steps).
        ``meanwhile`` (the batches sampled ahead) runs while it trains where the learners run
        in other processes (Ray), and before it in this one (the engine shares the policy's
        weights, which must still be the old ones)."""

    def weights(self) -> Weights:
        """What :meth:`Rollouts.publish` is given to serve the current policy."""

    def score(
        self, prompt: list[int], completions: list[list[int]]
    ) -> tuple[list[list[float]], torch.dtype]:
        """The current policy's log-probs of each completion of ``prompt`` (the sampling
        temperature's), and the dtype it computed them in."""

    def reset_reference_if_due(self, step: int) -> None:
        """ProRL's reference reset, when due before ``step``."""

    def mark_published(self) -> None:
        """The current weights are being published: with ``sync_every`` > 1 (semi-online) they
        become the snapshot the rollouts serve until the next sync (checkpointed)."""

    def published(self) -> contextlib.AbstractContextManager[int]:
        """For the block, the policy holds the weights last published (the semi-online
        snapshot; the current ones otherwise), and :meth:`weights` publishes them; yields
        their policy version (a resume serves them again)."""

    def apply_optimizer_config(self, cfg: Config) -> None:
        """Follow ``cfg``'s optimizer settings from now on (a resume that changed them)."""

    def save_checkpoint(
        self,
        run_dir: Path,
        state: TrainerState,
        tokenizer: PreTrainedTokenizerBase,
        keep: int,
        pending: list[Sampled],
    ) -> None:
        """Write the checkpoint of ``state.step`` (``pending``: the batches sampled ahead)."""

    def load_checkpoint(
        self, run_dir: Path, warn: Callable[[str], None]
    ) -> tuple[Path, TrainerState, list[Sampled]] | None:
        """Load the latest good checkpoint: its path, trainer state and batches sampled ahead;
        None when the run has none."""
