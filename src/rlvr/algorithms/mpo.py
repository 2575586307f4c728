"""MPO: multi-preference optimisation (Gupta et al. 2025, "Multi-Preference Optimization:
Generalizing DPO via Set-Level Contrasts", arXiv:2412.04628 v4; v1-v3 "SWEPO: Simultaneous
Weighted Preference Optimization for Group Contrastive Alignment").

DPO contrasts one chosen answer with one rejected answer. MPO contrasts the whole set of a
prompt's better-than-average answers with all of its answers, a Bradley-Terry model over sets,
and weighs each answer by how far its reward lies from the prompt's mean:

    r̄ = mean_i r_i,   Y+ = {y_i : r_i > r̄}                    (the rest, r_i <= r̄, is Y-)
    s(y) = log pi(y | x) - log pi_ref(y | x)                     (sequence sums)
    w(y) = exp(alpha (r_y - r̄))                                  (deviation-based weight)
    L_q  = -log [ sum_{y in Y+} w(y) exp(beta s(y)) / sum_{y in Y} w(y) exp(beta s(y)) ]

computed here in log space with z(y) = beta s(y) + alpha (r_y - r̄), so
L_q = logsumexp_Y z - logsumexp_{Y+} z. The form is the one the same first author restates in
REFA (Gupta et al. 2025, arXiv:2412.16378 v4, section 4.1, eq. 5), read from its text; the MPO
paper's own text and code were not available here (the authors released none that could be
found). alpha = 0 is the unweighted set-level loss; with two answers and alpha = 0 it is DPO's
-log sigmoid(beta (s(y_c) - s(y_r))).

Its gradient on beta s(y) is p+(y) - p(y), with p the softmax of z over the group and p+ that
over Y+: the better answers are raised, the worse ones lowered, each by how much of the group's
weighted mass it holds. A prompt whose rewards are all equal has an empty Y+ and adds nothing
(it still counts in the mean over prompts, as in DisCO's groups).
"""

from __future__ import annotations

import torch

from rlvr.algorithms.objectives import register_objective


def mpo_objective(
    scores: torch.Tensor, rewards: torch.Tensor, beta: float, alpha: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """J_q = -L_q of each prompt [g], whether its Y+ is non-empty [g] (bool), and the weights'
    logits z [g, G].

    Args:
        scores: [g, G] s(y) = log pi(y | x) - log pi_ref(y | x) of each prompt's G answers.
        rewards: [g, G] their rewards (any real values).
        beta: the implicit reward's scale, > 0.
        alpha: the deviation weights' strength, >= 0 (0: every answer weighs 1).
    """
    if beta <= 0 or alpha < 0:
        raise ValueError(f"mpo: beta must be > 0 and alpha >= 0, got {beta} and {alpha}")
    rewards = rewards.to(scores.dtype)
    deviation = rewards - rewards.mean(-1, keepdim=True)  # r_y - r̄
    positive = deviation > 0  # Y+
    z = beta * scores + alpha * deviation  # log [w(y) exp(beta s(y))]
    valid = positive.any(-1)
    chosen = torch.logsumexp(z.masked_fill(~positive, float("-inf")), -1)
    terms = chosen - torch.logsumexp(z, -1)
    return torch.where(valid, terms, torch.zeros_like(terms)), valid, z


@register_objective(
    "mpo",
    kind="groups",
    needs_reference=True,
    citation=(
        "Gupta et al. 2025, Multi-Preference Optimization: Generalizing DPO via Set-Level "
        "Contrasts (SWEPO), arXiv:2412.04628; the loss as restated in REFA, arXiv:2412.16378 "
        "eq. 5"
    ),
    summary="per prompt, -log of the above-mean answers' share of sum_y exp(beta log(pi / "
    "pi_ref)(y) + alpha (r_y - mean r)) over all its answers: a set-level DPO with "
    "deviation-weighted answers; any reward",
)
def mpo_loss(
    groups: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    ref_logp: torch.Tensor,
    beta: float = 0.1,
    alpha: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """MPO on one micro-batch of whole prompts (the ``groups`` objective kind).

    Args:
        groups: ``(logp, old_logp, mask, rewards)``: [g, G, T] log pi (with gradient) and
            log pi_old of the completion tokens, the [g, G, T] mask, the [g, G] rewards.
        ref_logp: [g, G, T] log pi_ref of the completion tokens (filled by the learner).
        beta: DPO's beta on the sequence log-ratio (0.1, DPO's usual value: the papers give
            none for MPO's runs).
        alpha: the deviation weights' strength (1 by default; 0 for the unweighted loss).
    Returns:
        J_q [g], a zero penalty, and per prompt ``valid``, the micro-batch's mean
        ``implicit_reward`` (beta s, detached) and ``positive_mass`` (the share of the
        weighted mass on Y+, exp(J), over the valid prompts).
    """
    logp, _, mask, rewards = groups
    scores = ((logp - ref_logp) * mask).sum(-1)  # s(y) [g, G]
    terms, valid, _ = mpo_objective(scores, rewards, beta, alpha)
    mass = terms.detach().exp()[valid]
    info = {
        "valid": valid,
        "implicit_reward": (beta * scores).detach().mean(),
        "positive_mass": mass.mean() if len(mass) else mass.new_zeros(()),
    }
    return terms, terms.new_zeros(()), info
