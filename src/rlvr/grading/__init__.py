"""What the training loop measures every step and at each held-out evaluation: who judges a
sample correct, held-out accuracy, and per-step diagnostics.

- :mod:`rlvr.grading.grader`: :class:`Grader` and :func:`build_grader` (``eval.judge``: the task's
  own check or the run's reward), :func:`grade_samples`;
- :mod:`rlvr.grading.accuracy`: :func:`sample_and_grade` (one completion per held-out
  problem, judged), :func:`accuracy_metrics`, :class:`AccuracyRecords`,
  :func:`evaluate_accuracy`;
- :mod:`rlvr.grading.diagnostics`: :func:`answer_entropy_within_groups`,
  :func:`snapshot_params` and :func:`update_sparsity`.

The trainer and its parts use only this package; offline evaluation and its reports
(:mod:`rlvr.evaluation`) build on it, never the reverse.
"""

from rlvr.grading.accuracy import (
    AccuracyRecords,
    accuracy_metrics,
    evaluate_accuracy,
    sample_and_grade,
)
from rlvr.grading.diagnostics import (
    answer_entropy,
    answer_entropy_within_groups,
    changed_elements,
    snapshot_params,
    update_sparsity,
)
from rlvr.grading.grader import Grader, build_grader, grade_samples

__all__ = [
    "AccuracyRecords",
    "Grader",
    "accuracy_metrics",
    "answer_entropy",
    "answer_entropy_within_groups",
    "build_grader",
    "evaluate_accuracy",
    "grade_samples",
    "sample_and_grade",
    "changed_elements",
    "snapshot_params",
    "update_sparsity",
]
