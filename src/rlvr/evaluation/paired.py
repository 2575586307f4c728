"""Paired comparison of two methods scored on the same problems.

When two evaluations share their problems, the per-problem differences ``d_i = x_i - y_i``
remove the between-problem variance that dominates unpaired intervals (an easy problem is easy
for both), so far smaller differences are resolved than by comparing the two means.

* mean difference ``mean(x) - mean(y)`` with a hierarchical percentile-bootstrap interval
  (:func:`rlvr.evaluation.stats.hierarchical_bootstrap_diff`): each method's seeds are
  resampled, then the problems, as pairs (one draw for both methods); with one seed per method
  this is the paired bootstrap over problems;
* wins / ties / losses: problems where the seed-averaged ``x_i > y_i``, ``x_i == y_i``,
  ``x_i < y_i``;
* a two-sided exact sign test: under "neither is better" a non-tied problem is a win with
  probability 1/2, so ``wins ~ Binomial(wins + losses, 1/2)``. For 0/1 scores (greedy
  accuracy, pass@1 of one sample) the non-tied problems are the discordant pairs and this is
  exactly McNemar's exact test. It tests the problems, given the seeds: it says nothing about
  another seed's run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlvr.evaluation.stats import hierarchical_bootstrap_diff


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
    """Compare per-problem scores ``x`` and ``y`` of the same problems in the same order: each
    ``[problems]`` (one seed) or ``[seeds, problems]`` (a method's runs, row by row).

    Returns:
        ``{"n_problems", "seeds", "mean_diff": [estimate, low, high], "wins", "ties",
        "losses", "p_value", "test"}``: ``seeds`` the runs of x and of y, ``mean_diff``
        ``mean(x) - mean(y)`` with its hierarchical bootstrap interval, ``test`` naming the test
        behind ``p_value`` (see the module docstring).
    """
    x, y = np.atleast_2d(np.asarray(x, np.float64)), np.atleast_2d(np.asarray(y, np.float64))
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1] or x.size == 0 or y.size == 0:
        raise ValueError(
            "paired scores must be non-empty [problems] or [seeds, problems] arrays of the same "
            f"problems, got {x.shape}, {y.shape}"
        )
    d = x.mean(axis=0) - y.mean(axis=0)
    wins, losses = int((d > 0).sum()), int((d < 0).sum())
    estimate, low, high = hierarchical_bootstrap_diff(x, y, reps, confidence, seed)
    means = np.concatenate([x.mean(axis=0), y.mean(axis=0)])
    binary = bool(np.isin(means, (0.0, 1.0)).all())
    return {
        "n_problems": int(d.size),
        "seeds": [int(x.shape[0]), int(y.shape[0])],
        "mean_diff": [estimate, low, high],
        "wins": wins,
        "ties": int(d.size) - wins - losses,
        "losses": losses,
        "p_value": sign_test(wins, losses),
        "test": "exact McNemar (0/1 scores)" if binary else "exact sign test",
    }
