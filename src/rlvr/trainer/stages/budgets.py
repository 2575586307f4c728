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

from rlvr.algorithms.hbpo import BUDGETS, TEMPLATE, budget_pattern
from rlvr.rollout.streams import group_keys
from rlvr.trainer.batch import Samples
from rlvr.trainer.signals import Draw, register_signal
from rlvr.trainer.stages.base import DrawState, register_stage

if TYPE_CHECKING:
    from rlvr.data import Problem
    from rlvr.trainer.collect import Collector


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
        budget_pattern(self.template)  # {budget} once: the reward finds the statement
        object.__setattr__(self, "budgets", budgets)

    def play_draw(
        self, collector: Collector, problems: list[Problem], n: int, base: int
    ) -> Samples:
        """The draw in one engine call: ``n`` samples of each problem, n / k per budget (the
        variant of problem i with budget j is played i k + j), sample j of problem i from the
        stream (base, i, j) as in a plain draw; each group's samples in budget order."""
        k = len(self.budgets)
        if n % k:
            raise ValueError(f"the budgets stage splits {n} samples into {k} equal subgroups")
        statements = [self.template.replace("{budget}", str(b)) for b in self.budgets]
        variants = [
            dataclasses.replace(p, response_prefix=stated)
            for p in problems
            for stated in statements
        ]
        keys = group_keys(base, len(problems), n)  # [P n]: problem-major, as the variants' rows
        played = collector.play(variants, n // k, keys)
        return dataclasses.replace(
            played,
            problems=problems,
            prompt_ids=played.prompt_ids[::k],  # a variant's prompt is its problem's
            columns={**played.columns, "group_ids": played.group_ids // k},
            group_columns={name: rows[::k] for name, rows in played.group_columns.items()},
        )

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
