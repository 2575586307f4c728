"""DisCO: discriminative constrained optimisation (Li et al. 2025, "DisCO: Reinforcing Large
Reasoning Models with Discriminative Constrained Optimization", arXiv:2505.12366), as the
authors' code computes it (``Optimization-AI/DisCO``, ``verl/trainer/ppo/core_algos.py``).

GRPO's group-normalised advantage weighs a question by its difficulty and clips its ratio.
DisCO drops both: per question it raises a score of the correct answers (reward 1) above a
score of the wrong ones (reward 0), and keeps the policy near pi_old by a squared-hinge penalty
on the KL instead of a clip:

    J_q = mean_{o+} s(o+) - mean_{o-} s(o-)                      (DisCO-b)
    J_q = mean_{o+} s(o+) - tau log mean_{o-} exp(s(o-) / tau)    (DisCO: hard negatives weigh more)
    L   = -mean_q J_q + (beta / 2) [KL(pi_old || pi) - delta]_+^2

with the score ``s(o) = mean_t log pi(o_t)`` (``logL``) or ``mean_t pi(o_t) / pi_old(o_t)``
(``Lratio``), the KL the token mean of ``log pi_old - log pi`` over the micro-batch. A question
without a correct or without a wrong answer adds nothing but counts in the mean. The authors'
code evaluates the DisCO term and the penalty by stand-ins with the same gradients
(``neg_sum_exp / neg_sum_exp.detach()``; ``max(beta (KL - delta), 0).detach() KL``); here their
values are the paper's.

DRPO (Li et al. 2025, "DRPO: Efficient Reasoning via Decoupled Reward Policy Optimization",
arXiv:2510.04474; the authors' ``compute_policy_loss_drpo``, ``Optimization-AI/DRPO``) is DisCO
with the correct answers weighed by their length instead of equally:

    omega_i = exp((1 - l_i) / lambda) / sum_{j in +} exp((1 - l_j) / lambda),   l_i = |o_i| / L_max
    J_q     = sum_{i in +} omega_i s(o_i) - tau log mean_{o-} exp(s(o-) / tau)

(``L_max`` the longest completion the run samples, ``rollout.max_new_tokens``; the weights
carry no gradient): a short correct answer is raised more than a long one, while the wrong
answers' term, and so the length of what is pushed down, is DisCO's. The reward stays 0/1.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.objectives import register_objective

SCORES = ("logL", "Lratio")


def disco_scores(
    logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, score: str = "logL"
) -> torch.Tensor:
    """Each completion's score [n]: the token mean of log pi (``logL``) or of pi / pi_old
    (``Lratio``) over ``mask`` [n, T]."""
    if score not in SCORES:
        raise ValueError(f"disco: score must be one of {', '.join(SCORES)}; got {score!r}")
    per_token = logp if score == "logL" else torch.exp(logp - old_logp)
    return (per_token * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)


def drpo_positive_weights(
    lengths: torch.Tensor, rewards: torch.Tensor, lam: float, max_length: int
) -> torch.Tensor:
    """DRPO's weights omega [g, G] of each question's correct answers (reward 1):
    ``softmax over the correct ones of (1 - |o| / max_length) / lam``, 0 for the others.

    Args:
        lengths: [g, G] the completions' token counts.
        rewards: [g, G] their 0/1 rewards.
        lam: lambda > 0; small lambda favours the shortest correct answers (0.1 in the
            authors' runs), lambda -> inf gives DisCO's uniform mean.
        max_length: L_max, the run's longest completion (the authors' padded response width,
            their max response length).
    """
    if lam <= 0 or max_length <= 0:
        raise ValueError(f"drpo: lam and max_length must be > 0, got {lam} and {max_length}")
    logits = ((1.0 - lengths.to(torch.float64) / max_length) / lam).masked_fill(
        rewards != 1, float("-inf")
    )
    weights = torch.softmax(logits, dim=-1).nan_to_num(0.0)  # a question with no correct answer
    return weights.to(rewards.dtype if rewards.is_floating_point() else torch.float32)


def disco_objective(
    scores: torch.Tensor,
    rewards: torch.Tensor,
    tau: float | None = None,
    positive_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """J_q of each question [g] and whether it had a correct and a wrong answer [g] (bool).

    Args:
        scores: [g, G] the scores of each question's G completions.
        rewards: [g, G] their rewards: 1 is correct, 0 wrong (the authors' ``== 1`` /
            ``== 0``); any other value is refused (a graded reward has no such split).
        tau: None for DisCO-b (the negatives' mean score), else DisCO's temperature
            (``tau log mean exp(s / tau)`` over the negatives).
        positive_weights: [g, G] weights of the correct answers, summing to 1 per question
            (DRPO's :func:`drpo_positive_weights`); None for their mean (DisCO).
    """
    if tau is not None and tau <= 0:
        raise ValueError(f"disco: tau must be > 0, got {tau}")
    pos, neg = rewards == 1, rewards == 0
    if not bool((pos | neg).all()):
        other = sorted({round(float(r), 4) for r in rewards[~(pos | neg)].tolist()})[:3]
        raise ValueError(
            f"disco splits each group into correct (reward 1) and wrong (reward 0) answers; "
            f"got rewards {other}: use a 0/1 reward (a verifier)"
        )
    valid = pos.any(-1) & neg.any(-1)
    n_pos, n_neg = pos.sum(-1).clamp_min(1), neg.sum(-1).clamp_min(1)
    if positive_weights is None:
        positive = (scores * pos).sum(-1) / n_pos
    else:
        positive = (scores * positive_weights.detach() * pos).sum(-1)
    if tau is None:
        negative = (scores * neg).sum(-1) / n_neg
    else:
        masked = (scores / tau).masked_fill(~neg, float("-inf"))
        negative = tau * (torch.logsumexp(masked, -1) - n_neg.log())
        negative = torch.where(neg.any(-1), negative, torch.zeros_like(negative))
    return torch.where(valid, positive - negative, torch.zeros_like(positive)), valid


def kl_penalty_squared_hinge(kl: torch.Tensor, delta: float, beta: float) -> torch.Tensor:
    """``(beta / 2) max(KL - delta, 0)^2``: DisCO's constraint KL <= delta as a penalty (its
    gradient ``beta max(KL - delta, 0) grad KL`` is the authors' code's)."""
    return 0.5 * beta * torch.clamp(kl - delta, min=0.0) ** 2


@register_objective(
    "disco",
    kind="groups",
    citation=(
        "Li et al. 2025, DisCO: Reinforcing Large Reasoning Models with Discriminative "
        "Constrained Optimization, arXiv:2505.12366 (the authors' compute_policy_loss_disco)"
    ),
    summary="per question, the correct answers' mean score above tau log mean exp of the wrong "
    "ones' (score: mean token log pi), KL(pi_old || pi) <= delta by a squared-hinge penalty; no "
    "clip, no advantage normalisation",
)
def disco_loss(
    groups: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    score: str = "logL",
    tau: float | None = 10.0,
    delta: float = 1e-4,
    beta: float = 1e3,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """DisCO on one micro-batch of whole questions (the ``groups`` objective kind).

    Args:
        groups: ``(logp, old_logp, mask, rewards)``: [g, G, T] log pi (with gradient) and
            log pi_old of the completion tokens, the [g, G, T] mask, the [g, G] rewards.
        score: ``logL`` or ``Lratio`` (:func:`disco_scores`).
        tau: DisCO's temperature; None for DisCO-b. The authors' runs: 10 with logL, 1 with
            Lratio.
        delta, beta: the KL bound and the penalty's strength (1e-4 and 1e3 in their runs).
    Returns:
        the questions' J_q [g], the penalty (a scalar, the micro-batch's), and per question
        ``valid`` and the micro-batch's ``kl``.
    """
    if delta < 0 or beta < 0:
        raise ValueError(f"disco: delta and beta must be >= 0, got {delta} and {beta}")
    logp, old_logp, mask, rewards = groups
    g, n, t = logp.shape
    flat_mask = mask.reshape(g * n, t)
    scores = disco_scores(logp.reshape(g * n, t), old_logp.reshape(g * n, t), flat_mask, score)
    terms, valid = disco_objective(scores.view(g, n), rewards, tau)
    kl = ((old_logp - logp) * mask).sum() / mask.sum().clamp_min(1.0)  # KL(pi_old || pi), k1
    return terms, kl_penalty_squared_hinge(kl, delta, beta), {"valid": valid, "kl": kl.detach()}


@register_objective(
    "drpo",
    kind="groups",
    citation=(
        "Li et al. 2025, DRPO: Efficient Reasoning via Decoupled Reward Policy Optimization, "
        "arXiv:2510.04474 (the authors' compute_policy_loss_drpo)"
    ),
    summary="DisCO with each question's correct answers weighed by softmax((1 - length / "
    "max_new_tokens) / lambda): shorter correct answers are raised more; 0/1 rewards",
)
def drpo_loss(
    groups: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    max_new_tokens: int,
    lam: float = 0.1,
    tau: float | None = 10.0,
    delta: float = 1e-4,
    beta: float = 1e3,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """DRPO on one micro-batch of whole questions (the ``groups`` objective kind): DisCO's
    loss (:func:`disco_loss`, score ``logL`` as in the authors' code) with the correct answers
    weighed by :func:`drpo_positive_weights`.

    Args:
        groups: ``(logp, old_logp, mask, rewards)`` as for :func:`disco_loss`.
        max_new_tokens: L_max, filled by rlvr from ``rollout.max_new_tokens``.
        lam: DRPO's lambda (0.1 in the authors' runs).
        tau, delta, beta: DisCO's (10, 1e-4 and 1e3 in the authors' runs).
    Returns:
        as :func:`disco_loss`, and ``positive_weights`` [g, G].
    """
    if delta < 0 or beta < 0:
        raise ValueError(f"drpo: delta and beta must be >= 0, got {delta} and {beta}")
    logp, old_logp, mask, rewards = groups
    g, n, t = logp.shape
    flat_mask = mask.reshape(g * n, t)
    scores = disco_scores(logp.reshape(g * n, t), old_logp.reshape(g * n, t), flat_mask, "logL")
    weights = drpo_positive_weights(mask.sum(-1), rewards, lam, max_new_tokens)
    terms, valid = disco_objective(scores.view(g, n), rewards, tau, weights)
    kl = ((old_logp - logp) * mask).sum() / mask.sum().clamp_min(1.0)  # KL(pi_old || pi), k1
    info = {"valid": valid, "kl": kl.detach(), "positive_weights": weights}
    return terms, kl_penalty_squared_hinge(kl, delta, beta), info
