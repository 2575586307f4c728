"""GHPO's hint-guided rollouts (Liu et al. 2025, "GHPO: Adaptive Guidance for Stable and
Efficient LLM Reinforcement Learning", arXiv:2507.10628; :mod:`rlvr.data.hints`): a group whose
every sample failed is played again with the first part of its reference solution in the prompt,
so it gives a learning signal."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.data import hints
from rlvr.rollout.streams import group_keys
from rlvr.trainer.batch import Samples
from rlvr.trainer.rollouts import merge_shards
from rlvr.trainer.stages.base import DrawState, register_stage

HINTED = "sampling/hinted_groups"


@dataclass(frozen=True)
class Hints:
    """Settings of ``{name: hints, fractions, threshold}``.

    Attributes:
        fractions: increasing fractions in (0, 1) of the reference solution (the problem's
            first demonstration) shown after the question, tried in turn, e.g.
            [0.25, 0.5, 0.75].
        threshold: the reward a sample needs to count as solving its problem.
    """

    fractions: tuple[float, ...]
    threshold: float = 1.0

    def __post_init__(self) -> None:
        f = list(self.fractions)
        if (
            not f
            or any(not 0 < x < 1 for x in f)
            or any(a >= b for a, b in zip(f, f[1:], strict=False))
        ):
            raise ValueError(
                f"fractions must be increasing fractions in (0, 1), e.g. [0.25, 0.5, 0.75]; got {f}"
            )
        object.__setattr__(self, "fractions", tuple(f))


@register_stage("hints", Hints, counts=(HINTED,))
def ghpo(state: DrawState, settings: Hints) -> None:
    """Each group whose every sample scored below ``threshold`` is played again with the first
    of ``fractions`` of its solution in the prompt, then the next
    while it still fails; the last hinted group replaces it (its problem, now hinted, and its
    samples, in the original group order). Group i hinted at its k-th fraction samples from the
    stream (base, P k + i, j). The reward metrics and episode counts are taken as each part is
    played; the prompt sampler has heard the unhinted rewards: the problems' own difficulty."""
    collector, table, n = state.collector, state.table, state.n
    problems, rewards = table.problems, table.rewards
    if collector.algo.objective.samples != "policy" or len(rewards) != len(problems) * n:
        raise ValueError("the hints stage applies to the policy's own groups of one size")
    replaced: dict[int, Samples] = {}
    failing = [g for g in range(len(problems)) if _failed(rewards[g * n : (g + 1) * n], settings)]
    for k, fraction in enumerate(settings.fractions, start=1):
        hinted = {g: hints.hinted(problems[g], fraction) for g in failing}
        todo = [g for g in failing if hinted[g] is not None]
        if not todo:
            break
        keys = torch.cat(
            [group_keys(state.base, 1, n, first_prompt=len(problems) * k + g) for g in todo]
        )
        again = collector.play([hinted[g] for g in todo], n, keys)
        again = again.with_columns(rewards=collector.rewards(again))
        for i, g in enumerate(todo):
            replaced[g] = again.groups([i])
        failing = [g for g in todo if _failed(replaced[g].rewards, settings)]
    collector.counts[HINTED] += len(replaced)
    if replaced:
        parts = [replaced[g] if g in replaced else table.groups([g]) for g in range(len(problems))]
        state.table = merge_shards(parts)


def _failed(rewards: torch.Tensor, settings: Hints) -> bool:
    """Every reward of a group below the threshold."""
    return bool((rewards < settings.threshold).all())
