"""GHPO's hint-guided rollouts (Liu et al. 2025, "GHPO: Adaptive Guidance for Stable and
Efficient LLM Reinforcement Learning", arXiv:2507.10628; :mod:`rlvr.data.hints`): a group whose
every sample failed is played again with the first part of its reference solution in the prompt,
so it gives a learning signal."""

from __future__ import annotations

import torch

from rlvr.data import hints
from rlvr.rollout.streams import group_keys
from rlvr.trainer.batch import Samples
from rlvr.trainer.rollouts import merge_shards
from rlvr.trainer.stages.base import DrawState, register_stage

HINTED = "sampling/hinted_groups"


@register_stage("hints", active=lambda cfg, algo: bool(cfg.rollout.hints), counts=(HINTED,))
def ghpo(state: DrawState) -> None:
    """Each group whose every sample scored below ``rollout.hint_threshold`` is played again
    with the first fraction of ``rollout.hints`` of its solution in the prompt, then the next
    while it still fails; the last hinted group replaces it (its problem, now hinted, and its
    samples, in the original group order). Group i hinted at its k-th fraction samples from the
    stream (base, P k + i, j). The reward metrics and episode counts are taken as each part is
    played; the prompt sampler has heard the unhinted rewards: the problems' own difficulty."""
    collector, table, n = state.collector, state.table, state.n
    problems, rewards = table.problems, table.rewards
    if collector.algo.samples != "policy" or len(rewards) != len(problems) * n:
        raise ValueError("rollout.hints apply to the policy's own groups of one size")
    settings = collector.cfg.rollout
    replaced: dict[int, Samples] = {}
    failing = [g for g in range(len(problems)) if _failed(rewards[g * n : (g + 1) * n], settings)]
    for k, fraction in enumerate(settings.hints, start=1):
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


def _failed(rewards: torch.Tensor, settings) -> bool:
    """Every reward of a group below ``rollout.hint_threshold``."""
    return bool((rewards < settings.hint_threshold).all())
