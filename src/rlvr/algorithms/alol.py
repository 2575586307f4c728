"""A-LoL: offline policy gradient on the data's completions with a sequence-level advantage
over the reference (Baheti et al. 2023, "Leftover Lunch: Advantage-based Offline
Reinforcement Learning for Language Models" / "Improving Language Models with Advantage-based
Offline Policy Gradients", arXiv:2305.14718; the formulas below follow the authors' code,
``abaheti95/LoL-RL``: ``lolrl_qlora_llama_hh.py`` and
``train_generation_task_with_off_policy_PG.py``).

The whole completion y of a data row is one action. Its reward R(x, y) is a sequence score
(a classifier, a verifier: here the run's reward on the data's completion), its advantage is
measured against the reference policy's value on the prompt and only the rows that beat it
are learned from:

    A(x, y) = max(R(x, y) - V_ref(x), 0)                                           (advantage)

    grad J = E_data[ A(x, y) * w(x, y) * grad log pi_theta(y | x) ]                     (loss)

    w = clip(pi_theta(y | x) / pi_ref(y | x), 1 - eps, 1 + eps)       A-LoL (``ratio: sequence``)
    w_t = clip(pi_theta(y_t | .) / pi_ref(y_t | .), 1 - eps, 1 + eps)  A-LoL seq (``token``)
    w = 1                                               A-LoL ref-free, A-LoL KL (``none``)

with the weight detached (the code computes it under ``no_grad``), eps = 0.9 (the code's
``ppo_clip``: w in [0.1, 1.9]), the NLL summed over a row's tokens and averaged over rows
(``seq-mean-token-sum``). A-LoL KL adds ``kl_beta * sum_t (log pi_theta - log pi_ref)`` per
row (the code's ``kl_beta * (NLL_ref - NLL_theta)``) with w = 1.

V_ref(x): the authors fit a value head (attention over the frozen reference's last hidden
states of the prompt, sigmoid output) to the rewards of the reference's greedy completions of
held-out prompts. rlvr uses that regression target itself, on the training prompt: the reward
of the reference's greedy completion of x (the ``reference_values`` signal, an engine kept over
the initial policy), with no head to fit. Not built: the authors' priority sampling of rows in
proportion to A (here a row with A = 0 is in the batch with zero weight).
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    _need,
    register_advantage,
)
from rlvr.algorithms.losses import loss_info, register_policy_loss

PAPER = (
    'Baheti et al. 2023, "Improving Language Models with Advantage-based Offline Policy '
    'Gradients" (A-LoL), arXiv:2305.14718'
)

RATIOS = ("sequence", "token", "none")


def alol_advantages(rewards: torch.Tensor, reference_values: torch.Tensor) -> torch.Tensor:
    """A = max(R(x, y) - V_ref(x), 0) [N]: the reward of each data completion over the
    reference policy's value on its prompt, negative advantages dropped (the authors'
    ``torch.clamp(advantage, min=0.0)``).

    Args:
        rewards: [N] R(x, y) of the data's completions.
        reference_values: [N] V_ref(x) of each row's prompt.
    """
    if reference_values.shape != rewards.shape:
        raise ValueError(
            f"reference_values must be [N] like rewards, got {tuple(reference_values.shape)}"
        )
    r = rewards if rewards.is_floating_point() else rewards.float()
    return (r - reference_values.to(r.dtype)).clamp(min=0.0)


@register_advantage("alol", requires=("reference_values",), paper=PAPER)
def _alol_estimator(inputs: AdvantageInputs) -> AdvantageOutput:
    values = _need("alol", inputs, "reference_values")
    return AdvantageOutput(alol_advantages(inputs.rewards, values))


@register_policy_loss(
    "alol",
    clip_space="ratio",
    needs_reference=True,
    offline=True,
    summary="A-LoL: -A x sg[clip(pi/pi_ref, 1 - eps, 1 + eps)] x log pi on the data's "
    "completions (ratio: sequence, token or none; kl_beta: A-LoL KL)",
    paper=PAPER,
)
def alol_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ref_logp: torch.Tensor,
    clip_low: float = 0.9,
    clip_high: float = 0.9,
    ratio: str = "sequence",
    kl_beta: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A-LoL's per-token loss l_t = -A w log pi_theta(y_t) + kl_beta (log pi_theta(y_t) -
    log pi_ref(y_t)) (the module docstring; aggregate with ``seq-mean-token-sum``: the sum
    over a row's tokens, the mean over rows).

    Args:
        logp: [B, T] log pi_theta of the completion tokens (requires grad).
        old_logp: [B, T] log pi_old, for the metrics only.
        advantages: [B] (or [B, T]) A(x, y) >= 0.
        mask: [B, T] 1 on the completion's trained tokens (the sequence ratio's sum).
        ref_logp: [B, T] log pi_ref (no grad).
        clip_low, clip_high: w is clipped to [1 - clip_low, 1 + clip_high] (0.9: [0.1, 1.9]).
        ratio: ``sequence`` (A-LoL: pi_theta(y|x) / pi_ref(y|x), one weight per row),
            ``token`` (A-LoL seq: each token's ratio) or ``none`` (ref-free: w = 1).
        kl_beta: A-LoL KL's weight of the sequence log-ratio to the reference (0: none).
    Returns:
        loss [B, T] and the metrics of :func:`rlvr.algorithms.loss_info` (``ratio``: the
        unclipped weight).
    """
    if ratio not in RATIOS:
        raise ValueError(f"policy loss alol: ratio must be one of {RATIOS}, got {ratio!r}")
    if kl_beta < 0:
        raise ValueError(f"policy loss alol: kl_beta must be >= 0, got {kl_beta}")
    m = mask.to(logp.dtype)
    log_ratio = (logp - ref_logp).detach() * m  # log pi_theta(y_t) - log pi_ref(y_t)
    if ratio == "sequence":  # pi_theta(y | x) / pi_ref(y | x), on every token of the row
        rho = torch.exp(log_ratio.sum(-1, keepdim=True)).expand_as(logp)
    elif ratio == "token":
        rho = torch.exp(log_ratio)
    else:
        rho = torch.ones_like(logp)
    weight = rho.clamp(1.0 - clip_low, 1.0 + clip_high) if ratio != "none" else rho
    a = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    loss = -a * weight * logp  # -A sg[clip(w)] log pi_theta(y_t)
    if kl_beta:
        loss = loss + kl_beta * (logp - ref_logp.detach())  # A-LoL KL
    low, high = rho < 1.0 - clip_low, rho > 1.0 + clip_high
    if ratio == "none":
        low, high = torch.zeros_like(low), torch.zeros_like(high)
    return loss, loss_info(rho, logp, old_logp, low, high)
