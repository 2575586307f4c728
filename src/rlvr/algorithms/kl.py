"""Regularisers: per-token KL(pi || pi_ref) estimators, the entropy bonus, reference resets.

KL estimators from tokens sampled from pi (J. Schulman, "Approximating KL divergence", 2020,
http://joschu.net/blog/kl-approx.html). With log_ratio = log pi(y_t) - log pi_ref(y_t):

- k1 = log(pi / pi_ref): unbiased value, high variance, can be negative.
- k2 = 0.5 * (log(pi / pi_ref))^2: biased value, low variance, >= 0.
- k3 = pi_ref / pi - log(pi_ref / pi) - 1: unbiased value, low variance, >= 0 (GRPO's loss).
- k3+ (straight-through): the value of k3 with the gradient of k2.

Where the estimate goes decides which gradient it gives (Tang & Munos 2025, "On a few pitfalls
in KL divergence gradient estimation for RL"; samples y ~ pi, on-policy):

- In the reward (PPO, REINFORCE++, ``kl_in="reward"``): the KL becomes part of the return and
  is differentiated by the score function, E[-beta * sum_t k1_t * grad log pi(y)]
  = -beta * grad KL(pi || pi_ref). k1 in the reward gives the unbiased gradient of the
  sequence KL; it is computed without grad from the sampling policy.
- In the loss (GRPO, ``kl_in="loss"``), differentiated directly per token:
  E[grad k1] = E[grad log pi] = 0 (no signal); E[grad k2] = E[log(pi/pi_ref) grad log pi]
  = grad KL(pi || pi_ref) (unbiased for the per-token KL); E[grad k3] = E[(1 - pi_ref/pi)
  grad log pi] = grad KL(pi_ref || pi), the gradient of the other direction: biased as a
  gradient of KL(pi || pi_ref) although its value is unbiased. k3+ keeps k3's non-negative,
  low-variance value for the loss and logs and takes k2's unbiased gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlvr.registry import Registry

KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

KL_ESTIMATORS: Registry[KLFn] = Registry("KL estimator")

K3_LOG_RATIO_BOUND = 20.0


def register_kl(name: str) -> Callable[[KLFn], KLFn]:
    """Decorator: add an estimator ``fn(logp [B, T], ref_logp [B, T]) -> [B, T]``."""

    def decorator(fn: KLFn) -> KLFn:
        return KL_ESTIMATORS.add(name, fn)

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


@register_kl("k3+")
def kl_k3_st(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Straight-through k3 ("k3+", as in verl): value of k3, gradient of k2. Returns [B, T].

    k3+ = k2 + sg(k3 - k2): the forward value is k3's (non-negative, unbiased, low variance),
    the backward pass is k2's, whose expectation is the unbiased gradient of KL(pi || pi_ref)
    when the estimate sits in the loss (module docstring).

    Args:
        logp: [B, T] log pi of the sampled tokens.
        ref_logp: [B, T] log pi_ref of the same tokens.
    """
    k2 = kl_k2(logp, ref_logp)
    return k2 + (kl_k3(logp, ref_logp) - k2).detach()  # k2 + sg(k3 - k2)


def kl_penalty(
    name: str, logp: torch.Tensor, ref_logp: torch.Tensor, **params: float
) -> torch.Tensor:
    """Per-token KL estimate [B, T] with the estimator registered as ``name`` (k1 .. k3+);
    ``params``: its own keyword arguments (the ``algorithm.kl`` section's other keys)."""
    return KL_ESTIMATORS.get_or_raise(name)(logp, ref_logp, **params)


def entropy_bonus(entropy: torch.Tensor, coef: float) -> torch.Tensor:
    """Per-token entropy bonus as a loss term: L_t = -coef * H_t (Williams & Peng 1991; PPO,
    Schulman et al. 2017, eq. 9). Add it to the per-token policy loss before aggregation.

    Args:
        entropy: [B, T] entropy H_t of the policy's next-token distribution (with grad).
        coef: the bonus weight c_2 (0: no bonus).
    Returns:
        [B, T] loss term.
    """
    return -coef * entropy  # L_t = -c_2 * H_t


def should_reset_reference(step: int, every: int) -> bool:
    """Whether to hard-reset the reference policy to the current policy after ``step``.

    ProRL (Liu et al. 2025, "ProRL: Prolonged Reinforcement Learning Expands Reasoning
    Boundaries in Large Language Models", arXiv:2505.24864) periodically copies the
    online policy into the reference (and reinitialises the optimiser state) so the KL penalty
    does not pin a long run to the initial model. ProRL resets when validation stalls; here a
    fixed period.

    Args:
        step: number of completed training steps (>= 0).
        every: reset period in steps; 0 never resets.
    Returns:
        True after steps every, 2 * every, ...; never at step 0.
    """
    if step < 0 or every < 0:
        raise ValueError(f"step and every must be >= 0, got step={step}, every={every}")
    return every > 0 and step > 0 and step % every == 0


@torch.no_grad()
def soft_update(reference: list[torch.Tensor], policy: list[torch.Tensor], alpha: float) -> None:
    """TR-DPO's soft reference update (Gorbatovski et al. 2024, "Learn Your Reference Model for
    Real Good Alignment", arXiv:2404.09656), in place:

        theta_ref <- alpha * theta + (1 - alpha) * theta_ref

    alpha = 1 is ProRL's hard reset (:func:`should_reset_reference` says when); a small alpha
    lets the reference trail the policy so the KL term neither pins it to the initial model nor
    vanishes.

    Args:
        reference: the reference's parameters (updated in place).
        policy: the policy's parameters, in the same order and shapes.
        alpha: the mixing weight, 0 < alpha <= 1.
    """
    if not 0 < alpha <= 1:
        raise ValueError(f"the reference mixing weight must be in (0, 1], got {alpha}")
    if len(reference) != len(policy):
        raise ValueError(f"{len(reference)} reference tensors against {len(policy)} policy ones")
    for ref, new in zip(reference, policy, strict=True):
        ref.lerp_(new.to(ref.dtype), alpha)  # ref + alpha (theta - ref)
