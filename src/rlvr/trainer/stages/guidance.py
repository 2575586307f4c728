"""G2RPO-A's guided samples as a draw stage ("G2RPO-A: Guided Group Relative Policy
Optimization with Adaptive Guidance", 2025, arXiv:2508.13023; as the authors' code does it,
``T-Lab-CUHKSZ/G2RPO-A``, ``g2rpoa_trainer.py``).

Every group gains ``guided`` samples whose reply starts with the first l tokens of the
problem's reference reasoning (its first demonstration, e.g. arithmetic's worked solution) and
continues as the policy samples it. The guidance is part of the completion: rewarded with it,
and trained with the group's advantage like the sampled tokens (the authors' code masks only
padding; the given tokens' behaviour policy is pi_old: no sampler correction). Advantages are
GRPO's over the mixed group: ``rollout.group_size`` samples plus the guided ones (the paper's G
is their sum; its code guides 2 of 12). l adapts to the step's mean reward over every sample,
guided or not (:func:`rlvr.algorithms.adapt_guidance_length`); it and the cycle's recorded
rewards are in every checkpoint, so a resumed run guides as the uninterrupted one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from rlvr import algorithms
from rlvr.data import Problem, hints
from rlvr.rollout.streams import group_keys
from rlvr.trainer.rollouts import merge_shards
from rlvr.trainer.stages.base import DrawState, register_stage

GUIDED = "sampling/guided"
STREAMS = 2 * 10**6
"""Guided sample j of the draw's problem i comes from the stream (base, STREAMS + i, j), apart
from the draw's own (i < P), the hints' and the reference's (10^6 + i)."""


@dataclass(frozen=True)
class Guidance:
    """Settings of ``{name: guidance, guided, length, max_length, adaptive, window}``.

    Attributes:
        guided: guided samples added to each group (2 in the authors' code).
        length: l_0, the initial guidance length in tokens (3072 in the authors' code).
        max_length: l_max (None: ``length``, as in the authors' code).
        adaptive: adapt l to the reward (False: l_0 throughout).
        window: the steps of a cycle whose mean rewards the cycle's last step is compared
            with (2 in the authors' code: cycles of 3 steps).
    """

    guided: int = 2
    length: int = 3072
    max_length: int | None = None
    adaptive: bool = True
    window: int = 2

    def __post_init__(self) -> None:
        if self.guided < 1 or self.length < 1 or self.window < 1:
            raise ValueError(
                f"guided, length and window must be >= 1; got {self.guided}, {self.length}, "
                f"{self.window}"
            )
        if self.max_length is not None and self.max_length < self.length:
            raise ValueError(f"max_length {self.max_length} is below length {self.length}")

    def new_state(self) -> GuidanceLength:
        return GuidanceLength(self.length)


class GuidanceLength:
    """The run's guidance length l, the mean rewards recorded in the current cycle, and the
    step being summed (its reward total and count: a step may have several draws)."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.recorded: list[float] = []
        self.step = 0
        self.total, self.count = 0.0, 0

    def begin(self, step: int, settings: Guidance) -> None:
        """Before a draw of ``step`` is guided: the first draw of a later step closes the step
        before it (:meth:`close`), so its new l guides this step, as the authors' callback
        updates l at a step's end."""
        if step != self.step:
            self.close(settings)
            self.step = step

    def observe(self, rewards: torch.Tensor) -> None:
        """Add a draw's rewards (every sample's, guided or not) to the current step's."""
        self.total += float(rewards.sum())
        self.count += len(rewards)

    def close(self, settings: Guidance) -> None:
        """The summed step's mean reward into its cycle: recorded in the cycle's first
        ``window`` steps, compared with them in its last (the new l)."""
        if self.count == 0:
            return
        mean = self.total / self.count
        self.total, self.count = 0.0, 0
        if not settings.adaptive:
            return
        if (self.step - 1) % (settings.window + 1) < settings.window:
            self.recorded.append(mean)
            return
        cap = settings.max_length or settings.length
        self.length = algorithms.adapt_guidance_length(self.length, self.recorded, mean, cap)
        self.recorded = []

    def metrics(self) -> dict[str, float]:
        """The length this step's samples were guided with, and the step's mean reward over
        every sample so far (what the rule reads)."""
        mean = self.total / self.count if self.count else 0.0
        return {"sampling/guidance_length": float(self.length), "sampling/guidance_reward": mean}

    def state_dict(self) -> dict[str, Any]:
        return {
            "length": self.length,
            "recorded": list(self.recorded),
            "step": self.step,
            "total": self.total,
            "count": self.count,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.length, self.recorded = int(state["length"]), list(state["recorded"])
            self.step, self.total, self.count = state["step"], state["total"], state["count"]


def guided(problem: Problem, length: int, tokenizer: Any) -> Problem | None:
    """``problem`` whose reply starts with the first ``length`` tokens of its reference
    reasoning (the first demonstration that solves it), or None when it has none. The id gains
    ``#guided<length>``."""
    solution = hints.reference_solution(problem)
    if solution is None:
        return None
    ids = tokenizer(solution, add_special_tokens=False).input_ids[:length]
    prefix = hints.token_prefix(tokenizer, ids)
    return dataclasses.replace(problem, id=f"{problem.id}#guided{length}", response_prefix=prefix)


@register_stage("guidance", Guidance, counts=(GUIDED,))
def g2rpo_a(state: DrawState, settings: Guidance) -> None:
    """Each group's ``guided`` samples after its own, guided by the current l; then the draw's
    rewards (every sample's) go to l's cycle."""
    collector, table = state.collector, state.table
    tracker = collector.stage_states["guidance"]
    tracker.begin(state.step, settings)
    if collector.algo.objective.samples != "policy" or len(state.keep) != len(table):
        raise ValueError("the guidance stage adds to the policy's own groups, as the first stage")
    problems = table.problems
    hinted = {g: guided(p, tracker.length, collector.tokenizer) for g, p in enumerate(problems)}
    todo = [g for g, p in hinted.items() if p is not None]
    if todo:
        k = settings.guided
        keys = torch.cat([group_keys(state.base, 1, k, first_prompt=STREAMS + g) for g in todo])
        again = collector.play([hinted[g] for g in todo], k, keys)
        again = again.with_columns(rewards=collector.rewards(again))
        own = table
        index = {g: i for i, g in enumerate(todo)}
        parts = []
        for g in range(len(problems)):
            part = own.groups([g])
            if g in index:
                extra = again.groups([index[g]])
                part = part.add_rows(dataclasses.replace(extra, problems=part.problems))
            parts.append(part)
        table = merge_shards(parts)
        collector.counts[GUIDED] += len(again)
        state.table, state.keep = table, torch.arange(len(table))
    tracker.observe(table.rewards)
