"""GFPO's group filter (Shrivastava et al. 2025, "Sample More to Think Less: Group Filtered
Policy Optimization for Concise Reasoning", arXiv:2508.09726): each prompt's group is
oversampled (``oversample`` x G) and the G samples the criterion ranks best are kept
(:func:`rlvr.algorithms.group_filter`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr import algorithms
from rlvr.registry import check_params
from rlvr.trainer.stages.base import DrawState, register_stage


@dataclass(frozen=True)
class GroupFilter:
    """Settings of ``{name: group_filter, criterion, oversample, ...}``.

    Attributes:
        criterion: a registered criterion (:data:`rlvr.algorithms.GROUP_FILTERS`).
        oversample: k / G, the samples drawn per kept one (>= 2).
        params: the criterion's own keyword arguments (any other key of the entry).
    """

    criterion: str
    oversample: int
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.criterion not in algorithms.GROUP_FILTERS:
            raise ValueError(algorithms.GROUP_FILTERS.unknown(self.criterion))
        if not isinstance(self.oversample, int) or self.oversample < 2:
            raise ValueError(
                f"oversample must be an integer >= 2 (sample k > G), got {self.oversample}"
            )
        check_params(
            algorithms.GROUP_FILTERS[self.criterion], self.params, "params", ("rewards", "lengths")
        )


@register_stage("group_filter", GroupFilter)
def gfpo(state: DrawState, settings: GroupFilter) -> None:
    """Keep G of the n samples of each group (``state.keep``)."""
    collector, table = state.collector, state.table
    lengths = torch.tensor([len(c) for c in table.completion_ids])
    state.keep = algorithms.group_filter(
        table.rewards,
        table.group_ids,
        lengths,
        collector.cfg.rollout.group_size,
        settings.criterion,
        **settings.params,
    )
