"""Sample-based metrics of a policy on held-out problems: pass@k, maj@k, mean@n, answer entropy.

Every function here is pure (numbers in, numbers out) and vectorised over problems. The inputs
are, per problem, ``n`` sampled completions, each with a binary correctness (the task verifier's
score >= 1) and the final answer extracted from it (:func:`rlvr.answers.extract_answer`).

* **pass@k** -- probability that at least one of ``k`` samples is correct, estimated without
  bias from ``n >= k`` samples with ``c`` correct as ``1 - C(n-c, k) / C(n, k)`` (Chen et al.
  2021, "Evaluating Large Language Models Trained on Code", the Codex paper, eq. 1), computed in
  the numerically stable product form ``1 - prod_{i=n-c+1}^{n} (1 - k/i)``.
* **maj@k** -- probability that the majority vote over the extracted answers of ``k`` samples is
  correct (self-consistency, Wang et al. 2023). See :func:`maj_at_k` for the exact estimator.
* **mean@n** -- the fraction of correct samples. It is the unbiased estimate of the expected
  accuracy of one sample, i.e. of the mean accuracy of ``k`` samples for *every* ``k``, which is
  why it is reported once, as ``mean@n``, rather than per ``k``.
* **answer entropy** -- entropy (in nats) of the empirical distribution of a problem's extracted
  answers; 0 when all samples agree (a collapsed policy), ``log n`` when all differ
  (:func:`rlvr.grading.diagnostics.answer_entropy`, which training also logs per group).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from rlvr.answers import NO_ANSWER, normalize_answer
from rlvr.grading.diagnostics import answer_entropy


def pass_at_k(n: int | np.ndarray, c: Sequence[int] | np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k per problem (Chen et al. 2021, eq. 1), in the stable product form.

    ``1 - C(n-c, k) / C(n, k) = 1 - prod_{i=n-c+1}^{n} (1 - k/i)``; it is 1 exactly when
    ``n - c < k`` (every k-subset contains a correct sample). The product of factors in (0, 1) is
    accumulated from the top, so nothing overflows for any ``n`` (the binomial form overflows
    floats beyond n ~ 1000).

    Args:
        n: samples per problem, a scalar or one value per problem.
        c: correct samples per problem, ``0 <= c <= n``.
        k: samples drawn, ``1 <= k <= n``.
    Returns:
        [P] float64 array of pass@k estimates.
    """
    c = np.asarray(c, dtype=np.int64)
    n = np.broadcast_to(np.asarray(n, dtype=np.int64), c.shape)
    if np.any(c < 0) or np.any(c > n):
        raise ValueError("pass_at_k: every c must satisfy 0 <= c <= n")
    if k < 1 or (n.size and k > int(n.min())):
        raise ValueError(f"pass_at_k: k must satisfy 1 <= k <= n (got k={k}, n>={n.min()})")
    out = np.empty(c.shape, dtype=np.float64)
    for n_value in np.unique(n):
        n_value = int(n_value)
        i = np.arange(1, n_value + 1, dtype=np.float64)
        # Factor (1 - k/i) for i = 1..n; factors with i <= k only enter the product when
        # n - c < k, where pass@k is exactly 1, so they are set to 0.
        factors = np.where(i > k, 1.0 - k / i, 0.0)
        # tail[j] = prod_{i=j+1}^{n} factor_i, tail[n] = 1 (empty product, c = 0).
        tail = np.append(np.cumprod(factors[::-1])[::-1], 1.0)
        sel = n == n_value
        out[sel] = 1.0 - tail[n_value - c[sel]]
    return out


def _encode(answers: Sequence[str | None], correct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample class codes (-1: no answer) and each class's correctness (mean over members)."""
    codes = np.full(len(answers), -1, dtype=np.int64)
    index: dict[str, int] = {}
    for j, answer in enumerate(answers):
        key = normalize_answer(answer)
        if key != NO_ANSWER:
            codes[j] = index.setdefault(key, len(index))
    class_correct = np.zeros(len(index), dtype=np.float64)
    for code in range(len(index)):
        class_correct[code] = correct[codes == code].mean()
    return codes, class_correct


def _subsets(n: int, k: int, n_subsets: int, seed: int) -> np.ndarray:
    """[S, k] sample indices: all C(n, k) subsets when there are at most ``n_subsets``, else
    ``n_subsets`` uniformly random k-subsets (without replacement within a subset), seeded."""
    if math.comb(n, k) <= n_subsets:
        return np.array(list(itertools.combinations(range(n), k)), dtype=np.int64).reshape(-1, k)
    rng = np.random.default_rng(seed)
    return np.argsort(rng.random((n_subsets, n)), axis=1)[:, :k]


def maj_at_k(
    answers: Sequence[Sequence[str | None]],
    correct: np.ndarray,
    k: int,
    n_subsets: int = 1000,
    seed: int = 0,
) -> np.ndarray:
    """maj@k per problem: the expected correctness of a majority vote over ``k`` of the ``n``
    samples (self-consistency, Wang et al. 2023, "Self-Consistency Improves Chain of Thought
    Reasoning in Language Models").

    Estimator (exact definition):

    * Answers are grouped by :func:`~rlvr.answers.normalize_answer`; samples without an answer
      do not vote. A class is correct when its samples were scored correct (the fraction of its
      samples scored correct, which is 0 or 1 whenever the score depends only on the extracted
      answer, as for the built-in verifiers).
    * For one k-subset the vote's correctness is ``(number of correct classes among those with
      the most votes) / (number of classes with the most votes)``: ties are broken uniformly at
      random, in expectation. A subset with no answer at all scores 0.
    * maj@k is the mean of that value over k-subsets drawn uniformly without replacement from
      the ``n`` samples: over **all** ``C(n, k)`` subsets (exact) when ``C(n, k) <= n_subsets``
      (always for ``k == n`` and ``k == 1``), else over ``n_subsets`` random subsets drawn with
      a generator seeded by ``seed`` (the same subsets for every problem; the Monte Carlo
      standard error is at most ``0.5 / sqrt(n_subsets)`` per problem, 0.016 by default).

    Args:
        answers: P lists of n extracted answers (None: no answer).
        correct: [P, n] bool, the verifier's verdict per sample.
        k: votes per majority, ``1 <= k <= n``.
    Returns:
        [P] float64 array.
    """
    correct = np.asarray(correct, dtype=bool)
    if correct.ndim != 2 or correct.shape[0] != len(answers):
        raise ValueError("maj_at_k: correct must be [P, n] with one row per problem")
    n = correct.shape[1]
    if not 1 <= k <= n:
        raise ValueError(f"maj_at_k: k must satisfy 1 <= k <= n (got k={k}, n={n})")
    subsets = _subsets(n, k, n_subsets, seed)
    s = subsets.shape[0]
    out = np.zeros(len(answers), dtype=np.float64)
    for p, (row, row_correct) in enumerate(zip(answers, correct, strict=True)):
        if len(row) != n:
            raise ValueError(f"maj_at_k: problem {p} has {len(row)} answers, expected {n}")
        codes, class_correct = _encode(row, row_correct)
        n_classes = len(class_correct)
        if n_classes == 0:
            continue
        votes = codes[subsets]  # [S, k]
        valid = votes >= 0
        flat = (votes + n_classes * np.arange(s)[:, None])[valid]
        counts = np.bincount(flat, minlength=s * n_classes).reshape(s, n_classes)
        top = counts.max(axis=1, keepdims=True)
        tied = (counts == top) & (top > 0)
        n_tied = np.maximum(tied.sum(axis=1), 1)
        out[p] = ((tied * class_correct).sum(axis=1) / n_tied).mean()
    return out


def default_ks(n: int) -> list[int]:
    """Powers of two up to ``n``, and ``n`` itself: ``default_ks(12) == [1, 2, 4, 8, 12]``."""
    ks = [2**i for i in range(n.bit_length()) if 2**i <= n]
    return ks + ([n] if ks[-1] != n else [])


def problem_metrics(
    correct: np.ndarray,
    answers: Sequence[Sequence[str | None]],
    lengths: np.ndarray,
    finished: np.ndarray,
    ks: Sequence[int],
    n_subsets: int = 1000,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Every metric per problem (each a [P] array), keyed like the summary: ``pass@k`` and
    ``maj@k`` for each ``k``, ``mean@n``, ``answer_entropy``, ``length_mean``,
    ``truncated_frac``, ``no_answer_frac``.

    Args:
        correct: [P, n] bool.
        answers: P lists of n extracted answers.
        lengths: [P, n] completion lengths in tokens.
        finished: [P, n] bool, False where a completion hit the token limit.
    """
    correct = np.asarray(correct, dtype=bool)
    n = correct.shape[1]
    out: dict[str, np.ndarray] = {}
    c = correct.sum(axis=1)
    for k in ks:
        out[f"pass@{k}"] = pass_at_k(n, c, k)
    for k in ks:
        out[f"maj@{k}"] = maj_at_k(answers, correct, k, n_subsets=n_subsets, seed=seed)
    out[f"mean@{n}"] = correct.mean(axis=1)
    out["answer_entropy"] = np.array([answer_entropy(row) for row in answers], dtype=np.float64)
    out["length_mean"] = np.asarray(lengths, dtype=np.float64).mean(axis=1)
    out["truncated_frac"] = 1.0 - np.asarray(finished, dtype=np.float64).mean(axis=1)
    out["no_answer_frac"] = np.array(
        [np.mean([normalize_answer(a) == NO_ANSWER for a in row]) for row in answers]
    )
    return out
