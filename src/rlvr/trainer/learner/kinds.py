"""Objective kinds: what one update minimises, as a registered strategy the learner runs.

The learner (:mod:`rlvr.trainer.learner.engine`) owns the loop every kind shares: ``ppo_epochs``
passes of ``minibatches`` optimizer steps, each step's gradient accumulated over micro-batches,
summed over a data-parallel group, clipped, applied by AdamW, and skipped when non-finite. An
objective kind owns the rest:

- :meth:`ObjectiveKind.prepare`: everything fixed before the first optimizer step (the padded
  batch, the no-grad passes of pi_old and pi_ref, advantages or pairs), as a :class:`Prepared`
  whose ``units`` (samples, pairs, ...) the learner shuffles into minibatches;
- :meth:`ObjectiveKind.accumulate`: one minibatch's gradient (``loss.backward()`` per micro-batch
  of this learner's share of the minibatch's units), its metrics added to an :class:`Averages`;
- :meth:`ObjectiveKind.check` and :meth:`ObjectiveKind.summary`: a non-finite input that stops
  the update before it starts, and the metrics of the whole update.

The built-in kinds are ``policy_gradient`` (GRPO and its relatives, on-policy distillation:
:mod:`~rlvr.trainer.learner.policy_gradient`), ``imitation`` (SFT, RFT), ``pairs`` (DPO, IPO,
REBEL: :mod:`~rlvr.trainer.learner.pairs`) and ``groups`` (DisCO, whole groups per micro-batch:
:mod:`~rlvr.trainer.learner.groups`). An objective of :data:`rlvr.algorithms.OBJECTIVES`
names its kind; a user's kind is a subclass registered with :func:`register_objective_kind`
(docs/objectives.md) and needs no edit of the learner.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rlvr.registry import Registry

if TYPE_CHECKING:
    from rlvr.trainer.batch import Samples
    from rlvr.trainer.learner.engine import Learner


class SkipStep(Exception):
    """A non-finite loss, gradient norm or update: no optimizer step is taken from then on.
    Carries the quantity's name and its metric (logged as "nan"/"inf")."""

    def __init__(self, quantity: str, key: str, value: float) -> None:
        super().__init__(quantity)
        self.quantity, self.key, self.value = quantity, key, value


class Averages:
    """Running (weighted) means of the metrics of an update's micro-batches and optimizer
    steps: a micro-batch's token mean added with its token count as ``weight`` gives the exact
    token mean over all of them."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}

    def add(self, key: str, value: float, weight: float = 1.0) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + value * weight
        self.counts[key] = self.counts.get(key, 0.0) + weight

    def means(self) -> dict[str, float]:
        return {k: self.sums[k] / self.counts[k] if self.counts[k] else 0.0 for k in self.sums}


@dataclass
class Prepared:
    """What every minibatch of one update reads, fixed before the first optimizer step; a kind
    extends it with its own tensors.

    Attributes:
        units: how many units (samples, pairs, ...) the learner shuffles into minibatches; the
            minibatch given to :meth:`ObjectiveKind.accumulate` is a sorted [u] index into them.
    """

    units: int


class ObjectiveKind(ABC):
    """The strategy of one kind of objective (see the module docstring); stateless: an update's
    state is its :class:`Prepared`."""

    @abstractmethod
    def prepare(self, learner: Learner, data: Samples) -> Prepared:
        """The update's fixed inputs from the step's batch ``data`` (non-empty)."""

    def check(self, prepared: Prepared) -> tuple[dict[str, float], str] | None:
        """Metrics and the name of a non-finite input that stops the update before its first
        optimizer step (e.g. advantages), or None."""
        return None

    @abstractmethod
    def accumulate(
        self,
        learner: Learner,
        prepared: Prepared,
        units: torch.Tensor,
        first_epoch: bool,
        averages: Averages,
    ) -> None:
        """Backpropagate this learner's share (:meth:`Learner.share`) of one minibatch's
        ``units``, normalised so that the group's gradients sum to the minibatch's gradient;
        raise :class:`SkipStep` on a non-finite loss. ``first_epoch``: the first pass over the
        batch, which sees every unit once (metrics describing the batch are added then)."""

    def summary(self, learner: Learner, prepared: Prepared, metrics: dict[str, float]) -> None:
        """Add the whole update's metrics to ``metrics`` (the micro-batches' means); none by
        default."""
        return None


OBJECTIVE_KINDS: Registry[ObjectiveKind] = Registry("objective kind")


def register_objective_kind(name: str) -> Callable[[type[ObjectiveKind]], type[ObjectiveKind]]:
    """Class decorator: register an instance of an :class:`ObjectiveKind` subclass as ``name``
    (the ``kind`` an objective of :data:`rlvr.algorithms.OBJECTIVES` names)."""

    def decorator(cls: type[ObjectiveKind]) -> type[ObjectiveKind]:
        OBJECTIVE_KINDS.add(name, cls())
        return cls

    return decorator
