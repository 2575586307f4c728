"""The prompt-sampler protocol and the learnability signal that adaptive curricula feed on.

A sampler chooses the problems of each draw (``draw``), hears back how its problems went
(``update``: the rewards of each problem's group of G completions), and keeps its whole state
as JSON-able data (``state_dict``/``load_state_dict``) so that a resumed run draws exactly the
problems an uninterrupted one would.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from rlvr.algorithms.advantages import grpo
from rlvr.data.base import Problem
from rlvr.registry import Registry


class PromptSampler(Protocol):
    """Chooses training problems; see the module docstring."""

    name: str

    def draw(self, n: int) -> list[Problem]:
        """The next ``n`` training problems."""

    def update(
        self, problems: list[Problem], rewards: torch.Tensor, group_ids: torch.Tensor
    ) -> None:
        """Learn from a scored draw: ``rewards`` [N] of every completion, ``group_ids`` [N] the
        index into ``problems`` of each completion's problem."""

    def metrics(self) -> dict[str, float]:
        """What to log about the curriculum now (e.g. ``curriculum/prob/L2``)."""

    def state_dict(self) -> dict[str, Any]:
        """All state needed to continue exactly (JSON-able)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""


def absolute_advantage(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """|A_i| with GRPO's group-normalised advantage A_i = (r_i - mean_g r) / (std_g r + eps).

    The learnability proxy of SEC (Chen et al. 2025: "the absolute advantage ... as a proxy
    measure for immediate learning gain") and DUMP (Wang et al. 2025, expected absolute
    advantage L(d) = E_x E_o |A(o)|). It is computed from the rewards with GRPO's estimator
    whatever preset trains, so that the signal means the same thing across algorithms: for 0/1
    rewards it is 0 for groups the policy always or never solves and peaks at pass rate 1/2.

    Args:
        rewards: [N] rewards; group_ids: [N] group of each sample.
    Returns:
        [N] absolute advantages.
    """
    return grpo(rewards.float(), group_ids).abs()


def per_category(
    problems: list[Problem], values: torch.Tensor, group_ids: torch.Tensor
) -> dict[str, list[float]]:
    """``values`` [N] of the samples grouped by their problem's category, in sample order."""
    out: dict[str, list[float]] = defaultdict(list)
    for value, group in zip(values.tolist(), group_ids.tolist(), strict=True):
        out[problems[group].category].append(value)
    return dict(out)


@dataclass(frozen=True)
class Curriculum:
    """A registered curriculum: ``make(task, seed, **params) -> PromptSampler`` (a sampler class
    whose constructor takes ``(task, seed, **params)`` is one) and one line on what it does."""

    make: Callable[..., PromptSampler]
    description: str


CURRICULA: Registry[Curriculum] = Registry("curriculum")
"""The prompt samplers ``curriculum.name`` selects, users' included."""


def register_curriculum(name: str, description: str) -> Callable[[Callable], Callable]:
    """Decorator: add a prompt sampler factory ``make(task, seed, **params)`` (or a class with
    that constructor) as ``name``; ``curriculum.params`` gives its params."""

    def decorator(make: Callable[..., PromptSampler]) -> Callable[..., PromptSampler]:
        CURRICULA.add(name, Curriculum(make, description))
        return make

    return decorator
