"""The ``rlvr`` command line: help, listings, error exits, and one real train + eval run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rlvr.cli import app

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def run(*args: str):
    """Invoke the app in-process; the result's output has ANSI codes stripped."""
    result = CliRunner().invoke(app, list(args), prog_name="rlvr")
    result.clean = ANSI.sub("", result.output)
    result.flat = " ".join(result.clean.split())  # rich wraps long lines at the console width
    return result


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty rlvr model cache for this test (tiny models are rebuilt there)."""
    path = tmp_path / "cache"
    monkeypatch.setenv("RLVR_CACHE", str(path))
    return path


# ---------------------------------------------------------------- help


def test_app_help() -> None:
    result = run("--help")
    assert result.exit_code == 0, result.output
    assert "Example: rlvr train configs/demo.yaml --set train.steps=2" in result.flat
    for command in ("train", "eval", "tasks", "algorithms"):
        assert command in result.clean


def test_no_args_shows_help() -> None:
    result = run()
    assert "Usage:" in result.clean and "train" in result.clean


@pytest.mark.parametrize(
    ("command", "example"),
    [
        ("train", "rlvr train configs/demo.yaml --set train.steps=2 --set rollout.group_size=4"),
        ("train", "rlvr train --resume runs/20261121-120000-arithmetic"),
        ("eval", "rlvr eval smollm2-135m-instruct --task arithmetic --level 2"),
        ("tasks", "Example: rlvr tasks"),
        ("algorithms", "rlvr algorithms dapo"),
    ],
)
def test_command_help_shows_example(command: str, example: str) -> None:
    result = run(command, "--help")
    assert result.exit_code == 0, result.output
    assert f"Usage: rlvr {command}" in result.flat
    assert example in result.flat


# ---------------------------------------------------------------- listings


def test_tasks_lists_builtin_tasks(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    result = run("tasks")
    assert result.exit_code == 0, result.output
    names = re.findall(r"^│ (\w+)", result.clean, flags=re.M)
    from rlvr.data import TASKS

    assert names == [name.split(":")[0] for name in TASKS]
    assert {"arithmetic", "file", "countdown", "reasoning_gym"} <= set(names)
    assert "levels 1-8" in result.flat


def test_curricula_lists_samplers(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    result = run("curricula")
    assert result.exit_code == 0, result.output
    names = re.findall(r"^│ (\w+)", result.clean, flags=re.M)
    assert sorted(names) == ["dump", "knapsack", "saturation", "sec", "sequential", "spo", "vcrl"]
    assert "Self-Evolving Curriculum" in result.flat


def test_algorithms_lists_presets(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # one table row per line
    result = run("algorithms")
    assert result.exit_code == 0, result.output
    presets = result.clean.split("registered parts")[0]  # then the registered parts by key
    names = re.findall(r"^│ (\w+)", presets, flags=re.M)
    from rlvr.algorithms import PRESETS

    assert names == list(PRESETS) and len(names) == 45
    assert "0.2/0.28" in result.clean  # dapo's clip-higher
    dpo = next(line for line in presets.splitlines() if line.startswith("│ dpo "))
    assert "dpo on the data" in dpo  # its objective, and where its completions come from
    papers = result.clean.split("and their papers")[1]  # each advantage and loss with its paper
    for name, arxiv in [
        ("unlikeliness", "2506.02355"),
        ("rl_zvp", "2509.21880"),
        ("bnpo", "2506.02864"),
        ("noisy_verifier", "2510.00915"),
        ("clip_cov", "2505.22617"),
        ("kl_cov", "2505.22617"),
        ("dppo_tv", "2602.04879"),
        ("sapo", "2511.20347"),
    ]:
        line = next(row for row in papers.splitlines() if f"│ {name} " in row)
        assert f"arXiv:{arxiv}" in line, line


def test_algorithms_shows_one_preset() -> None:
    result = run("algorithms", "dapo")
    assert result.exit_code == 0, result.output
    rows = dict(re.findall(r"^│ (\w+)\s+│ (.+?)\s*│$", result.clean, flags=re.M))
    assert "preset dapo" in result.clean
    assert "clip_low: 0.2, clip_high: 0.28" in rows["policy_loss"]
    assert rows["aggregation"] == "name: token-mean" and rows["kl"].startswith("beta: 0.0")
    assert rows["select"] == "name: informative, max_draws: 10"


def test_algorithms_unknown_preset_fails() -> None:
    result = run("algorithms", "nope")
    assert result.exit_code != 0
    assert "unknown preset 'nope'" in result.flat
    assert "dapo" in result.flat and "gspo" in result.flat and "reinforce_pp" in result.flat


# ---------------------------------------------------------------- train / eval errors


def test_train_unknown_key_exits_2(tmp_path, cache) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("model:\n  name: tiny-random-llama\ntrain:\n  stepz: 2\n")
    result = run("train", str(config))
    assert result.exit_code == 2, result.output
    assert "train.stepz: unknown key" in result.flat
    assert "steps" in result.flat and "micro_batch_size" in result.flat
    assert "Traceback" not in result.output
    assert not (tmp_path / "runs").exists() and not cache.exists()


def test_train_bad_override_exits_2(tmp_path, cache) -> None:
    config = tmp_path / "ok.yaml"
    config.write_text("model:\n  name: tiny-random-llama\n")
    result = run("train", str(config), "--set", "algorithm.preset=foo")
    assert result.exit_code == 2, result.output
    assert "algorithm.preset: unknown preset 'foo'; registered:" in result.flat
    assert "grpo" in result.flat


def test_train_missing_config_file_exits_2(tmp_path) -> None:
    result = run("train", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2, result.output
    assert "config file not found" in result.flat and "nope.yaml" in result.flat


def test_train_without_config_or_resume_fails() -> None:
    result = run("train")
    assert result.exit_code == 2, result.output
    assert "give a CONFIG file, or --resume RUN_DIR" in result.flat


def test_train_resume_needs_run_dir(tmp_path) -> None:
    result = run("train", "--resume", str(tmp_path))
    assert result.exit_code == 2, result.output
    assert "is not a run directory (no config.yaml)" in result.flat


def test_eval_errors_exit_2(tmp_path, cache) -> None:
    result = run("eval", "no-such-model")
    assert result.exit_code == 2, result.output
    assert "unknown model 'no-such-model'" in result.flat and "tiny-random-llama" in result.flat
    result = run("eval", "tiny-random-llama", "--task", "file")
    assert result.exit_code == 2, result.output
    assert "task.path is required" in result.flat
    empty_run = tmp_path / "run"
    (empty_run / "checkpoints").mkdir(parents=True)
    result = run("eval", str(empty_run))
    assert result.exit_code == 2, result.output
    assert "has no complete checkpoint" in result.flat


# ---------------------------------------------------------------- end to end


def test_train_then_eval_end_to_end(tmp_path, cache) -> None:
    run_dir = tmp_path / "runs" / "e2e"
    config = tmp_path / "tiny.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": {"name": "tiny-random-llama"},
                "task": {"name": "arithmetic", "level": 1, "n_eval": 8},
                "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 8},
                "train": {"steps": 2, "micro_batch_size": 4},
                "eval": {"n_prompts": 4},
                "logging": {"run_dir": str(run_dir), "progress": False, "tensorboard": True},
                "checkpoint": {"every": 1},
            }
        )
    )
    result = run("train", str(config), "--set", "train.lr=0.001")
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "greedy accuracy" in result.flat and "steps: 2" in result.flat
    assert "before" in result.flat and "after" in result.flat and "points" in result.flat
    assert "run directory:" in result.flat and str(run_dir) in result.clean.replace("\n", "")
    assert (cache / "models" / "tiny-random-llama" / "config.json").is_file()

    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["train"]["lr"] == 0.001 and saved["train"]["steps"] == 2
    assert saved["model"]["name"] == "tiny-random-llama"

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 2]  # eval before, two steps, eval after
    assert "eval/greedy_accuracy" in rows[0] and "policy/loss" not in rows[0]
    for row in rows[1:3]:
        assert "policy/loss" in row and "reward/mean" in row
        assert row["lr"] == pytest.approx(0.001)
    assert "eval/greedy_accuracy" in rows[3]
    assert all(0.0 <= r["eval/greedy_accuracy"] <= 1.0 for r in (rows[0], rows[3]))

    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {s["step"] for s in samples} == {1, 2}
    assert set(samples[0]) == {"step", "prompt", "answer", "completion", "reward", "terms"}
    assert set(samples[0]["terms"]) == {"task"}  # the task verifier is the one reward term
    assert re.search(r"What is \d \+ \d\?", samples[0]["prompt"])

    events = list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0

    final = run_dir / "checkpoints" / "step_000002"
    for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng.pt", "state.json"):
        assert (final / name).is_file(), name
    assert json.loads((final / "state.json").read_text()) == {
        "step": 2,
        "sampler": {"position": 4},
        "skipped_nonfinite": 0,
        "data_sha256": None,  # a procedural task: its config fixes its data
        "policy_version": 2,
        "minibatches": 2,  # one per step (Clip-Cov's stream counts them)
        "replay": {},  # no replay buffer (rollout.replay: 0)
        "stages": {},  # no draw stage with a state (G2RPO-A's guidance length)
        "temperature": None,  # no adaptive temperatures (HAPO's, rollout.temperature_tau)
    }

    result = run("eval", str(run_dir), "--level", "1", "--n-prompts", "4", "--max-new-tokens", "8")
    assert result.exit_code == 0, result.output + repr(result.exception)
    report = json.loads(result.clean[result.clean.index("{") :])
    assert report["model"] == str(final)
    assert report["task"] == "arithmetic" and report["n_prompts"] == 4
    assert 0.0 <= report["accuracy"] <= 1.0
    assert 0 < report["length_mean"] <= 8  # --max-new-tokens 8


def test_summary_table_has_a_column_per_category(capsys, monkeypatch) -> None:
    from rlvr import cli

    monkeypatch.setenv("COLUMNS", "200")
    row = {"eval/greedy_accuracy": 0.5, "eval/sampled_accuracy": 0.4}
    cli._print_summary(
        {
            "before": {**row, "eval/greedy_accuracy/L1": 0.75, "eval/greedy_accuracy/L3": 0.25},
            "after": {**row, "eval/greedy_accuracy/L1": 1.0, "eval/greedy_accuracy/L3": 0.5},
            "steps": 2,
            "wall_seconds": 60.0,
            "run_dir": "runs/x",
        }
    )
    out = capsys.readouterr().out
    assert "greedy L1" in out and "greedy L3" in out
    assert re.search(r"before\s*│\s*50\.0%\s*│\s*40\.0%\s*│\s*75\.0%\s*│\s*25\.0%", out)
    assert re.search(r"after\s*│\s*50\.0%\s*│\s*40\.0%\s*│\s*100\.0%\s*│\s*50\.0%", out)
