"""HBPO's budget subgroups as a draw stage (Lyu et al. 2025, "Hierarchical Budget Policy
Optimization for Adaptive Reasoning", arXiv:2507.15844; as the authors' code plays them,
``ZJU-REAL/HBPO``, ``vllm_rollout_spmd-hierarchical.py``).

A prompt's ``rollout.group_size`` samples are split into equal subgroups, one per budget; each
reply of subgroup i starts with the statement of its budget, given (``Problem.response_prefix``,
the code's ``"<think> I will answer the question with {b} tokens"``), and the policy continues
from it, up to ``rollout.max_new_tokens`` (one global cap, as the code's). The stage plays the
draw itself (``play_draw``): the subgroups are the group, in budget order, and the
``budgets`` signal gives each sample its subgroup's budget (the ``hbpo`` advantage's input).
The statement is part of the reply: rewarded with it (``reward.terms: hbpo_budget`` reads the
budget from it) and trained with the reply's advantage, as in the code.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rlvr.algorithms.hbpo import BUDGETS
from rlvr.rollout.streams import group_keys
from rlvr.trainer.batch import Samples
from rlvr.trainer.rollouts import merge_shards
from rlvr.trainer.signals import Draw, register_signal
from rlvr.trainer.stages.base import DrawState, register_stage

if TYPE_CHECKING:
    from rlvr.data import Problem
    from rlvr.trainer.collect import Collector

TEMPLATE = "<think> I will answer the question with {budget} tokens"
"""The authors' code's budget statement (the paper writes "within")."""


@dataclass(frozen=True)
class Budgets:
    """Settings of ``{name: budgets, budgets, template}``.

    Attributes:
        budgets: the token budgets, one subgroup each (512, 1024, 2048, 2560); the group size
            must be a multiple of their count.
        template: the statement a reply of budget b starts with (``{budget}`` is b).
    """

    budgets: tuple[int, ...] = BUDGETS
    template: str = TEMPLATE

    def __post_init__(self) -> None:
        budgets = tuple(int(b) for b in self.budgets)
        if not budgets or min(budgets) < 1 or len(set(budgets)) != len(budgets):
            raise ValueError(f"budgets must be distinct token counts >= 1; got {list(budgets)}")
        if "{budget}" not in self.template:
            raise ValueError(f"template must contain {{budget}}; got {self.template!r}")
        object.__setattr__(self, "budgets", budgets)

    def play_draw(
        self, collector: Collector, problems: list[Problem], n: int, base: int
    ) -> Samples:
        """The draw: ``n`` samples of each problem, n / k per budget, sample j of problem i
        from the stream (base, i, j) as in a plain draw; each group's samples in budget order."""
        k = len(self.budgets)
        if n % k:
            raise ValueError(f"the budgets stage splits {n} samples into {k} equal subgroups")
        size = n // k
        keys = group_keys(base, len(problems), n).view(len(problems), n)
        played = []
        for j, budget in enumerate(self.budgets):
            stated = self.template.format(budget=budget)
            variant = [dataclasses.replace(p, response_prefix=stated) for p in problems]
            part = collector.play(variant, size, keys[:, j * size : (j + 1) * size].reshape(-1))
            played.append(dataclasses.replace(part, problems=problems))
        groups = []
        for g in range(len(problems)):
            group = played[0].groups([g])
            for part in played[1:]:
                group = group.add_rows(part.groups([g]))
            groups.append(group)
        return merge_shards(groups)

    def budget_of(self, n: int) -> torch.Tensor:
        """[n] the budget of each sample of a group of ``n``, in play order."""
        return torch.tensor(self.budgets, dtype=torch.float).repeat_interleave(
            n // len(self.budgets)
        )


@register_stage("budgets", Budgets)
def hbpo(state: DrawState, settings: Budgets) -> None:
    """The draw was played by :meth:`Budgets.play_draw`; nothing is left to do."""


@register_signal("budgets")
def budgets(draw: Draw) -> torch.Tensor:
    """[N] the budget of each sample's subgroup (the ``budgets`` stage's)."""
    found = [s for _, s in draw.collector.stages if isinstance(s, Budgets)]
    if not found:
        raise ValueError("advantage hbpo reads each sample's budget: add the budgets stage")
    return torch.cat([found[0].budget_of(size) for size in draw.sizes])
