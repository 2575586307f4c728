"""Offline evaluation of policies: :func:`evaluate` (``rlvr eval``), pass@k / maj@k with
bootstrap intervals, comparisons across seeds (IQM, probability of improvement) and paired
per-problem comparisons, plots and HTML reports.

Correctness is decided as ``eval.judge`` says (the task's check or the run's reward) by
:mod:`rlvr.grading`, the in-loop package the trainer uses too; its judge, held-out accuracy and
per-step diagnostics (answer entropy within groups, update sparsity) are re-exported here.
"""

from rlvr.answers import normalize_answer
from rlvr.evaluation.api import evaluate
from rlvr.evaluation.paired import paired_comparison, sign_test
from rlvr.evaluation.passk import (
    default_ks,
    maj_at_k,
    pass_at_k,
    problem_metrics,
)
from rlvr.evaluation.stats import (
    bootstrap_ci,
    iqm,
    performance_profile,
    probability_of_improvement,
)
from rlvr.grading import (
    Grader,
    answer_entropy,
    answer_entropy_within_groups,
    build_grader,
    evaluate_accuracy,
    grade_samples,
    snapshot_params,
    update_sparsity,
)

__all__ = [
    "Grader",
    "answer_entropy",
    "answer_entropy_within_groups",
    "bootstrap_ci",
    "build_grader",
    "default_ks",
    "evaluate",
    "evaluate_accuracy",
    "iqm",
    "grade_samples",
    "maj_at_k",
    "normalize_answer",
    "paired_comparison",
    "pass_at_k",
    "performance_profile",
    "probability_of_improvement",
    "problem_metrics",
    "sign_test",
    "snapshot_params",
    "update_sparsity",
]
