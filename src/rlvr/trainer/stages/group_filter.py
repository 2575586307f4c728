"""GFPO's group filter (Shrivastava et al. 2025, "Sample More to Think Less: Group Filtered
Policy Optimization for Concise Reasoning", arXiv:2508.09726): each prompt's group is
oversampled (``group_filter_oversample`` x G) and the G samples the preset's filter ranks best
are kept (:func:`rlvr.algorithms.group_filter`)."""

from __future__ import annotations

import torch

from rlvr import algorithms
from rlvr.trainer.stages.base import DrawState, register_stage


@register_stage("group_filter", active=lambda cfg, algo: bool(algo.group_filter))
def gfpo(state: DrawState) -> None:
    """Keep G of the n samples of each group (``state.keep``)."""
    collector, table = state.collector, state.table
    algo = collector.algo
    lengths = torch.tensor([len(c) for c in table.completion_ids])
    state.keep = algorithms.group_filter(
        table.rewards,
        table.group_ids,
        lengths,
        collector.cfg.rollout.group_size,
        algo.group_filter,
        **algo.params.get("group_filter", {}),
    )
