"""Truncated importance sampling (TIS) for the rollout/trainer precision mismatch.

The rollout engine samples with its own kernels and precision (bf16 here), so the sampler's
distribution ``pi_sampler`` differs from the trainer's ``pi_train`` even at identical weights:
the "on-policy" gradient is slightly off-policy. Yao et al. 2025 ("Your Efficient RL Framework
Secretly Brings You Off-Policy RL Training") reweight each token's policy-gradient term by the
truncated ratio

    w_t = min( pi_train(y_t | s_t) / pi_sampler(y_t | s_t), C ),

computed without gradient from the trainer's log-probs before the update (``old_logp``) and
the sampler's log-probs of the same tokens; truncation at ``C`` bounds the variance.
"""

from __future__ import annotations

import torch


def truncated_importance_weights(
    train_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor, cap: float
) -> torch.Tensor:
    """TIS weights ``min(exp(train_logp - sampler_logp), cap)`` [N, T], 0 where ``mask`` is 0.

    Args:
        train_logp: [N, T] the trainer's log-probs of the sampled tokens (detached).
        sampler_logp: [N, T] the rollout engine's log-probs of the same tokens.
        mask: [N, T] 1 on completion tokens.
        cap: the truncation ``C`` (> 0; Yao et al. use 2).
    """
    if cap <= 0:
        raise ValueError(f"TIS cap must be positive, got {cap}")
    ratio = torch.exp((train_logp.detach() - sampler_logp).float())
    return ratio.clamp(max=cap) * mask
