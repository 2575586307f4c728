"""What a draw stage is: :class:`DrawState`, :class:`Stage`, the registry :data:`STAGES`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rlvr import algorithms
from rlvr.config import Config
from rlvr.registry import Registry
from rlvr.trainer.batch import Samples

if TYPE_CHECKING:
    from rlvr.trainer.collect import Collector


@dataclass
class DrawState:
    """One draw between scoring and the step's batch.

    Attributes:
        collector: the step's collector (rollouts, sampling, rewards, counters).
        table: every sample the draw played, with its ``rewards`` column.
        keep: [K] the rows of ``table`` kept so far.
        n: samples per problem.
        base: the draw's stream key (:func:`rlvr.rollout.streams.stream_key`).
        batch: the kept rows with their signals, once selected (the stages after the
            selection extend it), else None.
    """

    collector: Collector
    table: Samples
    keep: torch.Tensor
    n: int
    base: int
    batch: Samples | None = None


@dataclass(frozen=True)
class Stage:
    """A registered stage.

    Attributes:
        apply: rewrites the :class:`DrawState` in place.
        active: whether a run with this config and preset uses it.
        after_select: it runs on the kept rows (``state.batch``), after the group accumulator.
        counts: the step metrics it counts (logged as 0 in a step where it did nothing).
    """

    apply: Callable[[DrawState], None]
    active: Callable[[Config, algorithms.Preset], bool]
    after_select: bool = False
    counts: tuple[str, ...] = ()


STAGES: Registry[Stage] = Registry("draw stage")


def register_stage(
    name: str,
    active: Callable[[Config, algorithms.Preset], bool],
    after_select: bool = False,
    counts: tuple[str, ...] = (),
) -> Callable[[Callable[[DrawState], None]], Callable[[DrawState], None]]:
    """Register the decorated function as the stage ``name`` (see :class:`Stage`)."""

    def add(fn: Callable[[DrawState], None]) -> Callable[[DrawState], None]:
        STAGES.add(name, Stage(fn, active, after_select, counts))
        return fn

    return add


def stages_for(cfg: Config, algo: algorithms.Preset) -> list[str]:
    """The stages a run uses, in order."""
    return [name for name, stage in STAGES.items() if stage.active(cfg, algo)]
