"""Rollout engines: sample G completions per prompt with per-token log-probs."""

from rlvr.rollout.base import Rollout, RolloutEngine, SamplingParams
from rlvr.rollout.sampling import filter_logits, sample_next
from rlvr.rollout.torch_engine import TorchEngine, describe_device, left_pad

__all__ = [
    "Rollout",
    "RolloutEngine",
    "SamplingParams",
    "TorchEngine",
    "describe_device",
    "filter_logits",
    "left_pad",
    "sample_next",
]
