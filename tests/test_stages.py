"""Draw stages as registered functions: the algorithm names them in order (``algorithm.stages``,
each with its settings), and a user's stage is one registered function and its settings, run
with no edit of the collector."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from test_trainer import tiny_config

from rlvr.config import build_config
from rlvr.trainer.backends import build_parts
from rlvr.trainer.build import resolve_algorithm
from rlvr.trainer.stages import STAGES, DrawState, Stage, oversample, stages_for


def test_the_algorithms_stages_run_in_its_order_with_their_settings(tmp_path):
    """Stages that read the whole draw run in the listed order, before the group selection;
    replay (after the selection) runs after them wherever it is listed."""
    stages = [
        {"name": "replay", "replayed": 2},
        {"name": "group_filter", "criterion": "shortest", "oversample": 2},
        {"name": "hints", "fractions": [0.5]},
    ]
    algorithm = {"correction": {"tis_cap": 2.0}, "stages": stages}
    cfg = build_config(tiny_config(tmp_path / "run", algorithm=algorithm))
    algo = resolve_algorithm(cfg)
    run = stages_for(algo)
    assert [stage for stage, _ in run] == [STAGES[n] for n in ("group_filter", "hints", "replay")]
    assert run[0][1].oversample == 2 and run[1][1].fractions == (0.5,)
    assert (run[2][1].replayed, run[2][1].buffer) == (2, 16)
    assert oversample(algo) == 2
    plain = build_config(tiny_config(tmp_path / "run"))
    assert stages_for(resolve_algorithm(plain)) == []


@dataclass(frozen=True)
class FirstPart:
    """Settings of the test's stage: keep the first ``keep`` of each group's n samples."""

    keep: int = 2


def first_part(state: DrawState, settings: FirstPart) -> None:
    ids = state.table.group_ids[state.keep]
    rank = torch.tensor([int((ids[:i] == g).sum()) for i, g in enumerate(ids)])
    state.keep = state.keep[rank < settings.keep]


def test_a_users_stage_filters_the_draw_with_no_edit_of_the_collector(tmp_path, monkeypatch):
    monkeypatch.setitem(STAGES, "first_part", Stage(first_part, FirstPart))
    algorithm = {"stages": [{"name": "first_part", "keep": 2}]}
    parts = build_parts(build_config(tiny_config(tmp_path / "run", algorithm=algorithm)))
    data, metrics = parts.collector.collect(1)
    assert len(data) == 4 and data.group_ids.tolist() == [0, 0, 1, 1]  # 2 of each group of 4
    assert metrics["sampling/groups_kept"] == 2.0


def test_replay_refuses_a_column_its_buffer_cannot_rebuild():
    """RePO's replayed samples are rebuilt from the buffer's fields: a batch whose samples carry
    another column (a plug-in's) is refused by name, not joined short of it."""
    from types import SimpleNamespace

    import pytest
    from test_parts import _table

    from rlvr.trainer.stages.replay import REPLAYED, Replay, ReplayBuffer, repo

    table = _table(2, 4, 0, token_scores=[[0.1]] * 4)
    collector = SimpleNamespace(replay=ReplayBuffer(1, 2), counts={REPLAYED: 0.0})
    state = DrawState(collector, table, torch.arange(4), 2, 0, batch=table)
    with pytest.raises(ValueError, match="token_scores, which it cannot replay"):
        repo(state, Replay(1, 2))
    plain = _table(2, 4, 0)
    state = DrawState(collector, plain, torch.arange(4), 2, 0, batch=plain)
    repo(state, Replay(1, 2))  # the buffer's own columns: stored, nothing to replay yet
    assert len(state.batch) == 4 and collector.counts[REPLAYED] == 0.0
