"""S-GRPO (Dai et al. 2025, arXiv:2505.07686): the decaying reward by hand, the exit positions,
the serial groups as played (one path, its exits cut at the drawn positions, the exit phrase,
the rewards in serial order, Dr. GRPO's advantage), the preset from YAML, the refusals."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from test_lora import built
from test_trainer import step_rows, tiny_config

from rlvr import algorithms
from rlvr.config import ConfigError, build_config, load_config
from rlvr.rollout.streams import stream_key
from rlvr.trainer import train
from rlvr.trainer.stages.early_exit import EXITED, STREAMS, exit_positions


def test_the_decaying_reward_by_hand():
    # right, wrong, right, right, wrong: 1, 0, 1/2, 1/4, 0
    correct = torch.tensor([[True, False, True, True, False], [False] * 5])
    want = torch.tensor([[1.0, 0.0, 0.5, 0.25, 0.0], [0.0] * 5])
    assert torch.equal(algorithms.decaying_rewards(correct), want)
    # the first right answer scores 1 wherever it is; the full path (last) 1/8 after three
    correct = torch.tensor([[False, True, True, True]])
    assert algorithms.decaying_rewards(correct).tolist() == [[0.0, 1.0, 0.5, 0.25]]


def test_exit_positions_are_distinct_uniform_cuts_where_the_path_allows():
    g = torch.Generator().manual_seed(0)
    cuts = exit_positions(10, 4, g)
    assert cuts == sorted(cuts) and len(set(cuts)) == 4 and 1 <= min(cuts) and max(cuts) <= 9
    seen = torch.zeros(10)
    for _ in range(2000):  # every position 1..9 equally likely
        seen[exit_positions(10, 1, g)] += 1
    assert seen[0] == 0 and (seen[1:] / 2000 - 1 / 9).abs().max() < 0.03
    short = exit_positions(3, 4, g)  # 2 positions for 4 exits: repeats
    assert len(short) == 4 and set(short) <= {1, 2}
    assert exit_positions(1, 3, g) == [0, 0, 0]  # a one-token path: the phrase alone


def sgrpo_config(run_dir, steps: int = 1) -> dict:
    cfg = tiny_config(run_dir, steps=steps, algorithm={"preset": "sgrpo"})
    del cfg["algorithm"]["kl"]
    # letter_fraction counts as right from 0.5 on: the tiny model's replies are both
    cfg["algorithm"]["stages"] = [{"name": "early_exit", "threshold": 0.5}]
    return cfg


def test_each_group_is_a_path_and_its_exits_rewarded_in_serial_order(tmp_path):
    cfg = sgrpo_config(tmp_path / "run")
    n = cfg["rollout"]["group_size"]
    with built(cfg) as parts:
        collector = parts.collector
        data, metrics = collector.collect(1)
        tokenizer = collector.tokenizer
        step = parts.learners.prepare(data)
    P = len(data.problems)
    assert len(data) == P * n and data.group_ids.tolist() == [g for g in range(P) for _ in range(n)]
    draws = torch.Generator().manual_seed(stream_key(stream_key(0, 1, 0), STREAMS) % 2**63)
    phrase = algorithms.EXIT_PHRASE
    right = 0
    for g in range(P):
        rows = list(range(g * n, (g + 1) * n))
        path = data.completion_ids[rows[-1]]  # the full path comes last
        assert not data.given_tokens[rows[-1]]
        for row, cut in zip(rows[:-1], exit_positions(len(path), n - 1, draws), strict=True):
            stated = tokenizer.decode(path[:cut]) + phrase
            assert data.texts[row].startswith(stated)
            given = len(tokenizer(stated, add_special_tokens=False).input_ids)
            assert data.given_tokens[row] == given
        raw = torch.tensor([float(data.breakdown.total[i]) for i in rows])
        correct = raw >= 0.5
        right += int(correct[:-1].sum())
        want = algorithms.decaying_rewards(correct[None])[0]
        assert torch.equal(data.rewards[rows].float(), want)
    assert metrics[EXITED] == right
    adv = algorithms.dr_grpo(data.rewards.float(), data.group_ids)
    torch.testing.assert_close(step.advantages.float(), adv)


def test_the_sgrpo_preset_trains_from_yaml(tmp_path):
    path = tmp_path / "sgrpo.yaml"
    path.write_text(yaml.safe_dump(sgrpo_config(tmp_path / "run", steps=2)))
    train(load_config(path))
    rows = step_rows(tmp_path / "run")
    assert all(math.isfinite(rows[s]["policy/loss"]) for s in (1, 2))
    assert all(EXITED in rows[s] for s in (1, 2))


def test_early_exit_is_refused_where_it_has_no_meaning(tmp_path):
    cases = [
        ({"stages": [{"name": "dra"}, {"name": "early_exit"}]}, "must be the first stage"),
        (
            {"stages": [{"name": "early_exit"}, {"name": "error_correction"}]},
            "which error_correction would change",
        ),
        ({"preset": "online_dpo", "stages": [{"name": "early_exit"}]}, "not objective 'dpo'"),
        ({"expert": {"traces": 1}}, "not the data's or expert traces"),
    ]
    for i, (change, message) in enumerate(cases):
        cfg = sgrpo_config(tmp_path / str(i))
        cfg["algorithm"].update(change)
        with pytest.raises(ConfigError, match=message):
            build_config(cfg)
    cfg = sgrpo_config(tmp_path / "one")
    cfg["rollout"]["group_size"] = 1
    with pytest.raises(ConfigError, match="group_size >= 2"):
        build_config(cfg)
