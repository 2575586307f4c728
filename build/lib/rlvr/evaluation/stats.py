"""Aggregate statistics across runs and seeds, with honest uncertainty.

Follows Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of the Statistical
Precipice" (NeurIPS; the ``rliable`` library), reimplemented with numpy/scipy:

* scores of one method form a matrix ``[runs, tasks]`` (runs: seeds; tasks: e.g. task/level
  pairs an evaluation was done on);
* the **interquartile mean** (IQM) of all ``runs x tasks`` scores: the mean of the middle 50%
  (``scipy.stats.trim_mean(x, 0.25)``), robust to outlier runs yet less noisy than the median;
* **stratified bootstrap** confidence intervals: each resample draws ``runs`` rows with
  replacement independently within every task (column); the interval is the percentile
  interval of the statistic over resamples (rliable's default);
* **probability of improvement** ``P(X > Y)``: per task, the Mann-Whitney U statistic of X's
  runs against Y's runs divided by ``N*K`` (ties count 1/2), averaged over tasks;
* **performance profiles**: the fraction of run scores above a threshold ``tau``, as a
  function of ``tau`` (the run-score distribution), averaged over tasks.

All bootstrap functions take a ``seed`` and are deterministic given it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Statistic = Callable[[np.ndarray], np.ndarray]
"""Maps ``[..., runs, tasks]`` scores to ``[...]`` values (vectorised over resamples)."""


def as_matrix(scores: np.ndarray | list) -> np.ndarray:
    """Scores as a float ``[runs, tasks]`` matrix; a 1-D array is one task."""
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"scores must be [runs] or [runs, tasks] with runs >= 1 (got {x.shape})")
    if not np.all(np.isfinite(x)):
        raise ValueError("scores must be finite")
    return x


def iqm(scores: np.ndarray) -> np.ndarray:
    """Interquartile mean over the last two axes (runs, tasks): the mean of the scores between
    the 25th and 75th percentiles, trimming ``floor(0.25 * N)`` scores at each end
    (``scipy.stats.trim_mean``, as rliable's ``aggregate_iqm``)."""
    from scipy import stats as sps  # imported here: the trainer imports this package

    x = np.asarray(scores, dtype=np.float64)
    flat = x.reshape(*x.shape[:-2], -1)
    return np.asarray(sps.trim_mean(flat, 0.25, axis=-1))


def mean(scores: np.ndarray) -> np.ndarray:
    """Mean over the last two axes (runs, tasks)."""
    x = np.asarray(scores, dtype=np.float64)
    return x.reshape(*x.shape[:-2], -1).mean(axis=-1)


def median(scores: np.ndarray) -> np.ndarray:
    """Median over the last two axes (runs, tasks)."""
    x = np.asarray(scores, dtype=np.float64)
    return np.median(x.reshape(*x.shape[:-2], -1), axis=-1)


AGGREGATES: dict[str, Statistic] = {"mean": mean, "median": median, "iqm": iqm}


def stratified_resamples(scores: np.ndarray, reps: int, rng: np.random.Generator) -> np.ndarray:
    """``[reps, runs, tasks]`` bootstrap resamples of a ``[runs, tasks]`` matrix: within each task
    (stratum) the runs are drawn with replacement, independently of the other tasks."""
    x = as_matrix(scores)
    runs, tasks = x.shape
    idx = rng.integers(0, runs, size=(reps, runs, tasks))
    return np.take_along_axis(np.broadcast_to(x, (reps, runs, tasks)), idx, axis=1)


def percentile_interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """The central ``confidence`` percentile interval of bootstrap ``values`` (over axis 0)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1) (got {confidence})")
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(values, [alpha, 1 - alpha], axis=0)
    return float(lo), float(hi)


def bootstrap_ci(
    scores: np.ndarray | list,
    statistic: Statistic = mean,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Point estimate and stratified-bootstrap percentile interval of ``statistic``.

    Args:
        scores: ``[runs, tasks]`` (or ``[runs]``: one task).
        statistic: vectorised over leading axes, e.g. :func:`iqm`, :func:`mean`.
    Returns:
        ``(estimate, low, high)``.
    """
    x = as_matrix(scores)
    rng = np.random.default_rng(seed)
    values = statistic(stratified_resamples(x, reps, rng))
    lo, hi = percentile_interval(values, confidence)
    return float(statistic(x)), lo, hi


def probability_of_improvement(x: np.ndarray | list, y: np.ndarray | list) -> np.ndarray:
    """``P(X > Y)`` (Agarwal et al. 2021, sec. 4.3): per task ``m``,
    ``P(X_m > Y_m) = 1/(N K) sum_{i,j} S(x_{m,i}, y_{m,j})`` with ``S = 1`` if ``x > y``,
    ``1/2`` if equal, ``0`` otherwise -- the Mann-Whitney U statistic of X over ``N K`` --
    averaged over tasks.

    Args:
        x: ``[..., N, M]`` scores of method X (leading axes: bootstrap resamples).
        y: ``[..., K, M]`` scores of method Y, same tasks in the same order.
    Returns:
        ``[...]`` probabilities (a 0-d array without leading axes).
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if y.ndim == 1:
        y = y[:, None]
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"X and Y must have the same tasks (got {x.shape[-1]} and {y.shape[-1]})")
    xs, ys = x[..., :, None, :], y[..., None, :, :]  # [..., N, 1, M], [..., 1, K, M]
    s = (xs > ys).astype(np.float64) + 0.5 * (xs == ys)
    return s.mean(axis=(-3, -2)).mean(axis=-1)


def probability_of_improvement_ci(
    x: np.ndarray | list,
    y: np.ndarray | list,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``P(X > Y)`` with a stratified-bootstrap percentile interval: X's and Y's runs are
    resampled independently, within each task. Returns ``(estimate, low, high)``."""
    xm, ym = as_matrix(x), as_matrix(y)
    rng = np.random.default_rng(seed)
    values = probability_of_improvement(
        stratified_resamples(xm, reps, rng), stratified_resamples(ym, reps, rng)
    )
    lo, hi = percentile_interval(values, confidence)
    return float(probability_of_improvement(xm, ym)), lo, hi


def performance_profile(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Run-score distribution (Agarwal et al. 2021, sec. 4.2): for each threshold ``tau``, the
    fraction of runs whose score exceeds ``tau``, averaged over tasks.

    Args:
        scores: ``[..., runs, tasks]``.
        taus: ``[T]`` thresholds.
    Returns:
        ``[..., T]``.
    """
    x = np.asarray(scores, dtype=np.float64)
    taus = np.asarray(taus, dtype=np.float64)
    above = x[..., None] > taus  # [..., runs, tasks, T]
    return above.mean(axis=-3).mean(axis=-2)


def performance_profile_ci(
    scores: np.ndarray | list,
    taus: np.ndarray,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Performance profile with pointwise stratified-bootstrap percentile bands.
    Returns ``(profile [T], low [T], high [T])``."""
    x = as_matrix(scores)
    rng = np.random.default_rng(seed)
    values = performance_profile(stratified_resamples(x, reps, rng), taus)  # [reps, T]
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(values, [alpha, 1 - alpha], axis=0)
    return performance_profile(x, taus), lo, hi


def bootstrap_mean_ci(
    values: np.ndarray, reps: int = 1000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (e.g. per-problem pass@k of one
    evaluation: resampling problems gives the uncertainty due to the finite held-out set)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(reps, v.size))].mean(axis=1)
    return percentile_interval(means, confidence)
