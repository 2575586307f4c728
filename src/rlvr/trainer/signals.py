"""Signals produced on demand: per-sample inputs that a selected part needs and that playing
the policy's groups does not give. A producer is registered under the name of the input it
makes (an :class:`~rlvr.algorithms.AdvantageInputs` field); the collector runs it for a draw
only when the run's advantage estimator declares that name in its ``requires``
(:func:`needed`), so a run pays for no signal nothing reads.

- ``baselines``: the prompt sampler's persistent per-prompt baseline, read before the sampler
  hears this draw's rewards (SPO, Xu and Ding 2025, "Single-stream Policy Optimization",
  arXiv:2509.13232: its tracker);
- ``greedy_rewards``: the reward of the greedy completion of each sample's prompt (ReMax, Li
  et al. 2023, arXiv:2310.10505: the baseline of REINFORCE);
- ``reference_rewards``: the reward of the reference model's completion paired with each
  sample, the reference playing each group from its own streams (AAPO, Xiong et al. 2025,
  "AAPO: Enhancing the Reasoning Capabilities of LLMs with Advantage Momentum",
  arXiv:2505.14264);
- ``reference_values``: V_ref(x), the reward of the reference model's greedy completion of each
  sample's prompt (A-LoL, Baheti et al. 2023, arXiv:2305.14718: the target its value head is
  fit to).

A producer runs at one of two moments of a draw (:attr:`Signal.before_update`): before the
prompt sampler's update (it reads the sampler's state as the draw found it), or once the draw's
groups are final (after GHPO's hints replaced failed groups), on the draw's final problems.
Either way it returns one value per sample of the draw ``[N]``, before any sample filter; the
collector keeps the rows the filters keep.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rlvr.algorithms import ADVANTAGES
from rlvr.registry import Registry
from rlvr.rollout.streams import group_keys

if TYPE_CHECKING:
    from rlvr.data import Problem
    from rlvr.trainer.collect import Collector


@dataclass(frozen=True)
class Draw:
    """What a producer may read of one draw.

    Attributes:
        collector: the step's collector (its rollouts, sampler, sampling settings, rewards).
        problems: [P] the draw's problems (the final ones after hints for a late producer).
        sizes: [P] samples of each problem.
        n: samples per problem of a uniform draw.
        group_ids: [N] the problem of each sample.
        base: the draw's stream key (:func:`rlvr.rollout.streams.stream_key`).
    """

    collector: Collector
    problems: list[Problem]
    sizes: list[int]
    n: int
    group_ids: torch.Tensor
    base: int


@dataclass(frozen=True)
class Signal:
    """A registered producer: ``produce(draw)`` -> [N]; ``before_update``: it runs before the
    prompt sampler's update (else once the draw's groups are final)."""

    produce: Callable[[Draw], torch.Tensor]
    before_update: bool = False


SIGNALS: Registry[Signal] = Registry("signal")


def register_signal(
    name: str, before_update: bool = False
) -> Callable[[Callable[[Draw], torch.Tensor]], Callable[[Draw], torch.Tensor]]:
    """Register the decorated function as the producer of the input ``name``."""

    def add(fn: Callable[[Draw], torch.Tensor]) -> Callable[[Draw], torch.Tensor]:
        SIGNALS.add(name, Signal(fn, before_update))
        return fn

    return add


def needed(advantage: str) -> list[str]:
    """The signals the estimator ``advantage`` requires that a producer makes, in order."""
    return [name for name in ADVANTAGES[advantage].requires if name in SIGNALS]


def produce(names: list[str], draw: Draw, before_update: bool) -> dict[str, torch.Tensor]:
    """The signals ``names`` whose producers run at this moment of ``draw`` (before the prompt
    sampler's update, or once its groups are final), each [N]."""
    return {
        name: SIGNALS[name].produce(draw)
        for name in names
        if SIGNALS[name].before_update == before_update
    }


@register_signal("baselines", before_update=True)
def sampler_baselines(draw: Draw) -> torch.Tensor:
    """[N] the prompt sampler's baseline of each sample's prompt (``baselines()``: SPO's
    tracker), as it stood before this draw."""
    tracker = draw.collector.sampler.baselines  # type: ignore[attr-defined]
    return torch.tensor(tracker(draw.problems), dtype=torch.float)[draw.group_ids]


@register_signal("greedy_rewards")
def greedy_rewards(draw: Draw) -> torch.Tensor:
    """[N] the reward of the greedy completion of each sample's prompt (one per prompt, not
    counted in the step's reward metrics)."""
    collector = draw.collector
    greedy = collector.rollouts.run(draw.problems, 1, collector.greedy, None)
    return collector.rewards(greedy, record=False)[draw.group_ids]


@register_signal("reference_rewards")
def reference_rewards(draw: Draw) -> torch.Tensor:
    """[N] the reward of the reference model's completion paired with each sample: the
    reference plays each group too (sample j of problem i from the stream (base, 10^6 + i, j)),
    scored like the policy's, not counted in the step's reward metrics."""
    if len(set(draw.sizes)) != 1:
        raise ValueError(
            "the reference's paired groups (advantages aapo, pvpo) are of one size (not a "
            "knapsack curriculum)"
        )
    collector = draw.collector
    keys = group_keys(draw.base, len(draw.problems), draw.n, first_prompt=10**6)
    sampling = dataclasses.replace(collector.sampling, adaptive=None)  # not the policy's
    played = collector.rollouts.run_reference(draw.problems, draw.n, sampling, keys)
    return collector.rewards(played, record=False)


@register_signal("reference_values")
def reference_values(draw: Draw) -> torch.Tensor:
    """[N] V_ref(x): the reward of the reference model's greedy completion of each sample's
    prompt (one per prompt, not counted in the step's reward metrics). The reference is the
    initial policy and greedy decoding is deterministic, so a prompt's value is the same at
    every step."""
    collector = draw.collector
    played = collector.rollouts.run_reference(draw.problems, 1, collector.greedy, None)
    return collector.rewards(played, record=False)[draw.group_ids]
