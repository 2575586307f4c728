"""TGDPO: DPO with token-level reward guidance (Zhu et al. 2025, "TGDPO: Harnessing Token-Level
Reward Guidance for Enhancing Direct Preference Optimization", ICML 2025, arXiv:2506.14574), as
the authors' code computes it (``dvlab-research/TGDPO``,
``src/llamafactory/train/tgdpo/trainer.py``, the ``sigmoid`` loss).

DPO weighs every token of a completion by the same beta. TGDPO decomposes the sequence-level
problem into token-level ones and lets a token-level reward r̂ set each token's weight: a token
the reward model likes counts more in the chosen completion, one it dislikes counts more in the
rejected completion:

    d_t   = log pi(y_t | x, y_<t) - log pi_ref(y_t | x, y_<t)        (the policy's log-ratio)
    r̂_t  = beta [log pi_r(y_t | x, y_<t) - log pi_ref(y_t | x, y_<t)] (the token reward)
    h     = sum_t beta (1 + alpha r̂_t) d_t  over y_c  -  sum_t beta (1 - alpha r̂_t) d_t  over y_r
    L     = -log sigmoid(h)

pi_r is the token-level reward model: any causal LM with the policy's vocabulary, in the
authors' runs a model trained by DPO or SimPO on the same data, whose implicit reward
beta log(pi_r / pi_ref) is r̂ (with the training beta and reference). rlvr reads it from
``model.teacher``. The weights are neither clamped nor normalised (a weight turns negative when
alpha |r̂| > 1), and the sums are not divided by the length, as in their code. With pi_r =
pi_ref, r̂ = 0 and TGDPO is DPO.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.objectives import PairLogps, PairTokens, register_objective


@register_objective(
    "tgdpo",
    needs_reference=True,
    needs_teacher=True,
    pairing="best_worst",
    citation=(
        "Zhu et al. 2025, TGDPO: Harnessing Token-Level Reward Guidance for Enhancing Direct "
        "Preference Optimization, arXiv:2506.14574 (the authors' tgdpo trainer)"
    ),
    summary="-log sigmoid(h), h = sum_t beta (1 + alpha r_t) log(pi / pi_ref) over the chosen "
    "minus sum_t beta (1 - alpha r_t) log(pi / pi_ref) over the rejected, r_t = beta log(pi_r / "
    "pi_ref) of a token-level reward model (model.teacher)",
)
def tgdpo_loss(
    pairs: PairLogps, tokens: PairTokens, beta: float = 0.1, alpha: float = 0.5
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """TGDPO's loss [P] (see the module docstring).

    Args:
        pairs: the pairs' sequence log-probs (unused beyond their count: TGDPO weighs tokens).
        tokens: their per-token log-probs: the policy's, the reference's and the teacher's
            (the token-level reward model pi_r).
        beta: DPO's beta, also the token reward's scale (0.1 in the authors' runs), > 0.
        alpha: the guidance strength (0.5 in their runs), >= 0; 0 is DPO.
    Returns:
        the loss [P], and per pair ``reward_margin`` (h), ``accuracy`` (h > 0) and the mean
        token reward r̂ of the chosen and of the rejected completion (``chosen_token_reward``,
        ``rejected_token_reward``).
    """
    if beta <= 0 or alpha < 0:
        raise ValueError(f"tgdpo: beta must be > 0 and alpha >= 0, got {beta} and {alpha}")
    if tokens.teacher_chosen is None or tokens.teacher_rejected is None:
        raise ValueError("tgdpo needs a token-level reward model: set model.teacher")
    sides = []
    for logp, ref, guide, mask, sign in (
        (tokens.chosen, tokens.ref_chosen, tokens.teacher_chosen, tokens.chosen_mask, 1.0),
        (tokens.rejected, tokens.ref_rejected, tokens.teacher_rejected, tokens.rejected_mask, -1.0),
    ):
        token_reward = beta * (guide - ref) * mask  # r̂_t
        weight = beta * (1.0 + sign * alpha * token_reward)
        weighted = (weight * (logp - ref) * mask).sum(-1)
        mean_reward = token_reward.sum(-1) / mask.sum(-1).clamp_min(1.0)
        sides.append((weighted, mean_reward))
    (chosen, chosen_reward), (rejected, rejected_reward) = sides
    h = chosen - rejected
    assert h.shape == pairs.chosen.shape
    info = {
        "reward_margin": h.detach(),
        "accuracy": (h.detach() > 0).float(),
        "chosen_token_reward": chosen_reward,
        "rejected_token_reward": rejected_reward,
    }
    return -torch.nn.functional.logsigmoid(h), info
