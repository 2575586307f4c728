"""Evaluation of policies: held-out accuracy (pass@k, maj@k and reports build on this)."""

from rlvr.evaluation.accuracy import evaluate_accuracy

__all__ = ["evaluate_accuracy"]
