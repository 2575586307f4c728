"""`rlvr compare` on evaluations of the same problems: the paired per-problem comparison."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_evaluation_cli import run

from rlvr.evaluation.harness import compute_summary_metrics, save_eval
from rlvr.evaluation.paired import paired_comparison, sign_test

IDS = [f"arith-L2-eval-{i}" for i in range(10)]
BASE = [1, 1, 0, 0, 1, 0, 0, 0, 1, 0]
TUNED = [1, 1, 1, 1, 1, 0, 1, 1, 1, 0]  # wins problems 2, 3, 6, 7; never loses


def _eval_dir(
    root: Path, name: str, correct: list[int], ids: list[str] = IDS, digest: str | None = None
) -> Path:
    """An eval directory of model `name` with one greedy sample per problem (``digest``: the
    recorded problem-set hash)."""
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
    with pytest.raises(ValueError, match="equal non-empty"):
        paired_comparison(np.zeros(3), np.zeros(4))


def test_compare_pairs_evaluations_of_the_same_problems(tmp_path) -> None:
    tuned, base = _eval_dir(tmp_path, "tuned", TUNED), _eval_dir(tmp_path, "base", BASE)
    numbers = tmp_path / "cmp.json"
    result = run(
        "compare", str(tuned), str(base), "--plot", str(tmp_path / "p.png"),
        "--json", str(numbers), "--reps", "500",
    )  # fmt: skip
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "paired per-problem comparison" in result.flat and "4/6/0" in result.flat
    assert "+0.400" in result.flat and "exact McNemar" in result.flat
    (pair,) = json.loads(numbers.read_text())["paired"]
    assert (pair["x"], pair["y"], pair["task"]) == ("tuned", "base", "arithmetic-L2")
    assert (pair["wins"], pair["ties"], pair["losses"]) == (4, 6, 0)
    assert pair["mean_diff"][0] == pytest.approx(0.4) and pair["p_value"] == pytest.approx(0.125)


def test_compare_averages_a_methods_runs_and_skips_other_problem_sets(tmp_path) -> None:
    second = TUNED.copy()
    second[2] = 0  # the second seed misses problem 2: the method's score there is 0.5
    tuned = [_eval_dir(tmp_path, "tuned-s0", TUNED), _eval_dir(tmp_path, "tuned-s1", second)]
    base = _eval_dir(tmp_path, "base", BASE)
    other = _eval_dir(tmp_path, "other", BASE, [f"arith-L2-eval-{i}" for i in range(5, 15)])
    numbers = tmp_path / "cmp.json"
    result = run(
        "compare", "-m", f"tuned={tuned[0]},{tuned[1]}", "-m", f"base={base}",
        "-m", f"other={other}", "--plot", str(tmp_path / "p.png"), "--json", str(numbers),
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
        "compare", str(tuned), str(base), "--plot", str(tmp_path / "p.png"),
        "--json", str(numbers), "--reps", "300",
    )  # fmt: skip
    assert result.exit_code == 0, result.output + repr(result.exception)
    data = json.loads(numbers.read_text())
    assert data["paired"] == []
    assert "problem hashes differ" in data["paired_skipped"][0]["reason"]
