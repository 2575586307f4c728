"""What the training loop measures every step and at each held-out evaluation: who judges a
sample correct, held-out accuracy, and per-step diagnostics.

- :mod:`rlvr.judging.judge`: :class:`Judge` and :func:`build_judge` (``eval.judge``: the task's
  own check or the run's reward), :func:`judge_samples`;
- :mod:`rlvr.judging.accuracy`: :func:`sample_and_judge` (one completion per held-out
  problem, judged), :func:`accuracy_metrics`, :class:`AccuracyRecords`,
  :func:`evaluate_accuracy`;
- :mod:`rlvr.judging.diagnostics`: :func:`answer_entropy_within_groups`,
  :func:`snapshot_params` and :func:`update_sparsity`.

The trainer and its parts use only this package; offline evaluation and its reports
(:mod:`rlvr.evaluation`) build on it, never the reverse.
"""

from rlvr.judging.accuracy import (
    AccuracyRecords,
    accuracy_metrics,
    evaluate_accuracy,
    sample_and_judge,
)
from rlvr.judging.diagnostics import (
    answer_entropy,
    answer_entropy_within_groups,
    snapshot_params,
    update_sparsity,
)
from rlvr.judging.judge import Judge, build_judge, judge_samples

__all__ = [
    "AccuracyRecords",
    "Judge",
    "accuracy_metrics",
    "answer_entropy",
    "answer_entropy_within_groups",
    "build_judge",
    "evaluate_accuracy",
    "judge_samples",
    "sample_and_judge",
    "snapshot_params",
    "update_sparsity",
]
