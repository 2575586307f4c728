"""Every bad input to `rlvr train` is one clear error (exit 2) naming the file, row or key, with
no traceback; a hanging user reward times out."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from test_trainer import tiny_config
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.config import build_config
from rlvr.logging import read_metrics
from rlvr.rewards.protocol import RewardError
from rlvr.trainer import train


def _train_cli(tmp_path: Path, **sections) -> tuple[int, str]:
    cfg = tiny_config(tmp_path / "run", steps=1, **sections)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    result = CliRunner().invoke(app, ["train", str(path)], prog_name="rlvr")
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), repr(result.exception)
    return result.exit_code, result.output


def _file_task(path: Path, **extra) -> dict:
    return {"name": "file", "path": str(path), **extra}


GOOD = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(20)]


def _jsonl(rows: list) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


CASES = {
    "empty file": (b"", ["data.jsonl", "empty"]),
    "non-UTF-8 byte": (_jsonl(GOOD[:3]) + b'{"prompt": "caf\xe9", "answer": "1"}\n', ["line 4"]),
    "list-typed prompt": (_jsonl([*GOOD[:3], {"prompt": [2, 3], "answer": "5"}]), ["line 4"]),
    "null answer": (_jsonl([*GOOD[:3], {"prompt": "x?", "answer": None}]), ["line 4", "answer"]),
    "missing column": (_jsonl([{"question": "x", "answer": "1"}]), ["'prompt'", "question"]),
    "malformed json line": (_jsonl(GOOD[:2]) + b'{"prompt": "x", \n', ["line 3"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_data_file_is_one_clear_error(tmp_path, case):
    content, expected = CASES[case]
    data = tmp_path / "data.jsonl"
    data.write_bytes(content)
    code, output = _train_cli(tmp_path, task=_file_task(data))
    assert code == 2, output
    assert "Traceback" not in output and "data.jsonl" in output, output
    for text in expected:
        assert text in output, (text, output)
    assert not (tmp_path / "run").exists()  # failed before step 1: nothing left behind


@pytest.mark.parametrize(
    ("sections", "expected"),
    [
        ({"task": {"name": "file", "path": "nope/gsm8k"}}, "nope/gsm8k"),
        ({"model": {"name": "/nonexistent/model-dir"}}, "/nonexistent/model-dir"),
        ({"reward": {"function": "rewards_for_tests:takes_one_argument"}}, "takes_one_argument"),
        ({"reward": {"function": "no_such_module:f"}}, "no_such_module"),
        ({"reward": {"function": "rewards_for_tests:answer_as_string"}}, "str"),
        ({"train": {"lr": -1}}, "train.lr"),
    ],
)
def test_bad_model_dataset_reward_or_key_is_one_clear_error(tmp_path, sections, expected):
    code, output = _train_cli(tmp_path, **sections)
    assert code == 2, output
    assert "Traceback" not in output and expected in output, output


def test_duplicate_rows_are_dropped_before_the_split_and_counted(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_bytes(_jsonl(GOOD + GOOD[:5]))
    train(build_config(tiny_config(tmp_path / "run", steps=1, task=_file_task(data))))
    first = read_metrics(tmp_path / "run")[0]
    assert first["data/duplicates_dropped"] == 5
    assert first["data/train_rows"] + first["data/eval_rows"] == 20


def test_a_hanging_reward_function_times_out(tmp_path):
    reward = {"function": "rewards_for_tests:hangs_after_probe", "timeout_s": 0.3}
    start = time.perf_counter()
    with pytest.raises(RewardError, match="hangs_after_probe"):
        train(build_config(tiny_config(tmp_path / "a", steps=1, reward=reward)))
    assert time.perf_counter() - start < 30
    zero = {**reward, "on_error": "zero"}
    train(build_config(tiny_config(tmp_path / "b", steps=1, reward=zero)))
    row = [r for r in read_metrics(tmp_path / "b") if r["step"] == 1][0]
    assert row["reward/errors"] > 0 and row["reward/mean"] == 0.0


def test_a_config_file_that_does_not_parse_is_one_clear_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: {name: file\n  path: [\n")
    result = CliRunner().invoke(app, ["train", str(bad)], prog_name="rlvr")
    assert result.exit_code == 2 and "does not parse" in result.output, result.output
    assert "bad.yaml" in result.output and "Traceback" not in result.output


def test_an_unknown_reasoning_gym_dataset_is_a_config_error(tmp_path):
    code, output = _train_cli(tmp_path, task={"name": "reasoning_gym:nope"})
    assert code == 2 and "unknown reasoning-gym dataset 'nope'" in output, output


def test_a_failed_run_leaves_no_parent_directories_behind(tmp_path):
    run_dir = tmp_path / "runs" / "deep" / "run"
    cfg = build_config(tiny_config(run_dir, steps=1, model={"name": str(tmp_path / "nope")}))
    with pytest.raises(ValueError):
        train(cfg)
    assert not (tmp_path / "runs").exists()
