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

How many seeds a stated level needs. A percentile bootstrap over seeds cannot hold 95% with a
handful of seeds: a resample of 3 per-seed values is one seed's value 3 times with
probability 1/27 = 3.7% for each seed, more than the 2.5% of each tail, so the central 95%
interval of their mean is exactly [min, max] of the 3 values, and "it lies above 0" means "all
3 seeds above 0", which happens 1 time in 8 when nothing differs. Two remedies here:

* :func:`sign_flip_p`, the exact sign-flip permutation test over seeds (Fisher 1935; Pitman
  1937), whose level is exact for any number of seeds but whose smallest attainable p is
  ``2^-n`` one-sided (``2^(1-n)`` two-sided): with fewer than :func:`seeds_needed` seeds no
  result can reach the level, and saying so is the honest verdict;
* :func:`hierarchical_bootstrap_diff` for per-problem metrics of several seeds: seeds are
  resampled, then problems (Field & Welsh 2007; Ren et al. 2010; the problems crossed with
  the seeds as in Owen 2007), so the interval carries the seed-to-seed variation that a
  bootstrap over problems alone leaves out.
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


def sign_flip_p(differences: np.ndarray | list, alternative: str = "greater") -> float:
    """Exact one-sided p-value of the sign-flip permutation test of paired differences ``d``
    (one per seed): Fisher 1935 (*The Design of Experiments*, sec. 21), Pitman 1937
    ("Significance tests which may be applied to samples from any populations", JRSS
    Suppl. 4:119-130).

    Under the null hypothesis each ``d_i`` is symmetric about 0, so each of the ``2^n`` sign
    assignments of ``|d_i|`` is equally likely; the statistic is ``sum(d)`` and
    ``p = #{s in {-1, 1}^n : sum_i s_i |d_i| >= sum_i d_i} / 2^n`` for ``"greater"`` (``<=`` for
    ``"less"``), enumerated exactly. The smallest attainable p is ``2^-n`` (all ``n``
    differences on the tested side, none zero): 0.125 with 3 seeds, 0.0625 with 4, 0.031 with
    5, so a one-sided 5% level needs 5 seeds (:func:`seeds_needed`). A zero difference counts
    as half on each side (its two signs give the same sum).

    Args:
        differences: ``[n]`` paired differences, ``1 <= n <= 20`` (``2^n`` sums are formed).
        alternative: ``"greater"`` (the differences lie above 0) or ``"less"``.
    """
    d = np.asarray(differences, dtype=np.float64).ravel()
    if not 1 <= d.size <= 20 or not np.all(np.isfinite(d)):
        raise ValueError(f"sign_flip_p needs 1 to 20 finite differences (got {d.size})")
    if alternative not in ("greater", "less"):
        raise ValueError(f"alternative must be greater or less (got {alternative!r})")
    bits = (np.arange(2**d.size)[:, None] >> np.arange(d.size)) & 1
    sums = (1 - 2 * bits) @ np.abs(d)  # every sign assignment's sum, [2^n]
    observed = float(d.sum())
    slack = 1e-12 * max(1.0, float(np.abs(d).sum()))  # float ties count as ties
    hits = sums >= observed - slack if alternative == "greater" else sums <= observed + slack
    return float(hits.mean())


def seeds_needed(confidence: float, two_sided: bool) -> int:
    """The fewest seeds with which an exact test over seeds can reach ``1 - confidence``: the
    smallest p of :func:`sign_flip_p` with ``n`` seeds is ``2^-n`` one-sided and ``2^(1-n)``
    two-sided, so 95% needs 5 seeds one-sided and 6 two-sided. With fewer, no outcome of the
    seeds is significant at that level, and an interval over seeds that claims it does not
    hold it."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1) (got {confidence})")
    alpha, sides, n = 1 - confidence, 2 if two_sided else 1, 1
    while sides * 0.5**n > alpha + 1e-12:
        n += 1
    return n


def hierarchical_bootstrap_diff(
    x: np.ndarray | list,
    y: np.ndarray | list,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``mean(x) - mean(y)`` of two methods' per-problem scores ``[seeds, problems]`` (the same
    problems in the same column order), with a two-level percentile-bootstrap interval.

    Each resample draws each method's seeds with replacement (independently: the methods'
    runs are not paired), then the problems with replacement, one draw shared by every seed and
    both methods: the problems are crossed with the seeds (every seed is scored on the same
    problems), which is Owen 2007's pigeonhole bootstrap ("The pigeonhole bootstrap", Ann.
    Appl. Stat. 1(2):386-411); for nested data the same order, top level first, is Field &
    Welsh 2007 ("Bootstrapping clustered data", JRSS B 69(3):369-390) and Ren et al. 2010
    ("Nonparametric bootstrapping for hierarchical data", J. Appl. Stat. 37(9):1487-1498).
    With one seed per method it is the paired bootstrap over problems; with several, the
    seed-to-seed variation widens the interval where averaging the seeds first would hide it.
    The seed level is still a bootstrap of a few values: with fewer than
    :func:`seeds_needed` seeds its interval cannot hold ``confidence`` across seeds.

    Returns:
        ``(estimate, low, high)``.
    """
    xm, ym = as_matrix(x), as_matrix(y)
    if xm.shape[1] != ym.shape[1]:
        raise ValueError(
            f"x and y must score the same problems (got {xm.shape[1]} and {ym.shape[1]})"
        )
    rng = np.random.default_rng(seed)
    problems = xm.shape[1]
    values = np.empty(reps)
    for start in range(0, reps, 256):  # bounded memory: [chunk, problems] at a time
        n = min(256, reps - start)
        wx = rng.multinomial(xm.shape[0], np.full(xm.shape[0], 1 / xm.shape[0]), size=n)
        wy = rng.multinomial(ym.shape[0], np.full(ym.shape[0], 1 / ym.shape[0]), size=n)
        wp = rng.multinomial(problems, np.full(problems, 1 / problems), size=n)
        per_problem = wx @ xm / xm.shape[0] - wy @ ym / ym.shape[0]  # [n, problems]
        values[start : start + n] = (per_problem * wp).sum(axis=1) / problems
    lo, hi = percentile_interval(values, confidence)
    return float(xm.mean() - ym.mean()), lo, hi
