"""Preference objectives on pairs of completions of one prompt: DPO, EXO, IPO, REBEL, CoPG, TPO, and
the pairs a group of samples gives (:func:`preference_pairs`).

Notation: prompt x, chosen completion y_c, rejected y_r, sequence log-probs
``log pi(y | x) = sum_t log pi(y_t | x, y_<t)`` of the policy pi_theta, the reference pi_ref and
the policy that sampled the pair pi_old (:class:`~rlvr.algorithms.objectives.PairLogps`).

Where the pairs come from is the preset's choice, not the loss's: a preference file (offline
DPO / IPO: each row a group of two, chosen reward 1, rejected 0), the best and the worst sample
of each group of G (online DPO, Guo et al. 2024), or the same from a sampler whose weights are
refreshed every s steps (semi-online DPO, Lanchantin et al. 2025: ``sync_every``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from rlvr.algorithms.objectives import PairLogps, register_objective

PAIRINGS = ("best_worst", "adjacent", "margin")


def preference_pairs(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    pairing: str = "best_worst",
    margin: float = 0.0,
    min_chosen: float | None = None,
    expert: torch.Tensor | None = None,
    student_margin: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Pairs (chosen, rejected) of samples of the same group.

    ``best_worst``: per group, chosen = the first sample with the highest reward, rejected = the
    first with the lowest (online DPO, Guo et al. 2024); a group whose rewards are all equal
    gives no pair and is counted as skipped. ``adjacent``: samples 0-1, 2-3, ... of each group
    in batch order (an odd last one left out), the better one as chosen; every pair is kept,
    ties included (REBEL regresses their reward difference, 0). ``margin``: every pair (i, j)
    of a group with r_i - r_j >= ``margin`` and r_i >= ``min_chosen`` (DNO-Prct's large-margin
    pairs, Rosset et al. 2024, arXiv:2404.03715, section 5.1: positives scoring 5 or 6 on a
    6-point scale, negatives at least 2 lower, 1 when the positive is the student's own sample:
    ``student_margin`` for the rows ``expert`` does not flag), chosen in batch order, then
    rejected; a group with none is skipped. Groups appear in order of their first sample.

    Args:
        rewards: [N] rewards.
        group_ids: [N] group of every sample.
        pairing: ``best_worst``, ``adjacent`` or ``margin``.
        margin: the ``margin`` pairing's least reward gap, > 0.
        min_chosen: the ``margin`` pairing's least chosen reward (None: any).
        expert: [N] bool, the gold responses (``expert.traces``), or None (all sampled).
        student_margin: the ``margin`` pairing's margin for a sampled chosen (None: margin).
    Returns:
        chosen [P] and rejected [P] long row indices, and the number of groups skipped.
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    if pairing == "margin" and not margin > 0:
        raise ValueError(f"the margin pairing needs a margin > 0, got {margin}")
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ValueError(
            f"rewards and group_ids must be [N], got {tuple(rewards.shape)}, "
            f"{tuple(group_ids.shape)}"
        )
    members: dict[int, list[int]] = {}
    for row, group in enumerate(group_ids.tolist()):
        members.setdefault(group, []).append(row)
    r = rewards.tolist()
    chosen, rejected, skipped = [], [], 0
    gold = [False] * len(r) if expert is None else expert.tolist()
    relaxed = margin if student_margin is None else student_margin
    for rows in members.values():
        if pairing == "margin":
            floor = -math.inf if min_chosen is None else min_chosen
            found = [
                (i, j)
                for i in rows
                for j in rows
                if i != j and r[i] >= floor and r[i] - r[j] >= (margin if gold[i] else relaxed)
            ]
            chosen.extend(i for i, _ in found)
            rejected.extend(j for _, j in found)
            skipped += not found
            continue
        if pairing == "best_worst":
            best = max(rows, key=lambda i: (r[i], -i))  # the first of the highest
            worst = min(rows, key=lambda i: (r[i], i))  # the first of the lowest
            if r[best] == r[worst]:
                skipped += 1
                continue
            chosen.append(best)
            rejected.append(worst)
            continue
        for a, b in zip(rows[0::2], rows[1::2], strict=False):  # adjacent (an odd last one out)
            first, second = (a, b) if r[a] >= r[b] else (b, a)
            chosen.append(first)
            rejected.append(second)
    as_long = torch.tensor(chosen, dtype=torch.long), torch.tensor(rejected, dtype=torch.long)
    return as_long[0], as_long[1], skipped


@register_objective(
    "dpo",
    needs_reference=True,
    pairing="best_worst",
    citation=(
        "Rafailov et al. 2023, Direct Preference Optimization: Your Language Model is Secretly "
        "a Reward Model, arXiv:2305.18290 (eq. 7); label smoothing: Mitchell 2023, cDPO"
    ),
    summary="-log sigmoid(beta * h), h = the policy's log-ratio to the reference, chosen minus "
    "rejected",
)
def dpo_loss(
    pairs: PairLogps, beta: float = 0.1, label_smoothing: float = 0.0
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DPO: ``l = -(1 - e) log sigmoid(beta h) - e log sigmoid(-beta h)`` [P], with
    ``h = [log pi(y_c) - log pi_ref(y_c)] - [log pi(y_r) - log pi_ref(y_r)]`` (Rafailov et al.
    2023, eq. 7; e = ``label_smoothing``, the conservative cDPO, 0 in the paper).

    Returns the loss [P] and ``reward_margin`` (beta h, the implicit reward's margin),
    ``accuracy`` (h > 0) per pair."""
    if beta <= 0:
        raise ValueError(f"dpo: beta must be > 0, got {beta}")
    if not 0 <= label_smoothing < 0.5:
        raise ValueError(f"dpo: label_smoothing must be in [0, 0.5), got {label_smoothing}")
    h = pairs.reference_margin("dpo")
    logits = beta * h
    loss = -(1 - label_smoothing) * torch.nn.functional.logsigmoid(logits)
    if label_smoothing:
        loss = loss - label_smoothing * torch.nn.functional.logsigmoid(-logits)
    return loss, {"reward_margin": logits.detach(), "accuracy": (h.detach() > 0).float()}


@register_objective(
    "dpo_norm",
    needs_reference=True,
    pairing="best_worst",
    citation=(
        "Lambert et al. 2024, Tulu 3: Pushing Frontiers in Open Language Model Post-Training, "
        "arXiv:2411.15124 (eq. 6, length-normalised DPO)"
    ),
    summary="-log sigmoid(beta * h_norm), h_norm = each completion's log-ratio to the "
    "reference divided by its length, chosen minus rejected",
)
def dpo_norm_loss(
    pairs: PairLogps, beta: float = 5.0
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Length-normalised DPO: ``l = -log sigmoid(beta h_norm)`` [P] with
    ``h_norm = [log pi(y_c) - log pi_ref(y_c)] / |y_c| - [log pi(y_r) - log pi_ref(y_r)] / |y_r|``
    (Tulu 3, Lambert et al. 2024, eq. 6; beta 5 there), so a longer completion's log-ratio does
    not weigh more for its length.

    Returns the loss [P] and ``reward_margin`` (beta h_norm), ``accuracy`` (h_norm > 0)."""
    if beta <= 0:
        raise ValueError(f"dpo_norm: beta must be > 0, got {beta}")
    if pairs.chosen_tokens is None or pairs.rejected_tokens is None:
        raise ValueError("dpo_norm needs the completions' token counts")
    if pairs.ref_chosen is None or pairs.ref_rejected is None:
        raise ValueError("objective 'dpo_norm' needs the reference's log-probs")
    chosen = (pairs.chosen - pairs.ref_chosen) / pairs.chosen_tokens.clamp_min(1)
    rejected = (pairs.rejected - pairs.ref_rejected) / pairs.rejected_tokens.clamp_min(1)
    h = chosen - rejected
    loss = -torch.nn.functional.logsigmoid(beta * h)
    return loss, {"reward_margin": beta * h.detach(), "accuracy": (h.detach() > 0).float()}


@register_objective(
    "exo",
    needs_reference=True,
    pairing="best_worst",
    citation=(
        "Ji et al. 2024, Towards Efficient Exact Optimization of Language Model Alignment, "
        "arXiv:2402.00856 (EXO, eq. 16: the pairwise-preference form)"
    ),
    summary="reverse KL from the policy's pair distribution sigmoid(+-beta h) to the labels' "
    "(1 - eps, eps): sigmoid(beta h) [log sigmoid(beta h) - log(1 - eps)] + sigmoid(-beta h) "
    "[log sigmoid(-beta h) - log eps]",
)
def exo_loss(
    pairs: PairLogps, beta: float = 0.1, label_smoothing: float = 1e-3
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """EXO on preference pairs (Ji et al. 2024, eq. 16): the policy's distribution over the
    pair, ``p = (sigmoid(beta h), sigmoid(-beta h))`` with DPO's log-ratio margin h, is pulled
    towards the labels' ``(1 - e, e)`` by the reverse KL
    ``l = sigmoid(beta h) [log sigmoid(beta h) - log(1 - e)]
    + sigmoid(-beta h) [log sigmoid(-beta h) - log e]`` [P]
    (e = ``label_smoothing``, 1e-3 in the paper's experiments; e > 0, since the label
    distribution must give the rejected completion some mass). DPO minimises the forward KL
    between the same two distributions (at e = 0); the reverse KL is mode-seeking: it stops
    pushing a pair once p matches the labels, where DPO keeps widening the margin.

    Returns the loss [P] (0 where p equals the labels) and ``reward_margin`` (beta h),
    ``accuracy`` (h > 0) per pair."""
    if beta <= 0:
        raise ValueError(f"exo: beta must be > 0, got {beta}")
    if not 0 < label_smoothing < 0.5:
        raise ValueError(f"exo: label_smoothing must be in (0, 0.5), got {label_smoothing}")
    h = pairs.reference_margin("exo")
    logits = beta * h
    chosen, rejected = F.logsigmoid(logits), F.logsigmoid(-logits)  # log p, log (1 - p)
    loss = chosen.exp() * (chosen - math.log(1 - label_smoothing)) + rejected.exp() * (
        rejected - math.log(label_smoothing)
    )
    return loss, {"reward_margin": logits.detach(), "accuracy": (h.detach() > 0).float()}


@register_objective(
    "ipo",
    needs_reference=True,
    pairing="best_worst",
    citation=(
        "Azar et al. 2023, A General Theoretical Paradigm to Understand Learning from Human "
        "Preferences, arXiv:2310.12036 (eq. 17)"
    ),
    summary="(h - 1 / (2 tau))^2: regress the log-ratio margin on a fixed target, no sigmoid",
)
def ipo_loss(pairs: PairLogps, tau: float = 0.1) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """IPO: ``l = (h - 1 / (2 tau))^2`` [P] with DPO's log-ratio margin h (Azar et al. 2023,
    eq. 17, sequence log-probs as in the paper); tau is the regularisation (DPO's beta).

    Returns the loss [P] and ``reward_margin`` (tau h), ``accuracy`` (h > 0) per pair."""
    if tau <= 0:
        raise ValueError(f"ipo: tau must be > 0, got {tau}")
    h = pairs.reference_margin("ipo")
    loss = (h - 1 / (2 * tau)) ** 2
    return loss, {"reward_margin": tau * h.detach(), "accuracy": (h.detach() > 0).float()}


@register_objective(
    "rebel",
    needs_reference=False,
    pairing="adjacent",
    citation=(
        "Gao et al. 2024, REBEL: Reinforcement Learning via Regressing Relative Rewards, "
        "arXiv:2404.16767 (eq. 1)"
    ),
    summary="regress (1/eta) x the difference of log-ratios to the sampler on the reward "
    "difference",
)
def rebel_loss(pairs: PairLogps, eta: float = 1.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """REBEL: ``l = ((1/eta) ([log pi(y_c) - log pi_old(y_c)] - [log pi(y_r) - log pi_old(y_r)])
    - (r(y_c) - r(y_r)))^2`` [P] (Gao et al. 2024, eq. 1: a least-squares regression of relative
    rewards on differences of log-ratios to the policy pi_old that sampled them).

    Returns the loss [P] and ``log_ratio_margin`` (the difference of log-ratios) per pair."""
    if eta <= 0:
        raise ValueError(f"rebel: eta must be > 0, got {eta}")
    delta = (pairs.chosen - pairs.old_chosen) - (pairs.rejected - pairs.old_rejected)
    loss = (delta / eta - pairs.reward_margin) ** 2
    return loss, {"log_ratio_margin": delta.detach()}


@register_objective(
    "copg",
    needs_reference=True,
    pairing="adjacent",
    citation=(
        "Flet-Berliac et al. 2024, Contrastive Policy Gradient: Aligning LLMs on sequence-level "
        "scores in a supervised-friendly fashion, arXiv:2406.19185 (the CoPG sample loss)"
    ),
    summary="regress beta x the difference of log-ratios to the reference on the reward "
    "difference of two completions: (r - r' - beta [log-ratio(y) - log-ratio(y')])^2",
)
def copg_loss(pairs: PairLogps, beta: float = 0.1) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CoPG (Flet-Berliac et al. 2024): with the regularised reward
    ``R_beta(y) = r(y) - beta log(pi(y) / pi_ref(y))``, the sample loss of two completions y, y'
    of one prompt is ``l = (R_beta(y) - R_beta(y'))^2 = (r - r' - beta h)^2`` [P], h the
    difference of their log-ratios to the reference (DPO's margin). Its gradient is
    ``-2 beta (R_beta(y) - R_beta(y')) grad log(pi(y) / pi(y'))``: a policy gradient whose
    baseline is the other completion's regularised reward, so off-policy pairs need no
    importance weights, and its minimum is pi_ref exp(r / beta), the KL-regularised optimum.
    With r - r' = 1/2 it is beta^2 (h - 1 / (2 beta))^2: IPO (:func:`ipo_loss`). Pairs are
    two samples each (``adjacent``), ties included, like REBEL, which regresses the same
    reward difference on log-ratios to the sampling policy instead of the reference.

    Returns the loss [P] and ``reward_margin`` (beta h) per pair."""
    if beta <= 0:
        raise ValueError(f"copg: beta must be > 0, got {beta}")
    h = pairs.reference_margin("copg")
    loss = (pairs.reward_margin - beta * h) ** 2
    return loss, {"reward_margin": beta * h.detach()}


@register_objective(
    "tpo",
    needs_reference=False,
    pairing="best_worst",
    citation=(
        "Saeidi et al. 2024, Triple Preference Optimization: Achieving Better Alignment using a "
        "Single Step Optimization, arXiv:2405.16681 (TPO; the authors' TPOTrainer.tpo_loss)"
    ),
    summary="-log sigmoid(beta [log pi(y_c) - log pi(y_r)]) + alpha x the gold completion's "
    "NLL per token, no reference (the gold is the chosen completion)",
)
def tpo_loss(
    pairs: PairLogps, beta: float = 0.1, alpha: float = 0.5
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """TPO (Saeidi et al. 2024), as the authors' ``TPOTrainer`` computes it: a reference-free
    preference term on the policy's own sequence log-probs plus the gold response's NLL,

        ``l = -log sigmoid(beta [log pi(y_c) - log pi(y_r)]) + alpha (-log pi(y_gold) / |y_gold|)``

    [P] (beta 0.1, alpha 0.5 in the authors' run script), in one step, without SFT first and
    without a reference model. The gold response here is the chosen one (a pairs file has no
    third completion), and its NLL is each pair's token mean (the authors average over the
    batch's gold tokens: the same when the golds are of equal length).

    Returns the loss [P] and ``reward_margin`` (beta [log pi(y_c) - log pi(y_r)]),
    ``accuracy`` (the margin > 0), ``gold_nll`` per pair."""
    if beta <= 0:
        raise ValueError(f"tpo: beta must be > 0, got {beta}")
    if alpha < 0:
        raise ValueError(f"tpo: alpha must be >= 0, got {alpha}")
    if pairs.chosen_tokens is None:
        raise ValueError("tpo needs the completions' token counts")
    margin = beta * (pairs.chosen - pairs.rejected)
    gold_nll = -pairs.chosen / pairs.chosen_tokens.clamp_min(1)
    loss = -F.logsigmoid(margin) + alpha * gold_nll
    return loss, {
        "reward_margin": margin.detach(),
        "accuracy": (margin.detach() > 0).float(),
        "gold_nll": gold_nll.detach(),
    }


@register_objective(
    "inpo",
    needs_reference=True,
    needs_sampler=True,
    pairing="best_worst",
    citation=(
        "Zhang et al. 2024, Iterative Nash Policy Optimization: Aligning LLMs with General "
        "Preferences via No-Regret Learning, arXiv:2407.00617 (INPO; the released inpo_loss)"
    ),
    summary="(h_theta - ratio h_ref - (1 - ratio) h_t - 1/(2 eta))^2: IPO's squared loss on the "
    "log-ratio margin, anchored at a mix of the reference and the policy pi_t that sampled the "
    "pairs (no-regret online mirror descent towards the Nash policy)",
)
def inpo_loss(
    pairs: PairLogps, eta: float = 0.005, ratio: float = 1 / 3
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """INPO (Zhang et al. 2024), as the released ``inpo_loss`` computes it: with the margins
    ``h_pi = log pi(y_w) - log pi(y_l)`` of the trained policy, the reference and the previous
    iteration's policy pi_t (the snapshot that sampled the pair: the rollout engine's
    log-probs),

        ``l = (h_theta - ratio h_ref - (1 - ratio) h_t - 1 / (2 eta))^2``    [P]

    ``ratio = tau / eta`` weighs the reference against pi_t (tau the KL regularisation, eta the
    mirror-descent step); the run script's eta = 0.005 and ratio = 1/3. Sequence log-probs, as
    in the authors' trainer. The pairs are each group's best and worst samples by the reward
    (the paper's preference oracle picks them among K samples of pi_t). With ratio = 1 it is
    IPO with tau = eta (:func:`ipo_loss`).

    Returns the loss [P] and ``anchored_margin`` (h_theta - ratio h_ref - (1 - ratio) h_t),
    ``accuracy`` (h_theta > 0) per pair."""
    if eta <= 0:
        raise ValueError(f"inpo: eta must be > 0, got {eta}")
    if not 0 <= ratio <= 1:
        raise ValueError(f"inpo: ratio (tau / eta) must be in [0, 1], got {ratio}")
    if pairs.sampler_chosen is None or pairs.sampler_rejected is None:
        raise ValueError("inpo needs the sampling policy's log-probs of each pair")
    if pairs.ref_chosen is None or pairs.ref_rejected is None:
        raise ValueError("objective 'inpo' needs the reference's log-probs")
    h_theta = pairs.chosen - pairs.rejected
    h_ref = pairs.ref_chosen - pairs.ref_rejected
    h_t = pairs.sampler_chosen - pairs.sampler_rejected
    anchored = h_theta - ratio * h_ref - (1 - ratio) * h_t
    loss = (anchored - 1 / (2 * eta)) ** 2
    return loss, {
        "anchored_margin": anchored.detach(),
        "accuracy": (h_theta.detach() > 0).float(),
    }
