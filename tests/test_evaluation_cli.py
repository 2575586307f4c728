"""`rlvr eval` (sampling, parquet + summary, --rescore) and `rlvr compare`, end to end."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.config import TaskConfig, build_config, save_config

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def run(*args: str):
    result = CliRunner().invoke(app, list(args), prog_name="rlvr")
    result.clean = ANSI.sub("", result.output)
    result.flat = " ".join(result.clean.split())
    return result


def last_json(text: str) -> dict:
    return json.loads(text[text.rindex("\n{") + 1 :] if "\n{" in text else text)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("RLVR_CACHE", str(path))
    return path


# ---------------------------------------------------------------- rlvr eval


def test_eval_writes_samples_and_rescore_reproduces(tmp_path, cache) -> None:
    out = tmp_path / "ev"
    args = ["--task", "arithmetic", "--level", "1", "--n", "4", "--k", "1,2,4"]
    result = run(
        "eval", "tiny-random-llama", *args, "--n-prompts", "3", "--max-new-tokens", "8",
        "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "pass@k" in result.flat and "maj@k" in result.flat and "answer entropy" in result.flat
    printed = last_json(result.clean)
    assert printed["n"] == 4 and printed["n_prompts"] == 3 and printed["temperature"] == 1.0

    table = pq.read_table(out / "samples.parquet").to_pylist()
    assert len(table) == 12
    assert sorted((r["problem_index"], r["sample_index"]) for r in table) == [
        (p, s) for p in range(3) for s in range(4)
    ]
    assert all(1 <= r["num_tokens"] <= 8 for r in table)
    assert all(re.search(r"What is \d \+ \d\?", r["prompt"]) for r in table)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ks"] == [1, 2, 4] and summary["n"] == 4
    assert summary["task"]["name"] == "arithmetic" and summary["task"]["level"] == 1
    assert summary["sampling"]["max_new_tokens"] == 8
    for key in ("pass@1", "pass@4", "maj@2", "mean@4", "answer_entropy", "length_mean"):
        assert key in summary["metrics"] and key in summary["ci"]
        assert printed[key] == pytest.approx(summary["metrics"][key])

    result = run("eval", "--rescore", str(out))
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "0 score(s) changed" in result.flat
    rescored = json.loads((out / "summary.json").read_text())
    assert rescored["metrics"] == summary["metrics"] and rescored["ci"] == summary["ci"]

    # Tampering with a stored completion changes exactly that score on --rescore.
    rows = pq.read_table(out / "samples.parquet")
    data = rows.to_pylist()
    data[0]["completion"] = f"so the result is\nAnswer: {data[0]['answer']}"
    pq.write_table(type(rows).from_pylist(data, schema=rows.schema), out / "samples.parquet")
    # A metric rescoring does not compute (another version's) is kept and listed as such.
    stored = json.loads((out / "summary.json").read_text())
    stored["metrics"]["custom@1"], stored["ci"]["custom@1"] = 0.5, [0.25, 0.75]
    (out / "summary.json").write_text(json.dumps(stored))
    result = run("eval", "--rescore", str(out), "--k", "1,3")
    assert result.exit_code == 0, result.output
    assert "1 score(s) changed" in result.flat and "kept, not recomputed: custom@1" in result.flat
    rescored = json.loads((out / "summary.json").read_text())
    # --k adds k=3; the earlier ks are recomputed, none is dropped
    assert rescored["ks"] == [1, 2, 3, 4]
    assert {"pass@2", "maj@2", "pass@3", "maj@3", "pass@4"} <= set(rescored["metrics"])
    assert rescored["metrics"]["custom@1"] == 0.5 and rescored["ci"]["custom@1"] == [0.25, 0.75]
    assert rescored["not_rescored"] == ["custom@1"]
    fixed = 0.0 if table[0]["correct"] else 1.0  # its problem gains one correct sample of 4
    assert rescored["metrics"]["mean@4"] == pytest.approx(summary["metrics"]["mean@4"] + fixed / 12)
    c0 = sum(r["correct"] for r in table if r["problem_index"] == table[0]["problem_index"])
    gain = 0.0 if table[0]["correct"] else (math.comb(4 - c0, 2) - math.comb(3 - c0, 2)) / 6 / 3
    assert rescored["metrics"]["pass@2"] == pytest.approx(summary["metrics"]["pass@2"] + gain)


def test_eval_greedy_default_and_run_defaults(tmp_path, cache) -> None:
    result = run(
        "eval", "tiny-random-llama", "--level", "1", "--n-prompts", "2", "--max-new-tokens", "4",
        "--out", str(tmp_path / "greedy"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output + repr(result.exception)
    summary = json.loads((tmp_path / "greedy" / "summary.json").read_text())
    assert summary["sampling"]["temperature"] == 0.0 and summary["n"] == 1
    assert summary["ks"] == [1] and summary["run_dir"] is None
    assert summary["metrics"]["accuracy"] == summary["metrics"]["pass@1"]


def test_eval_input_errors_exit_2(tmp_path, cache) -> None:
    result = run("eval", "tiny-random-llama", "--n", "4", "--k", "1,8")
    assert result.exit_code == 2, result.output
    assert "k=8 must be between 1 and n=4" in result.flat
    result = run("eval", "tiny-random-llama", "--k", "1,x")
    assert result.exit_code == 2 and "'x' is not an integer" in result.flat
    result = run("eval", "--rescore", str(tmp_path))
    assert result.exit_code == 2 and "is not an eval directory (no summary.json)" in result.flat
    result = run("eval", "tiny-random-llama", "--rescore", str(tmp_path))
    assert result.exit_code == 2 and "not both" in result.flat
    result = run("eval")
    assert result.exit_code == 2 and "give a MODEL" in result.flat
    result = run("eval", "tiny-random-llama", "--device", "tpu-9")
    assert result.exit_code == 2 and "--device 'tpu-9'" in result.flat


def _word_problems(path: Path, rows: int = 40) -> Path:
    """A user's own file task: a jsonl with a `question` and an `answer` column."""
    lines = [
        json.dumps({"question": f"What is {i} plus 1?", "answer": str(i + 1)}) for i in range(rows)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_base_model_and_run_are_scored_on_the_same_problems(tmp_path, cache) -> None:
    from test_trainer import tiny_config

    from rlvr import evaluate
    from rlvr.trainer import train

    data = _word_problems(tmp_path / "problems.jsonl")
    task = {"name": "file", "path": str(data), "prompt_column": "question", "n_eval": 5}
    run_dir = tmp_path / "run"
    settings = {"n_prompts": 4, "max_new_tokens": 6, "after": True}
    summary = train(build_config(tiny_config(run_dir, steps=1, task=task, eval=settings)))
    tuned = evaluate(run_dir, progress=False)  # the run's own task and eval settings
    # the same numbers as the trainer's own held-out evaluation, sample for sample
    after = summary["after"]
    assert tuned["metrics"]["length_mean"] == pytest.approx(after["eval/greedy_length_mean"])
    assert tuned["metrics"]["accuracy"] == pytest.approx(after["eval/greedy_accuracy"])
    assert tuned["out_dir"] == str(run_dir / "eval-step_000001")
    assert tuned["settings_from"] == f"run {run_dir}" and tuned["checkpoint"] == "step_000001"
    assert tuned["task"]["path"] == str(data) and tuned["task"]["prompt_column"] == "question"
    assert tuned["sampling"]["max_new_tokens"] == 6 and tuned["sampling"]["temperature"] == 0.0
    ids = tuned["problems"]["ids"]
    assert len(ids) == 4 == tuned["n_prompts"] and all(i.startswith("file-eval-") for i in ids)

    base = evaluate("tiny-random-llama", like=run_dir, out=tmp_path / "base", progress=False)
    assert base["problems"] == tuned["problems"] and base["task"] == tuned["task"]
    assert base["sampling"] == tuned["sampling"] and base["settings_from"] == f"like {run_dir}"

    # The same task from the command line, as training's --set keys.
    result = run(
        "eval", "tiny-random-llama", "--set", "task.name=file", "--set", f"task.path={data}",
        "--set", "task.prompt_column=question", "--set", "task.n_eval=5", "--n-prompts", "4",
        "--max-new-tokens", "6", "--out", str(tmp_path / "base-cli"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output + repr(result.exception)
    cli = json.loads((tmp_path / "base-cli" / "summary.json").read_text())
    assert cli["problems"] == tuned["problems"]
    assert last_json(result.clean)["problems_sha256"] == tuned["problems"]["sha256"]
    rows = pq.read_table(tmp_path / "base-cli" / "samples.parquet").to_pylist()
    assert [r["problem_id"] for r in rows] == ids
    assert rows[0]["prompt"].startswith("What is ")

    # `rlvr eval --like RUN` likewise; --set then changes the task on top of the run's.
    result = run(
        "eval", "tiny-random-llama", "--like", str(run_dir), "--set", "task.n_eval=2",
        "--out", str(tmp_path / "base-like"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output + repr(result.exception)
    like = json.loads((tmp_path / "base-like" / "summary.json").read_text())
    assert like["problems"]["ids"] == ids[:2] and like["task"]["prompt_column"] == "question"
    assert "fewer than eval.n_prompts=4" in result.flat  # the note, also kept in the summary
    assert like["notes"] and "task.n_eval=2" in like["notes"][0]


def test_settings_layers_and_task_shortcuts(tmp_path) -> None:
    from rlvr.evaluation.api import resolve_settings, task_shortcuts
    from rlvr.evaluation.harness import EvalTarget

    base = EvalTarget("tiny-random-llama", "tiny")
    s = resolve_settings(base)  # the defaults of a training config
    assert s.source == "defaults" and s.config.eval.n_prompts == 100 and s.ks == [1]
    assert (s.sampling.temperature, s.sampling.max_new_tokens) == (0.0, 128)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = build_config(
        {
            "model": {"system_prompt": "Be brief."},
            "task": {"name": "arithmetic", "levels": [1, 3], "seed": 7},
            "rollout": {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 64},
            "eval": {"n_prompts": 12, "max_new_tokens": 32},
            "curriculum": {"name": "sec"},
        }
    )
    save_config(cfg, run_dir / "config.yaml")
    s = resolve_settings(base, like=run_dir, n=4)
    assert s.config.task.levels == [1, 3] and s.config.model.system_prompt == "Be brief."
    assert s.config.eval.n_prompts == 12 and s.ks == [1, 2, 4]
    sampled = (s.sampling.temperature, s.sampling.top_p, s.sampling.max_new_tokens)
    assert sampled == (0.7, 0.9, 32)  # training's sampled-eval settings
    # --level replaces the mixture (and the run's curriculum is not part of an evaluation)
    s = resolve_settings(base, like=run_dir, overrides=task_shortcuts(level=2), n_prompts=3)
    assert (s.config.task.levels, s.config.task.level, s.config.task.seed) == (None, 2, 7)
    assert s.config.eval.n_prompts == 3
    # another task name starts from that task's defaults
    s = resolve_settings(base, like=run_dir, overrides=["task.name=countdown"])
    assert s.config.task == TaskConfig(name="countdown")
    assert task_shortcuts("file", path="123.jsonl", seed=1) == [
        'task.name="file"',
        "task.levels=null",
        "task.category_column=null",
        'task.path="123.jsonl"',
        "task.seed=1",
    ]
    s = resolve_settings(base, like=run_dir, overrides=task_shortcuts("arithmetic"))
    assert s.config.task.levels is None and s.config.task.seed == 7  # one level of the run's task
    s = resolve_settings(base, {"name": "file", "path": "d.jsonl"}, temperature=0.5)
    assert s.config.task.path == "d.jsonl" and s.sampling.temperature == 0.5


def test_eval_errors_are_one_line_without_traceback(tmp_path, cache, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    no_tokenizer = tmp_path / "weights-only"
    no_tokenizer.mkdir()
    from rlvr.models import resolve

    source = Path(resolve("tiny-random-llama"))
    for name in ("config.json", "model.safetensors"):
        (no_tokenizer / name).write_bytes((source / name).read_bytes())
    cases = [
        (["runs/nope"], ["runs/nope: no such run, checkpoint or model directory"]),
        (["tiny-random-llama", "--like", "runs/nope"], ["--like runs/nope: no such run"]),
        (["tiny-random-llama", "--set", "task.colour=red"], ["task.colour: unknown key"]),
        (["tiny-random-llama", "--set", "train.lr=1"], ["--set train.lr: rlvr eval reads only"]),
        (["tiny-random-llama", "--task", "file", "--path", "missing.jsonl"], ["missing.jsonl"]),
        ([str(no_tokenizer)], ["weights-only", "tokenizer"]),
    ]
    for args, messages in cases:
        result = run("eval", *args, "--n-prompts", "1", "--max-new-tokens", "2")
        assert result.exit_code == 2, (args, result.output, result.exception)
        assert all(m in result.flat for m in messages), (args, result.flat)
        assert "Traceback" not in result.output and result.clean.count("error:") == 1


# ---------------------------------------------------------------- rlvr compare


def _fake_run(root: Path, name: str, preset: str, seed: int, score: float) -> Path:
    """A run directory with a config and one eval dir of its final checkpoint."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    cfg = build_config(
        {
            "model": {"name": "tiny-random-llama"},
            "algorithm": {"preset": preset},
            "train": {"seed": seed},
            "logging": {"run_dir": str(run_dir)},
        }
    )
    save_config(cfg, run_dir / "config.yaml")
    rows = [{"step": 0, "eval/greedy_accuracy": 0.1}, {"step": 5, "eval/greedy_accuracy": score}]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    eval_dir = run_dir / "eval-step_000005"
    eval_dir.mkdir()
    summary = {
        "model": str(run_dir / "checkpoints" / "step_000005"),
        "tag": "step_000005",
        "checkpoint": "step_000005",
        "step": 5,
        "run_dir": str(run_dir),
        "task": {"name": "arithmetic", "level": 2},
        "n": 4,
        "ks": [1, 4],
        "metrics": {"pass@1": score, "pass@4": min(1.0, 2 * score)},
    }
    (eval_dir / "summary.json").write_text(json.dumps(summary))
    base = run_dir / "eval-base"  # a base-model eval in the run: ignored for the run's score
    base.mkdir()
    (base / "summary.json").write_text(
        json.dumps({**summary, "checkpoint": None, "step": None, "metrics": {"pass@1": 0.0}})
    )
    return run_dir


def test_compare_groups_runs_by_config_and_reports_statistics(tmp_path) -> None:
    grpo = [_fake_run(tmp_path, f"grpo-s{s}", "grpo", s, 0.3 + 0.02 * s) for s in range(4)]
    dapo = [_fake_run(tmp_path, f"dapo-s{s}", "dapo", s, 0.6 + 0.02 * s) for s in range(4)]
    plot, numbers = tmp_path / "cmp.png", tmp_path / "cmp.json"
    result = run(
        "compare", *map(str, grpo + dapo), "--plot", str(plot), "--json", str(numbers),
        "--reps", "300",
    )  # fmt: skip
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "IQM" in result.flat and "P(X > Y)" in result.flat
    data = json.loads(numbers.read_text())
    assert list(data["methods"]) == ["grpo", "dapo"] and data["tasks"] == ["arithmetic-L2"]
    grpo_stats = data["methods"]["grpo"]
    assert grpo_stats["runs"] == 4
    assert grpo_stats["mean"][0] == pytest.approx(0.33)
    assert grpo_stats["iqm"][0] == pytest.approx(0.33)  # middle two of .30 .32 .34 .36
    assert grpo_stats["iqm"][1] <= 0.33 <= grpo_stats["iqm"][2]
    (pair,) = data["improvement"]
    assert (pair["x"], pair["y"]) == ("grpo", "dapo") and pair["p"] == [0.0, 0.0, 0.0]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Explicit methods, another metric, and a training-log metric.
    result = run(
        "compare", "-m", f"a={grpo[0]},{grpo[1]}", "-m", f"b={dapo[0]},{dapo[1]}",
        "--metric", "eval/greedy_accuracy", "--plot", str(plot), "--json", str(numbers),
        "--reps", "200",
    )  # fmt: skip
    assert result.exit_code == 0, result.output + repr(result.exception)
    data = json.loads(numbers.read_text())
    assert data["methods"]["a"]["scores"] == [[0.3], [0.32]]
    assert data["improvement"][0]["p"][0] == 0.0
    assert "a │ 2 !" in result.flat and not data["improvement"][0]["supports_level"]
    assert "fewer than 6 runs per method cannot support 95% intervals" in result.flat


def test_compare_reports_each_methods_budget_per_step(tmp_path) -> None:
    """Generated / trained tokens, leaves and branch points, seconds: each run's mean over its
    training steps (evaluation rows skipped), then the mean over the method's runs."""
    runs = {"grpo": [], "dapo": []}
    for preset, tokens, leaves in (("grpo", (100, 300), None), ("dapo", (50, 70), 8.0)):
        for seed in range(2):
            run_dir = _fake_run(tmp_path, f"{preset}-s{seed}", preset, seed, 0.3 + 0.1 * seed)
            rows = [
                {"step": step, "policy/loss": 0.0, "tokens/generated": t + seed, "time/step": 2.0}
                | ({"tree/leaves_per_prompt": leaves} if leaves else {})
                for step, t in enumerate(tokens, start=1)
            ]
            with (run_dir / "metrics.jsonl").open("a") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
            runs[preset].append(run_dir)
    numbers = tmp_path / "cmp.json"
    result = run(
        "compare", *map(str, runs["grpo"] + runs["dapo"]), "--json", str(numbers), "--reps", "100"
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "budget per training step" in result.flat
    methods = json.loads(numbers.read_text())["methods"]
    assert methods["grpo"]["budget"] == {"tokens/generated": 200.5, "time/step": 2.0}
    assert methods["dapo"]["budget"]["tokens/generated"] == 60.5
    assert methods["dapo"]["budget"]["tree/leaves_per_prompt"] == 8.0


def test_compare_labels_differing_configs_and_eval_dirs(tmp_path) -> None:
    a = _fake_run(tmp_path, "a", "grpo", 0, 0.5)
    b = _fake_run(tmp_path, "b", "grpo", 1, 0.7)
    cfg = build_config({"model": {"name": "tiny-random-llama"}, "train": {"lr": 0.001}})
    save_config(cfg, b / "config.yaml")  # same preset, different lr: another method
    result = run(
        "compare", str(a / "eval-step_000005"), str(b), "--plot", str(tmp_path / "p.png"),
        "--json", str(tmp_path / "c.json"), "--reps", "100",
    )  # fmt: skip
    assert result.exit_code == 0, result.output + repr(result.exception)
    names = list(json.loads((tmp_path / "c.json").read_text())["methods"])
    assert names == ["grpo lr=1e-05", "grpo lr=0.001"]
    assert "(1 run: no seed variation at all)" in result.flat  # the few-seeds warning


def test_compare_errors_exit_2(tmp_path) -> None:
    a = _fake_run(tmp_path, "a", "grpo", 0, 0.5)
    result = run("compare", str(tmp_path / "missing"))
    assert result.exit_code == 2 and "no such eval or run directory" in result.flat
    result = run("compare", "-m", "grpo")
    assert result.exit_code == 2 and "expected NAME=path1,path2" in result.flat
    result = run("compare", str(a), "--metric", "maj@64")
    assert result.exit_code == 2 and "--metric maj@64: not in" in result.flat
    assert "pass@1, pass@4" in result.flat
    result = run("compare", str(a), str(a))
    assert result.exit_code == 2 and "more than once" in result.flat
    result = run("compare")
    assert result.exit_code == 2 and "nothing to compare" in result.flat
    empty = tmp_path / "empty"
    empty.mkdir()
    save_config(build_config({}), empty / "config.yaml")
    result = run("compare", str(empty))
    assert result.exit_code == 2 and "has no eval directory of a checkpoint" in result.flat


@pytest.mark.parametrize(
    ("command", "example"),
    [
        ("eval", "rlvr eval runs/demo2 --n 64 --k 1,2,4,8,16,32,64 --temperature 1.0"),
        ("eval", "rlvr eval --rescore runs/demo2/eval-step_000030 --k 1,4,16"),
        ("compare", "rlvr compare -m grpo=runs/grpo-s0,runs/grpo-s1"),
        ("report", "rlvr report runs/demo2"),
    ],
)
def test_help_shows_examples(command: str, example: str) -> None:
    result = run(command, "--help")
    assert result.exit_code == 0, result.output
    assert example in result.flat
