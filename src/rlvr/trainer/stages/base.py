"""What a draw stage is: :class:`DrawState`, :class:`Stage`, the registry :data:`STAGES`, and
the run's stages in order (:func:`stages_for`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from rlvr import algorithms
from rlvr.config import ConfigError
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
        step: the training step (1-based) the draw is for.
    """

    collector: Collector
    table: Samples
    keep: torch.Tensor
    n: int
    base: int
    batch: Samples | None = None
    step: int = 0


@dataclass(frozen=True)
class Stage:
    """A registered stage.

    Attributes:
        apply: ``apply(state, settings)`` rewrites the :class:`DrawState` in place.
        settings: the frozen dataclass of its settings (``algorithm.stages`` entries give its
            fields, and any other key its ``params`` field when it has one; its
            ``__post_init__`` refuses bad values). A settings object with an ``oversample``
            field makes each draw sample that many times G per problem; one with a
            ``new_state()`` method gives the stage a state the collector keeps from step to
            step and the checkpoints hold (``Collector.stage_states``); one with a
            ``play_draw(collector, problems, n, base)`` method plays the draw's groups itself
            (HBPO's budget subgroups).
        after_select: it runs on the kept rows (``state.batch``), after the group selection.
        counts: the step metrics it counts (logged as 0 in a step where it did nothing).
        name: its name in :data:`STAGES`.
    """

    apply: Callable[[DrawState, Any], None]
    settings: type
    after_select: bool = False
    counts: tuple[str, ...] = ()
    name: str = ""


STAGES: Registry[Stage] = Registry("draw stage")


def register_stage(
    name: str, settings: type, after_select: bool = False, counts: tuple[str, ...] = ()
) -> Callable[[Callable[[DrawState, Any], None]], Callable[[DrawState, Any], None]]:
    """Register the decorated function as the stage ``name`` (see :class:`Stage`): an
    ``algorithm.stages`` entry ``{name: NAME, ...settings}`` runs it."""

    def add(fn: Callable[[DrawState, Any], None]) -> Callable[[DrawState, Any], None]:
        STAGES.add(name, Stage(fn, settings, after_select, counts, name))
        return fn

    return add


def stage_settings(stage: algorithms.StageEntry) -> Any:
    """The settings object of one ``algorithm.stages`` entry; ConfigError naming the stage and
    what it accepts when its name or settings are not."""
    spec = STAGES.get(stage.name)
    if spec is None:
        raise ConfigError(f"algorithm.stages: {STAGES.unknown(stage.name)}")
    fields = [f.name for f in dataclasses.fields(spec.settings)]
    given = dict(stage.params)
    if "params" in fields:  # any other key is an argument of the function the stage selects
        given = {k: v for k, v in given.items() if k in fields}
        given["params"] = {k: v for k, v in stage.params.items() if k not in fields}
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise ConfigError(
            f"algorithm.stages {stage.name}: unknown setting(s) {', '.join(unknown)}; "
            f"accepted: {', '.join(fields) or 'none'}"
        )
    try:
        return spec.settings(**given)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"algorithm.stages {stage.name}: {err}") from None


def stages_for(algo: algorithms.Algorithm) -> list[tuple[Stage, Any]]:
    """The run's stages with their settings, in the order they run: those before the
    selection in the algorithm's order, then those after it."""
    settings = [stage_settings(s) for s in algo.stages]  # checks each name first
    stages = [(STAGES[s.name], v) for s, v in zip(algo.stages, settings, strict=True)]
    return [s for s in stages if not s[0].after_select] + [s for s in stages if s[0].after_select]


def check_stages(algo: algorithms.Algorithm) -> None:
    """ConfigError unless every stage of ``algo`` is registered and its settings are valid."""
    stages_for(algo)


def oversample(algo: algorithms.Algorithm) -> int:
    """How many times G samples a draw plays per problem (a stage's ``oversample``, or 1)."""
    factor = 1
    for _, settings in stages_for(algo):
        factor *= getattr(settings, "oversample", 1)
    return factor
