"""`rlvr compare` on evaluations of the same problems: the paired per-problem comparison, its
interval over seeds then problems, a base model's eval dir as a method, the few-seeds warning."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_evaluation_cli import _fake_run, run

from rlvr.evaluation.harness import compute_summary_metrics, save_eval
from rlvr.evaluation.paired import paired_comparison, sign_test
from rlvr.evaluation.stats import hierarchical_bootstrap_diff

IDS = [f"arith-L2-eval-{i}" for i in range(10)]
BASE = [1, 1, 0, 0, 1, 0, 0, 0, 1, 0]
TUNED = [1, 1, 1, 1, 1, 0, 1, 1, 1, 0]  # wins problems 2, 3, 6, 7; never loses


def _eval_dir(
    root: Path, name: str, correct: list[int], ids: list[str] = IDS, digest: str | None = None
) -> Path:
    """An eval directory of model `name` outside any run with one greedy sample per problem
    (``digest``: the recorded problem-set hash), as `rlvr eval MODEL` writes it."""
    records = [
        {
            "problem_index": p,
            "problem_id": pid,
            "prompt": f"question {pid}",
            "answer": "1",
            "sample_index": 0,
            "completion": "Answer: 1" if ok else "Answer: 0",
            "extracted_answer": "1" if ok else "0",
            "score": float(ok),
            "correct": bool(ok),
            "num_tokens": 3,
            "finished": True,
            "category": "",
        }
        for p, (pid, ok) in enumerate(zip(ids, correct, strict=True))
    ]
    summary = {
        "model": name,
        "tag": name,
        "checkpoint": None,
        "task": {"name": "arithmetic", "level": 2},
        "sampling": {"temperature": 0.0},
        **compute_summary_metrics(records, [1]),
    }
    if digest is not None:
        summary["problems"] = {"count": len(ids), "ids": ids, "sha256": digest}
    save_eval(root / name, records, summary)
    return root / name


def test_sign_test_and_paired_comparison_by_hand() -> None:
    assert sign_test(4, 0) == pytest.approx(2 * 0.5**4)  # exact McNemar: 4 discordant, all wins
    assert sign_test(9, 1) == pytest.approx(2 * (1 + 10) / 2**10)
    assert sign_test(0, 0) == 1.0 and sign_test(3, 3) == pytest.approx(1.0)
    out = paired_comparison(np.array(TUNED), np.array(BASE), reps=500)
    assert (out["wins"], out["ties"], out["losses"], out["n_problems"]) == (4, 6, 0, 10)
    assert out["mean_diff"][0] == pytest.approx(0.4) and out["mean_diff"][1] >= 0.0
    assert out["mean_diff"][1] <= 0.4 <= out["mean_diff"][2] <= 0.8
    assert out["test"].startswith("exact McNemar") and out["p_value"] == pytest.approx(0.125)
    graded = paired_comparison(np.array([0.5, 0.25, 1.0, 0.0]), np.array([0.25, 0.25, 0.5, 0.5]))
    assert (graded["wins"], graded["ties"], graded["losses"]) == (2, 1, 1)
    assert graded["mean_diff"][0] == pytest.approx(0.0625) and graded["test"] == "exact sign test"
    assert graded["p_value"] == pytest.approx(1.0)  # 2 wins of 3: P(X >= 2 or X <= 1) = 1
    with pytest.raises(ValueError, match="of the same problems"):
        paired_comparison(np.zeros(3), np.zeros(4))
    seeds = paired_comparison(np.array([TUNED, BASE]), np.array(BASE), reps=200)
    assert seeds["seeds"] == [2, 1] and seeds["mean_diff"][0] == pytest.approx(0.2)
    assert (seeds["wins"], seeds["ties"], seeds["losses"]) == (4, 6, 0)  # seed means 0.5 > 0


def test_hierarchical_bootstrap_with_one_seed_and_with_many() -> None:
    # one seed each, every problem 0.25 apart: each resample's difference is 0.25
    x, y = np.full((1, 8), 0.75), np.full((1, 8), 0.5)
    assert hierarchical_bootstrap_diff(x, y, reps=300) == (0.25, 0.25, 0.25)
    # one seed: the paired bootstrap over problems, as wide as resampling the differences
    rng = np.random.default_rng(1)
    d = rng.normal(0.1, 1.0, size=200)
    est, low, high = hierarchical_bootstrap_diff(d[None, :], np.zeros((1, 200)), reps=2000)
    assert est == pytest.approx(d.mean())
    assert high - low == pytest.approx(2 * 1.96 * d.std() / np.sqrt(200), rel=0.15)
    # two seeds, one scoring every problem 0 and one 1, against 0: averaging the seeds first
    # (0.5 on every problem) gives no spread at all; resampling the seeds gives 0, 0.5 or 1
    # with probabilities 1/4, 1/2, 1/4, so the 95% interval is [0, 1]
    seeds = np.array([np.zeros(8), np.ones(8)])
    assert hierarchical_bootstrap_diff(seeds, np.zeros((1, 8)), reps=4000) == (0.5, 0.0, 1.0)
    averaged = seeds.mean(axis=0, keepdims=True)
    assert hierarchical_bootstrap_diff(averaged, np.zeros((1, 8)), reps=300) == (0.5, 0.5, 0.5)
    assert hierarchical_bootstrap_diff(x, y, reps=300, seed=3) == hierarchical_bootstrap_diff(
        x, y, reps=300, seed=3
    )
    with pytest.raises(ValueError, match="same problems"):
        hierarchical_bootstrap_diff(np.zeros((2, 3)), np.zeros((2, 4)))


def test_compare_pairs_evaluations_of_the_same_problems(tmp_path) -> None:
    tuned, base = _eval_dir(tmp_path, "tuned", TUNED), _eval_dir(tmp_path, "base", BASE)
    numbers = tmp_path / "cmp.json"
    result = run(
        "compare", str(tuned), str(base), "--json", str(numbers), "--reps", "500",
    )  # fmt: skip
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "paired per-problem comparison" in result.flat and "4/6/0" in result.flat
    assert "+0.400" in result.flat and "exact McNemar" in result.flat
    (pair,) = json.loads(numbers.read_text())["paired"]
    assert (pair["x"], pair["y"], pair["task"]) == ("tuned", "base", "arithmetic-L2")
    assert (pair["wins"], pair["ties"], pair["losses"]) == (4, 6, 0)
    assert pair["mean_diff"][0] == pytest.approx(0.4) and pair["p_value"] == pytest.approx(0.125)
    # one run per method: every interval is marked, the warning says why
    assert not pair["supports_level"]
    assert "! fewer than 6 runs: not 95% intervals" in result.flat
    assert "fewer than 6 runs per method cannot support 95% intervals" in result.flat
    assert "plot:" not in result.flat  # no --plot: no PNG


def test_compare_writes_its_plot_only_when_asked(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    tuned, base = _eval_dir(tmp_path, "tuned", TUNED), _eval_dir(tmp_path, "base", BASE)
    result = run("compare", str(tuned), str(base), "--reps", "200")
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert list(tmp_path.glob("*.png")) == []  # nothing written into the working directory
    result = run("compare", str(tuned), str(base), "--reps", "200", "--plot", "out/cmp.png")
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert (tmp_path / "out" / "cmp.png").read_bytes()[:4] == b"\x89PNG"


def test_a_base_models_eval_dir_is_a_method_beside_runs(tmp_path) -> None:
    """`rlvr eval BASE --like RUN --out DIR` beside trained runs: with a summary metric it is
    compared as it is, and with a run's training-log metric eval/greedy_accuracy it gives its
    greedy evaluation's accuracy (the trainer's greedy held-out evaluation of the base)."""
    runs = [_fake_run(tmp_path, f"grpo-s{s}", "grpo", s, 0.6 + 0.1 * s) for s in range(6)]
    base = _eval_dir(tmp_path, "base", BASE)  # accuracy 0.4
    numbers = tmp_path / "cmp.json"
    listed = ",".join(map(str, runs))
    result = run(
        "compare", "-m", f"grpo={listed}", "-m", f"base={base}",
        "--metric", "eval/greedy_accuracy", "--json", str(numbers), "--reps", "200",
    )  # fmt: skip
    assert result.exit_code == 0, result.output + repr(result.exception)
    data = json.loads(numbers.read_text())
    assert data["methods"]["base"]["scores"] == [[0.4]]
    assert data["methods"]["grpo"]["scores"] == [[pytest.approx(0.6 + 0.1 * s)] for s in range(6)]
    assert (
        data["methods"]["grpo"]["supports_level"] and not data["methods"]["base"]["supports_level"]
    )
    assert data["seeds_needed"] == 6 and "base │ 1 !" in result.flat
    # the runs' log has no per-problem scores, so no paired comparison: said, not failed
    assert (
        data["paired"] == [] and "has no per-problem scores" in data["paired_skipped"][0]["reason"]
    )
    # a sampled (not greedy) evaluation does not stand for a greedy metric
    summary = json.loads((base / "summary.json").read_text())
    summary["sampling"]["temperature"] = 0.7
    (base / "summary.json").write_text(json.dumps(summary))
    result = run("compare", "-m", f"base={base}", "--metric", "eval/greedy_accuracy")
    assert result.exit_code == 2 and "was not sampled greedily (temperature 0)" in result.flat
    result = run("compare", "-m", f"base={base}", "--metric", "eval/sampled_accuracy")
    assert result.exit_code == 2 and "stands for a run's eval/greedy_* metrics only" in result.flat


def test_compare_averages_a_methods_runs_and_skips_other_problem_sets(tmp_path) -> None:
    second = TUNED.copy()
    second[2] = 0  # the second seed misses problem 2: the method's score there is 0.5
    tuned = [_eval_dir(tmp_path, "tuned-s0", TUNED), _eval_dir(tmp_path, "tuned-s1", second)]
    base = _eval_dir(tmp_path, "base", BASE)
    other = _eval_dir(tmp_path, "other", BASE, [f"arith-L2-eval-{i}" for i in range(5, 15)])
    numbers = tmp_path / "cmp.json"
    result = run(
        "compare", "-m", f"tuned={tuned[0]},{tuned[1]}", "-m", f"base={base}",
        "-m", f"other={other}", "--json", str(numbers),
        "--reps", "300",
    )  # fmt: skip
    assert result.exit_code == 0, result.output + repr(result.exception)
    data = json.loads(numbers.read_text())
    (pair,) = data["paired"]
    assert (pair["x"], pair["y"]) == ("tuned", "base") and pair["test"] == "exact sign test"
    assert pair["mean_diff"][0] == pytest.approx((0.5 + 1 + 1 + 1) / 10)
    assert (pair["wins"], pair["ties"], pair["losses"]) == (4, 6, 0)
    skipped = {(s["x"], s["y"]): s["reason"] for s in data["paired_skipped"]}
    assert skipped == {
        ("tuned", "other"): "different problems (10 and 10, 5 shared)",
        ("base", "other"): "different problems (10 and 10, 5 shared)",
    }
    assert "no paired comparison of base and other on arithmetic-L2" in result.flat


def test_per_problem_values_average_to_the_summary(tmp_path) -> None:
    from rlvr.evaluation.harness import per_problem_values

    outcomes = [[True, False], [True, True], [False, False]]
    answers = [["3", "4"], ["5", "5"], [None, "7"]]
    records = [
        {
            "problem_index": p, "problem_id": f"q{p}", "prompt": "", "answer": "", "category": "",
            "sample_index": s, "completion": "", "extracted_answer": answers[p][s],
            "score": float(ok), "correct": ok, "num_tokens": 2 + s, "finished": True,
        }
        for p, row in enumerate(outcomes)
        for s, ok in enumerate(row)
    ]  # fmt: skip
    summary = {
        "model": "m",
        "task": {"name": "arithmetic"},
        **compute_summary_metrics(records, [1, 2]),
    }
    save_eval(tmp_path, records, summary)
    assert per_problem_values(tmp_path, "accuracy") == {"q0": 0.5, "q1": 1.0, "q2": 0.0}
    assert per_problem_values(tmp_path, "pass@2") == {"q0": 1.0, "q1": 1.0, "q2": 0.0}
    for metric in ("mean@2", "pass@1", "maj@2", "length_mean"):
        values = per_problem_values(tmp_path, metric)
        assert np.mean(list(values.values())) == pytest.approx(summary["metrics"][metric])
    assert per_problem_values(tmp_path, "pass@3") is None  # k above the 2 samples per problem
    assert per_problem_values(tmp_path / "missing", "accuracy") is None


def test_compare_does_not_pair_the_same_ids_with_other_prompts(tmp_path) -> None:
    tuned = _eval_dir(tmp_path, "tuned", TUNED, digest="a" * 64)
    base = _eval_dir(tmp_path, "base", BASE, digest="b" * 64)  # e.g. another prompt template
    numbers = tmp_path / "cmp.json"
    result = run(
        "compare", str(tuned), str(base), "--json", str(numbers), "--reps", "300",
    )  # fmt: skip
    assert result.exit_code == 0, result.output + repr(result.exception)
    data = json.loads(numbers.read_text())
    assert data["paired"] == []
    assert "problem hashes differ" in data["paired_skipped"][0]["reason"]
