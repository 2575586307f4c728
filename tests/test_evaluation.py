"""Evaluation metrics and statistics: pass@k, maj@k, answer entropy, IQM, bootstrap intervals,
probability of improvement, performance profiles, and the per-step training diagnostics."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from scipy import stats as sps

from rlvr.evaluation import (
    answer_entropy,
    answer_entropy_within_groups,
    default_ks,
    maj_at_k,
    normalize_answer,
    pass_at_k,
    problem_metrics,
    snapshot_params,
    update_sparsity,
)
from rlvr.evaluation.harness import chunk_plan, compute_summary_metrics
from rlvr.evaluation.stats import (
    bootstrap_ci,
    bootstrap_mean_ci,
    iqm,
    mean,
    performance_profile,
    performance_profile_ci,
    probability_of_improvement,
    probability_of_improvement_ci,
    stratified_resamples,
)

# ---------------------------------------------------------------- pass@k


def _pass_by_enumeration(n: int, c: int, k: int) -> float:
    """Fraction of k-subsets of n samples (c of them correct) with at least one correct."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_equals_exact_enumeration() -> None:
    for n in range(1, 9):
        for k in range(1, n + 1):
            c = np.arange(n + 1)
            got = pass_at_k(n, c, k)
            want = [_pass_by_enumeration(n, int(ci), k) for ci in c]
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_pass_at_k_equals_binomial_formula_for_large_n() -> None:
    for n, c, k in [(200, 10, 50), (100, 1, 1), (100, 99, 2), (64, 3, 16), (500, 0, 7)]:
        exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
        assert pass_at_k(n, [c], k)[0] == pytest.approx(float(exact), abs=1e-12)


def test_pass_at_k_stable_without_overflow() -> None:
    # C(5000, 2500) overflows floats; the product form does not.
    got = pass_at_k(5000, [1, 10, 2500, 5000], 2500)
    assert np.all(np.isfinite(got))
    assert got[0] == pytest.approx(0.5)  # one correct sample: in half of the subsets
    assert got[2] == 1.0 and got[3] == 1.0


def test_pass_at_k_vectorised_over_problems_and_n() -> None:
    got = pass_at_k(np.array([4, 8, 8]), np.array([1, 0, 8]), 2)
    np.testing.assert_allclose(got, [0.5, 0.0, 1.0])


def test_pass_at_k_matches_monte_carlo_on_simulated_data() -> None:
    rng = np.random.default_rng(0)
    n, k, problems = 20, 5, 4000
    p = rng.uniform(0, 1, size=problems)
    correct = rng.random((problems, n)) < p[:, None]
    estimate = pass_at_k(n, correct.sum(axis=1), k)
    # Unbiasedness: the mean estimate matches the true pass@k = 1 - (1 - p)^k ...
    assert estimate.mean() == pytest.approx((1 - (1 - p) ** k).mean(), abs=0.01)
    # ... and, for the drawn samples, the rate at which random k-subsets contain a success.
    subsets = np.argsort(rng.random((problems, 400, n)), axis=2)[:, :, :k]
    hits = np.take_along_axis(correct[:, None, :], subsets, axis=2).any(axis=2).mean(axis=1)
    assert estimate.mean() == pytest.approx(hits.mean(), abs=0.005)
    assert np.abs(estimate - hits).max() < 0.12


def test_pass_at_k_rejects_bad_inputs() -> None:
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(4, [1], 5)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(4, [5], 1)


# ---------------------------------------------------------------- maj@k, entropy


def test_maj_at_k_hand_example() -> None:
    answers = [["1", "1", "2"]]
    correct = np.array([[True, True, False]])
    assert maj_at_k(answers, correct, 3)[0] == pytest.approx(1.0)
    assert maj_at_k(answers, correct, 1)[0] == pytest.approx(2 / 3)
    # subsets {0,1}: "1" wins (1); {0,2} and {1,2}: a 1-1 tie, broken evenly (1/2 each)
    assert maj_at_k(answers, correct, 2)[0] == pytest.approx((1 + 0.5 + 0.5) / 3)


def test_maj_at_k_wrong_majority_and_normalisation() -> None:
    answers = [["7", "7", "42", "42.0", "42."], ["5", "5", "5", "3", "3"]]
    correct = np.array([[False, False, True, True, True], [False, False, False, True, True]])
    got = maj_at_k(answers, correct, 5)
    assert got[0] == 1.0  # "42", "42.0" and "42." are one answer with 3 votes
    assert got[1] == 0.0  # the majority "5" is wrong


def test_maj_at_k_missing_answers_do_not_vote() -> None:
    answers = [[None, None, "3"], [None, None, None]]
    correct = np.array([[False, False, True], [False, False, False]])
    np.testing.assert_allclose(maj_at_k(answers, correct, 3), [1.0, 0.0])
    # k = 2: {0,1} has no vote (0); {0,2}, {1,2} vote "3" (1)
    np.testing.assert_allclose(maj_at_k(answers, correct, 2), [2 / 3, 0.0])


def test_maj_at_k_sampled_subsets_match_exact_enumeration() -> None:
    rng = np.random.default_rng(1)
    n, k = 16, 7  # C(16, 7) = 11440 subsets > 1000: the estimator samples 1000 of them
    pool = ["1", "2", "3", None]
    answers = [list(rng.choice(pool, size=n, p=[0.35, 0.3, 0.25, 0.1])) for _ in range(3)]
    answers = [[None if a is None else str(a) for a in row] for row in answers]
    correct = np.array([[a == "1" for a in row] for row in answers])
    exact = maj_at_k(answers, correct, k, n_subsets=20000)  # enumerates all subsets
    sampled = maj_at_k(answers, correct, k, n_subsets=1000, seed=3)
    np.testing.assert_allclose(sampled, exact, atol=0.05)
    np.testing.assert_array_equal(sampled, maj_at_k(answers, correct, k, seed=3))  # seeded


def test_normalize_answer_and_entropy() -> None:
    assert normalize_answer("42.0") == normalize_answer("42") == "42"
    assert normalize_answer("1,000") == "1000" and normalize_answer("0.50") == "0.5"
    assert normalize_answer(None) == normalize_answer("  ") == "<none>"
    assert normalize_answer("x  +  1") == "x + 1"
    assert answer_entropy(["1", "1", "2", "2"]) == pytest.approx(math.log(2))
    assert answer_entropy(["3", "3.0", "3"]) == 0.0
    assert answer_entropy([None, None, "1", "2"]) == pytest.approx(
        -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    )
    assert answer_entropy([]) == 0.0


def test_default_ks() -> None:
    assert default_ks(1) == [1]
    assert default_ks(64) == [1, 2, 4, 8, 16, 32, 64]
    assert default_ks(12) == [1, 2, 4, 8, 12]


def test_problem_metrics_and_summary() -> None:
    correct = np.array([[True, False, False, False], [True, True, True, True]])
    answers = [["5", "6", "6", None], ["2", "2", "2.0", "2"]]
    lengths = np.array([[4, 6, 8, 10], [1, 1, 1, 1]])
    finished = np.array([[True, True, True, False], [True, True, True, True]])
    m = problem_metrics(correct, answers, lengths, finished, [1, 4])
    np.testing.assert_allclose(m["pass@1"], [0.25, 1.0])
    np.testing.assert_allclose(m["pass@4"], [1.0, 1.0])
    np.testing.assert_allclose(m["maj@4"], [0.0, 1.0])  # "6" beats "5"
    np.testing.assert_allclose(m["mean@4"], [0.25, 1.0])
    np.testing.assert_allclose(m["length_mean"], [7.0, 1.0])
    np.testing.assert_allclose(m["truncated_frac"], [0.25, 0.0])
    np.testing.assert_allclose(m["no_answer_frac"], [0.25, 0.0])
    assert m["answer_entropy"][1] == 0.0

    records = [
        {
            "problem_index": p,
            "sample_index": s,
            "correct": bool(correct[p, s]),
            "extracted_answer": answers[p][s],
            "num_tokens": int(lengths[p, s]),
            "finished": bool(finished[p, s]),
        }
        for p in range(2)
        for s in range(4)
    ][::-1]  # order does not matter
    summary = compute_summary_metrics(records, [1, 4])
    assert summary["n"] == 4 and summary["n_prompts"] == 2 and summary["n_samples"] == 8
    assert summary["metrics"]["pass@1"] == pytest.approx(0.625)
    assert summary["metrics"]["accuracy"] == summary["metrics"]["mean@4"]
    lo, hi = summary["ci"]["pass@1"]
    assert 0.25 <= lo <= 0.625 <= hi <= 1.0


def test_summary_metrics_per_category_by_hand() -> None:
    # A: problem 0 solved 1 of 2, problem 1 solved 2 of 2 -> mean@2 = 0.75, pass@2 = 1
    # B: problem 2 solved 0 of 2 -> mean@2 = 0, pass@2 = 0; overall mean@2 = 0.5
    outcomes = {0: ("A", [True, False]), 1: ("A", [True, True]), 2: ("B", [False, False])}
    records = [
        {
            "problem_index": p,
            "sample_index": s,
            "correct": ok,
            "extracted_answer": str(int(ok)),
            "num_tokens": 3,
            "finished": True,
            "category": category,
        }
        for p, (category, row) in outcomes.items()
        for s, ok in enumerate(row)
    ]
    summary = compute_summary_metrics(records, [1, 2])
    assert summary["metrics"]["mean@2"] == pytest.approx(0.5)
    a, b = summary["by_category"]["A"], summary["by_category"]["B"]
    assert a["n_prompts"] == 2 and b["n_prompts"] == 1
    assert a["metrics"]["mean@2"] == pytest.approx(0.75) and a["metrics"]["pass@2"] == 1.0
    assert b["metrics"]["mean@2"] == 0.0 and b["ci"]["pass@2"] == [0.0, 0.0]
    for r in records:  # no categories (and samples saved before categories existed): no split
        r.pop("category")
    assert "by_category" not in compute_summary_metrics(records, [1, 2])


def test_chunk_plan_bounds_batch_and_covers_every_sample() -> None:
    assert chunk_plan(5, 4, 8) == [(0, 2, 4), (2, 4, 4), (4, 5, 4)]
    plan = chunk_plan(2, 10, 4)  # n > max_batch: each prompt split over calls
    assert plan == [(0, 1, 4), (0, 1, 4), (0, 1, 2), (1, 2, 4), (1, 2, 4), (1, 2, 2)]
    for prompts, n, batch in [(7, 3, 8), (3, 64, 16), (1, 1, 1)]:
        plan = chunk_plan(prompts, n, batch)
        assert all((hi - lo) * m <= max(batch, 1) for lo, hi, m in plan)
        per_prompt = [sum(m for lo, hi, m in plan if lo <= p < hi) for p in range(prompts)]
        assert per_prompt == [n] * prompts


# ---------------------------------------------------------------- aggregate statistics


def test_iqm_hand_examples() -> None:
    assert float(iqm(np.arange(1, 9).reshape(8, 1))) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    scores = np.array([[0, 0], [0, 10], [1, 2], [3, 4]], dtype=float)  # flattened over tasks
    assert float(iqm(scores)) == pytest.approx(1.5)  # sorted 0 0 0 1 2 3 4 10 -> mean(0,1,2,3)
    batch = np.stack([scores, scores + 1])  # vectorised over a leading axis
    np.testing.assert_allclose(iqm(batch), [1.5, 2.5])


def test_probability_of_improvement_hand_examples() -> None:
    x = np.array([0.2, 0.4, 0.6])
    assert float(probability_of_improvement(x, x)) == pytest.approx(0.5)
    assert float(probability_of_improvement(x + 1, x)) == 1.0
    assert float(probability_of_improvement(x, x + 1)) == 0.0
    # pairs (1,1)=1/2, (1,2)=0, (3,1)=1, (3,2)=1 -> 2.5 / 4
    assert float(probability_of_improvement([1.0, 3.0], [1.0, 2.0])) == pytest.approx(0.625)
    # two tasks: averaged over tasks
    xm = np.array([[1.0, 0.0], [1.0, 0.0]])
    ym = np.array([[0.0, 0.0], [0.0, 0.0]])
    assert float(probability_of_improvement(xm, ym)) == pytest.approx((1.0 + 0.5) / 2)


def test_probability_of_improvement_is_mann_whitney_u() -> None:
    rng = np.random.default_rng(2)
    x, y = rng.integers(0, 5, size=9).astype(float), rng.integers(0, 5, size=6).astype(float)
    u = sps.mannwhitneyu(x, y).statistic
    assert float(probability_of_improvement(x, y)) == pytest.approx(u / (9 * 6))


def test_probability_of_improvement_interval() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(1.0, 1.0, size=(10, 2)), rng.normal(0.0, 1.0, size=(10, 2))
    est, lo, hi = probability_of_improvement_ci(x, y, reps=500, seed=0)
    assert lo <= est <= hi and est > 0.5
    assert probability_of_improvement_ci(x, x, reps=200)[0] == pytest.approx(0.5)


def test_stratified_resamples_stay_within_tasks() -> None:
    scores = np.array([[0.0, 10.0], [1.0, 11.0], [2.0, 12.0]])
    res = stratified_resamples(scores, 50, np.random.default_rng(0))
    assert res.shape == (50, 3, 2)
    assert set(np.unique(res[:, :, 0])) <= {0.0, 1.0, 2.0}
    assert set(np.unique(res[:, :, 1])) <= {10.0, 11.0, 12.0}


def test_bootstrap_ci_covers_true_mean_at_nominal_rate() -> None:
    rng = np.random.default_rng(4)
    task_means = np.array([0.2, 0.5, 0.7])
    truth = task_means.mean()
    covered = 0
    repetitions = 200
    for r in range(repetitions):
        scores = rng.normal(task_means, 0.15, size=(10, 3))  # 10 seeds x 3 tasks
        _, lo, hi = bootstrap_ci(scores, mean, reps=500, confidence=0.95, seed=r)
        covered += lo <= truth <= hi
    assert 0.85 <= covered / repetitions <= 0.99


def test_bootstrap_ci_is_seeded_and_brackets_estimate() -> None:
    scores = np.random.default_rng(5).uniform(size=(6, 2))
    first = bootstrap_ci(scores, iqm, reps=300, seed=7)
    assert first == bootstrap_ci(scores, iqm, reps=300, seed=7)
    est, lo, hi = first
    assert lo <= est <= hi
    assert bootstrap_ci([0.5], mean, reps=100) == (0.5, 0.5, 0.5)  # one run: no spread
    lo, hi = bootstrap_mean_ci(np.array([0.0, 1.0] * 50), reps=500)
    assert 0.35 < lo < 0.5 < hi < 0.65


def test_performance_profile() -> None:
    scores = np.array([0.1, 0.5, 0.9])[:, None]
    np.testing.assert_allclose(performance_profile(scores, [0.0, 0.5, 1.0]), [1.0, 1 / 3, 0.0])
    value, lo, hi = performance_profile_ci(scores, np.array([0.0, 0.5, 1.0]), reps=200)
    np.testing.assert_allclose(value, [1.0, 1 / 3, 0.0])
    assert np.all(lo <= value) and np.all(value <= hi)


# ---------------------------------------------------------------- training diagnostics


def test_answer_entropy_within_groups() -> None:
    assert answer_entropy_within_groups(["1", "1", "2", "2"], [0, 0, 1, 1]) == 0.0
    got = answer_entropy_within_groups(["1", "2", "3", "3.0"], torch.tensor([0, 0, 1, 1]))
    assert got == pytest.approx(math.log(2) / 2)
    assert answer_entropy_within_groups([], []) == 0.0
    with pytest.raises(ValueError, match="group ids"):
        answer_entropy_within_groups(["1"], [0, 1])


class _Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight  # tied, as in small LMs
        self.norm = torch.nn.LayerNorm(4)
        self.frozen = torch.nn.Linear(4, 4)
        self.frozen.requires_grad_(False)


def test_update_sparsity_counts_changed_elements_exactly() -> None:
    torch.manual_seed(0)
    model = _Tied()
    initial = snapshot_params(model)
    assert set(initial) == {"embed.weight", "norm.weight", "norm.bias"}  # tied once, no frozen
    assert all(t.dtype == torch.float32 and t.device.type == "cpu" for t in initial.values())
    total = 40 + 4 + 4
    assert update_sparsity(model, initial) == 0.0
    with torch.no_grad():
        model.embed.weight[0, 0] += 1e-7  # a tiny update, invisible in bf16, is counted
        model.norm.bias[1] = 0.5
    assert update_sparsity(model, initial) == pytest.approx(2 / total)
    assert update_sparsity(model, initial, atol=1e-5) == pytest.approx(1 / total)
    assert initial["norm.bias"][1] == 0.0  # the snapshot is a copy, not a view


def test_update_sparsity_rejects_mismatched_snapshot() -> None:
    model = _Tied()
    with pytest.raises(KeyError, match="nope"):
        update_sparsity(model, {"nope": torch.zeros(1)})
    with pytest.raises(ValueError, match="shape"):
        update_sparsity(model, {"norm.bias": torch.zeros(5)})


def test_task_key_names_levels_mixtures_and_files() -> None:
    from rlvr.evaluation.compare import task_key

    assert task_key({"name": "arithmetic", "level": 3}) == "arithmetic-L3"
    assert task_key({"name": "arithmetic", "level": 2, "levels": [1, 3]}) == "arithmetic-L1+L3"
    assert task_key({"name": "file", "path": "d.jsonl"}) == "file:d.jsonl"
