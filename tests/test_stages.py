"""Draw stages as registered functions: the built-ins run in their order when the run asks for
them, and a user's stage is one registered function, run with no edit of the collector."""

from __future__ import annotations

import torch
from test_trainer import tiny_config

from rlvr.config import build_config
from rlvr.trainer.backends import build_parts
from rlvr.trainer.build import resolve_algorithm
from rlvr.trainer.stages import STAGES, DrawState, Stage, stages_for


def test_the_built_in_stages_run_in_order_when_the_run_asks_for_them(tmp_path):
    cfg = build_config(
        tiny_config(
            tmp_path / "run",
            rollout={"hints": [0.5], "replay": 2},
            algorithm={"tis_cap": 2.0, "group_filter": "shortest", "group_filter_oversample": 2},
        )
    )
    assert stages_for(cfg, resolve_algorithm(cfg)) == ["hints", "group_filter", "replay"]
    plain = build_config(tiny_config(tmp_path / "run"))
    assert stages_for(plain, resolve_algorithm(plain)) == []


def first_half(state: DrawState) -> None:
    """Keep the first half of each group's samples."""
    ids = state.table.group_ids[state.keep]
    rank = torch.tensor([int((ids[:i] == g).sum()) for i, g in enumerate(ids)])
    state.keep = state.keep[rank < state.n // 2]


def test_a_users_stage_filters_the_draw_with_no_edit_of_the_collector(tmp_path, monkeypatch):
    monkeypatch.setitem(STAGES, "first_half", Stage(first_half, lambda cfg, algo: True))
    parts = build_parts(build_config(tiny_config(tmp_path / "run")))
    data, metrics = parts.collector.collect(1)
    assert len(data) == 4 and data.group_ids.tolist() == [0, 0, 1, 1]  # 2 of each group of 4
    assert metrics["sampling/groups_kept"] == 2.0


def test_replay_refuses_a_column_its_buffer_cannot_rebuild():
    """RePO's replayed samples are rebuilt from the buffer's fields: a batch whose samples carry
    another column (a plug-in's) is refused by name, not joined short of it."""
    from types import SimpleNamespace

    import pytest
    from test_parts import _table

    from rlvr.trainer.stages.replay import REPLAYED, ReplayBuffer, repo

    table = _table(2, 4, 0, token_scores=[[0.1]] * 4)
    collector = SimpleNamespace(replay=ReplayBuffer(1, 2), counts={REPLAYED: 0.0})
    state = DrawState(collector, table, torch.arange(4), 2, 0, batch=table)
    with pytest.raises(ValueError, match="token_scores, which it cannot replay"):
        repo(state)
    plain = _table(2, 4, 0)
    state = DrawState(collector, plain, torch.arange(4), 2, 0, batch=plain)
    repo(state)  # the buffer's own columns: stored, nothing to replay yet
    assert len(state.batch) == 4 and collector.counts[REPLAYED] == 0.0
