"""Paired comparison of two methods scored on the same problems.

When two evaluations share their problems, the per-problem differences ``d_i = x_i - y_i``
remove the between-problem variance that dominates unpaired intervals (an easy problem is easy
for both), so far smaller differences are resolved than by comparing the two means.

* mean difference ``mean(d)`` with a percentile-bootstrap interval over problems (problems are
  resampled as pairs);
* wins / ties / losses: problems where ``x_i > y_i``, ``x_i == y_i``, ``x_i < y_i``;
* a two-sided exact sign test: under "neither is better" a non-tied problem is a win with
  probability 1/2, so ``wins ~ Binomial(wins + losses, 1/2)``. For 0/1 scores (greedy
  accuracy, pass@1 of one sample) the non-tied problems are the discordant pairs and this is
  exactly McNemar's exact test.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlvr.evaluation.stats import bootstrap_mean_ci


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign-test p-value of ``wins`` against ``losses`` (ties left out); 1.0
    when there is no untied problem."""
    if wins + losses == 0:
        return 1.0
    from scipy import stats  # imported here: a second at start-up for every command

    return float(stats.binomtest(wins, wins + losses, 0.5).pvalue)


def paired_comparison(
    x: np.ndarray, y: np.ndarray, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> dict[str, Any]:
    """Compare per-problem scores ``x`` [P] and ``y`` [P] (the same problems, in the same order).

    Returns:
        ``{"n_problems", "mean_diff": [estimate, low, high], "wins", "ties", "losses",
        "p_value", "test"}``, ``mean_diff`` being ``mean(x - y)`` with its bootstrap interval,
        ``test`` naming the test behind ``p_value`` (see the module docstring).
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(
            f"paired scores must be two equal non-empty [P] arrays, got {x.shape}, {y.shape}"
        )
    d = x - y
    wins, losses = int((d > 0).sum()), int((d < 0).sum())
    low, high = bootstrap_mean_ci(d, reps=reps, confidence=confidence, seed=seed)
    binary = bool(np.isin(x, (0.0, 1.0)).all() and np.isin(y, (0.0, 1.0)).all())
    return {
        "n_problems": int(d.size),
        "mean_diff": [float(d.mean()), low, high],
        "wins": wins,
        "ties": int(d.size) - wins - losses,
        "losses": losses,
        "p_value": sign_test(wins, losses),
        "test": "exact McNemar (0/1 scores)" if binary else "exact sign test",
    }
