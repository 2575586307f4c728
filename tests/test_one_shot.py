"""1-shot RLVR (Wang et al. 2025, "Reinforcement Learning for Reasoning in Large Language Models
with One Training Example", arXiv:2504.20571) as a combination of keys: a file task whose one
training row is every group's problem (``task.split_column`` holds the others out for
evaluation), GRPO with an entropy bonus (``algorithm.entropy.coef``)."""

from __future__ import annotations

import json
import math

from test_lora import built
from test_trainer import step_rows, tiny_config

from rlvr.config import build_config
from rlvr.trainer import train


def one_shot_config(tmp_path, steps: int) -> dict:
    rows = [{"prompt": "What is 2 + 3?", "answer": "5", "split": "train"}]
    rows += [
        {"prompt": f"What is {a} + 1?", "answer": str(a + 1), "split": "test"} for a in range(4)
    ]
    path = tmp_path / "one.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = {"name": "file", "path": str(path), "split_column": "split", "n_eval": 4}
    cfg = tiny_config(tmp_path / "run", steps=steps, algorithm={"entropy": {"coef": 0.001}})
    cfg["task"] = task
    return cfg


def test_one_shot_rlvr_trains_every_group_on_its_single_example(tmp_path):
    cfg = one_shot_config(tmp_path, steps=2)
    with built(cfg) as parts:
        held_out = [p.prompt for p in parts.task.eval_problems()]
        assert [p.split("\n")[0] for p in held_out] == [f"What is {a} + 1?" for a in range(4)]
        for step in (1, 2):
            data, _ = parts.collector.collect(step)
            assert {p.prompt.split("\n")[0] for p in data.problems} == {"What is 2 + 3?"}
            assert len({p.id for p in data.problems}) == 1
            assert len(data.problems) == cfg["rollout"]["prompts_per_step"]
    cfg["logging"]["run_dir"] = str(tmp_path / "yaml")
    train(build_config(cfg))
    rows = step_rows(tmp_path / "yaml")
    assert sorted(rows) == [1, 2] and all(math.isfinite(r["policy/loss"]) for r in rows.values())
    assert all(r["policy/entropy"] > 0 for r in rows.values())
