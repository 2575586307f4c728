"""The sampler-trainer correction of the policy-gradient loss: the rollout engine's log-probs
pi_sampler differ from the trainer's pi_old (another kernel, precision or weights version), so
each token's loss is weighted by pi_old / pi_sampler truncated (TIS) or masked (MIS)
(:func:`rlvr.algorithms.importance_weights`), and sequences too far off-policy are dropped
(DeepSeek-V3.2's off-policy sequence masking, :func:`rlvr.algorithms.off_policy_sequence_mask`).
"""

from __future__ import annotations

import torch

from rlvr import algorithms
from rlvr.trainer.learner.kinds import Averages

_WEIGHT_METRICS = {
    "truncated_frac": "rollout/tis_clipped_frac",
    "masked_frac": "rollout/mis_masked_frac",
}
"""The metric of each statistic of :func:`rlvr.algorithms.importance_weights`."""


def sampler_weights(
    settings: algorithms.CorrectionPart,
    old: torch.Tensor,
    sampler_logp: torch.Tensor,
    mask: torch.Tensor,
    averages: Averages,
    describe: bool,
) -> torch.Tensor | float:
    """The importance weights [n, T] of a micro-batch's policy loss correcting the sampler /
    trainer mismatch (``algorithm.correction``: tis_cap, mis_band; 1.0: no correction), from pi_old
    ``old`` and the sampler's log-probs of whole rows [n, T] (sequence ratios need them).

    ``describe``: log the mismatch (``mismatch/*``) and the weights' statistics, token means
    weighted by the micro-batch's tokens; true in the first epoch only, which sees every trained
    row once (pi_old, hence the weights, are the same in every epoch)."""
    weights: torch.Tensor | float = 1.0
    info: dict[str, float] = {}
    if settings.tis_cap is not None or settings.mis_band is not None:
        weights, info = algorithms.importance_weights(
            old,
            sampler_logp,
            mask,
            settings.tis_cap,
            settings.tis_level,
            settings.mis_band,
            settings.mis_level,
        )
    if describe:
        means, tokens = algorithms.mismatch_metrics(old, sampler_logp, mask)
        if isinstance(weights, torch.Tensor):
            means["rollout/is_weight_mean"] = algorithms.masked_mean(weights, mask).item()
        means.update({_WEIGHT_METRICS[k]: v for k, v in info.items()})
        for key, value in means.items():
            averages.add(key, value, tokens)
    return weights


def off_policy_keep(
    settings: algorithms.CorrectionPart,
    logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    averages: Averages,
) -> torch.Tensor | float:
    """DeepSeek-V3.2's off-policy sequence mask [n, T] (``algorithm.correction.off_policy_mask`` = delta:
    a sequence with a negative advantage whose mean log-ratio to the sampler exceeds delta is
    dropped), or 1.0 when unset; the dropped fraction is logged."""
    delta = settings.off_policy_mask
    if delta is None:
        return 1.0
    keep, dropped = algorithms.off_policy_sequence_mask(logp, sampler_logp, advantages, mask, delta)
    averages.add("policy/off_policy_masked_frac", dropped, len(logp))
    return keep
