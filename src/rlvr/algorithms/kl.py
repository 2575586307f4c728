"""Per-token estimators of KL(pi || pi_ref) from tokens sampled from pi.

J. Schulman, "Approximating KL divergence" (2020, http://joschu.net/blog/kl-approx.html). With
log_ratio = log pi(y_t) - log pi_ref(y_t):

- k1 = log(pi / pi_ref): unbiased, high variance, can be negative.
- k2 = 0.5 * (log(pi / pi_ref))^2: biased, low variance, >= 0.
- k3 = pi_ref / pi - log(pi_ref / pi) - 1: unbiased, low variance, >= 0 (used in GRPO's loss).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

KL_ESTIMATORS: dict[str, KLFn] = {}

K3_LOG_RATIO_BOUND = 20.0


def register_kl(name: str) -> Callable[[KLFn], KLFn]:
    """Decorator: add an estimator ``fn(logp [B, T], ref_logp [B, T]) -> [B, T]``."""

    def decorator(fn: KLFn) -> KLFn:
        if name in KL_ESTIMATORS:
            raise ValueError(f"KL estimator {name!r} is already registered")
        KL_ESTIMATORS[name] = fn
        return fn

    return decorator


@register_kl("k1")
def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 = log(pi / pi_ref). Args: [B, T] log-probs of the sampled tokens. Returns [B, T]."""
    return logp - ref_logp


@register_kl("k2")
def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k2 = 0.5 * (log(pi / pi_ref))^2. Args: [B, T] log-probs. Returns [B, T]."""
    return 0.5 * (logp - ref_logp) ** 2


@register_kl("k3")
def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 = pi_ref / pi - log(pi_ref / pi) - 1 (DeepSeekMath eq. 4). Returns [B, T].

    The log-ratio is clamped to [-20, 20] before exponentiation: exp(20) ~ 4.9e8 stays finite
    in fp32 and bf16 where a diverged token would otherwise give inf or NaN; the clamp also
    zeroes the gradient of such tokens. Compute in fp32 (fp16 overflows above exp(11)).

    Args:
        logp: [B, T] log pi of the sampled tokens.
        ref_logp: [B, T] log pi_ref of the same tokens.
    """
    log_ratio = (logp - ref_logp).clamp(-K3_LOG_RATIO_BOUND, K3_LOG_RATIO_BOUND)
    return torch.exp(-log_ratio) + log_ratio - 1  # pi_ref/pi - log(pi_ref/pi) - 1


def kl_penalty(name: str, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL estimate [B, T] with the estimator registered as ``name`` (k1, k2, k3)."""
    if name not in KL_ESTIMATORS:
        raise ValueError(
            f"unknown KL estimator {name!r}; accepted: {', '.join(sorted(KL_ESTIMATORS))}"
        )
    return KL_ESTIMATORS[name](logp, ref_logp)
