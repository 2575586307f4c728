"""The rollout/trainer mismatch: its measurement and its corrections (TIS, MIS, IcePop).

The rollout engine samples with its own kernels and precision (bf16 here, vLLM's kernels), so
the sampler's distribution ``pi_sampler`` differs from the trainer's ``pi_train`` even at
identical weights: the "on-policy" gradient is slightly off-policy (Yao et al. 2025, "Your
Efficient RL Framework Secretly Brings You Off-Policy RL Training"). Every function here reads
the per-token log-ratio

    log rho_t = log pi_train(y_t | s_t) - log pi_sampler(y_t | s_t),

of the trainer's log-probs before the update (``old_logp``) and the sampler's log-probs of the
same sampled tokens, without gradient. It is measured (:func:`mismatch_metrics`) and corrected
by importance weights on each token's policy loss (:func:`importance_weights`), at one of three
levels (Liu, Yao et al. 2025, "When Speed Kills Stability: Demystifying RL Collapse from the
Training-Inference Mismatch"):

- token: rho_t;
- sequence: rho_seq = prod_t rho_t = exp(sum_t log rho_t), one per sequence, on all its tokens;
- geometric: exp(mean_t log rho_t), a length-independent sequence ratio (masks only).

Truncated IS (TIS, Yao et al. 2025) weights by min(rho, C), bounding the variance; masked IS
(MIS, Liu, Yao et al. 2025) drops tokens or whole sequences whose ratio leaves a band [low,
high]; IcePop (Ling team 2025, Ring-1T, "Every Step Evolves") is token-level MIS with the band
[0.5, 5]. Off-policy sequence masking (DeepSeek-AI 2025, "DeepSeek-V3.2: Pushing the Frontier
of Open Large Language Models", arXiv:2512.02556) drops negative-advantage sequences that the
policy being trained has moved far from (:func:`off_policy_sequence_mask`).
"""

from __future__ import annotations

import math
from typing import Literal

import torch

Level = Literal["token", "sequence", "geometric"]
MISMATCH_BAND = (0.5, 2.0)
"""The ratio band of ``mismatch/ratio_out_of_band_frac``: the sampler and the trainer disagree
by more than a factor 2 on a token's probability outside it."""


def _log_ratio(
    train_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """log rho_t = train_logp - sampler_logp [N, T] in fp32, no gradient, 0 off ``mask``."""
    diff = train_logp.detach().float() - sampler_logp.float()
    return torch.where(mask.bool(), diff, torch.zeros_like(diff))


def _at_level(log_rho: torch.Tensor, mask: torch.Tensor, level: Level) -> torch.Tensor:
    """The log-ratio of each token's ``level`` [N, T]: log rho_t (token), sum_t log rho_t
    (sequence) or mean_t log rho_t (geometric) over the row's masked tokens, broadcast to them."""
    if level == "token":
        return log_rho
    total = log_rho.sum(-1, keepdim=True)
    if level == "geometric":
        total = total / mask.sum(-1, keepdim=True).clamp(min=1)
    return total.expand_as(log_rho)


def mismatch_metrics(
    train_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor
) -> tuple[dict[str, float], int]:
    """Token means of the sampler/trainer mismatch over ``mask``, and the number of tokens.

    With r_t = pi_train(y_t) / pi_sampler(y_t):

    - ``mismatch/abs_log_ratio``: mean |log r_t| (0 when the two agree);
    - ``mismatch/kl_k3``: mean of Schulman's k3 = r_t - 1 - log r_t >= 0, an unbiased estimate
      of the per-token KL(pi_sampler || pi_train), since y_t is drawn from the sampler;
    - ``mismatch/ratio_out_of_band_frac``: fraction of tokens with r_t outside
      :data:`MISMATCH_BAND` [0.5, 2].

    Micro-batches combine exactly by weighting each one's means with its token count.

    Args:
        train_logp: [N, T] the trainer's log-probs of the sampled tokens (before the update).
        sampler_logp: [N, T] the rollout engine's log-probs of the same tokens.
        mask: [N, T] 1 on completion tokens (padding is ignored).
    Returns:
        ({name: token mean}, tokens); every mean is 0 when there are no tokens.
    """
    m = mask.bool()
    log_r = _log_ratio(train_logp, sampler_logp, m)
    low, high = (math.log(b) for b in MISMATCH_BAND)
    sums = torch.stack(
        [
            log_r.abs().sum(),
            (torch.expm1(log_r) - log_r).sum(),  # k3, 0 off the mask (log_r = 0 there)
            (m & ((log_r < low) | (log_r > high))).sum().float(),
            m.sum().float(),
        ]
    ).tolist()
    tokens = int(sums[-1])
    names = ("mismatch/abs_log_ratio", "mismatch/kl_k3", "mismatch/ratio_out_of_band_frac")
    return {k: s / max(tokens, 1) for k, s in zip(names, sums[:-1], strict=True)}, tokens


def importance_weights(
    train_logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    mask: torch.Tensor,
    cap: float | None = None,
    cap_level: Literal["token", "sequence"] = "token",
    band: tuple[float, float] | None = None,
    band_level: Level = "token",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Importance weights [N, T] of each token's policy loss, correcting the sampler mismatch.

    - TIS (``cap`` C; Yao et al. 2025 at token level, Liu, Yao et al. 2025 at sequence level):
      w = min(rho, C) with rho the ``cap_level`` ratio (rho_t, or rho_seq on every token of
      the sequence), computed in log space so that long sequences never overflow.
    - MIS (``band`` [low, high]; Liu, Yao et al. 2025; IcePop: token level, [0.5, 5]): a token
      (``band_level`` token) or every token of a sequence (sequence, geometric) whose
      ``band_level`` ratio leaves [low, high] gets weight 0; the others get the TIS weight when
      ``cap`` is set, else the IS ratio: rho at the band's level for token / sequence, rho_t
      for geometric.
    - Neither: the mask itself (no correction).

    Args:
        train_logp: [N, T] the trainer's log-probs of the sampled tokens before the update.
        sampler_logp: [N, T] the rollout engine's log-probs of the same tokens.
        mask: [N, T] 1 on completion tokens; sequence ratios are over a row's masked tokens.
        cap: TIS's C (> 0; Yao et al. use 2), or None.
        cap_level: the ratio TIS truncates: token or sequence.
        band: MIS's (low, high) with 0 <= low < high, or None.
        band_level: the ratio MIS tests: token, sequence or geometric.
    Returns:
        (weights [N, T] fp32 without gradient, 0 off ``mask``; info) with info's
        ``truncated_frac`` (TIS on: fraction of the masked tokens kept with a truncated weight)
        and ``masked_frac`` (MIS on: fraction of the masked tokens given weight 0).
    """
    if cap is not None and cap <= 0:
        raise ValueError(f"TIS cap must be positive, got {cap}")
    if band is not None and not 0 <= band[0] < band[1]:
        raise ValueError(f"MIS band must satisfy 0 <= low < high, got {band}")
    m = mask.bool()
    if cap is None and band is None:
        return m.float(), {}
    log_rho = _log_ratio(train_logp, sampler_logp, m)
    info: dict[str, float] = {}
    tokens = max(int(m.sum()), 1)
    keep = m
    if band is not None:
        log_band = _at_level(log_rho, m, band_level)
        low = math.log(band[0]) if band[0] > 0 else -math.inf
        keep = m & (log_band >= low) & (log_band <= math.log(band[1]))
        info["masked_frac"] = int((m & ~keep).sum()) / tokens
    if cap is not None:
        log_w = _at_level(log_rho, m, cap_level)
        info["truncated_frac"] = int((keep & (log_w > math.log(cap))).sum()) / tokens
        log_w = log_w.clamp(max=math.log(cap))
    else:  # MIS alone: the IS ratio of the band's level (geometric: rho_t)
        log_w = _at_level(log_rho, m, "token" if band_level == "geometric" else band_level)
    return torch.where(keep, log_w.exp(), torch.zeros_like(log_w)), info


def off_policy_sequence_mask(
    logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    delta: float,
) -> tuple[torch.Tensor, float]:
    """DeepSeek-V3.2's off-policy sequence masking: M_i = 0 where A_i < 0 and

        (1 / |o_i|) sum_t log(pi_sampler(o_t) / pi_theta(o_t)) > delta,

    else 1. A negative sample the current policy already moved away from (a sample of a stale
    or mismatched behaviour policy) is dropped; the paper finds that learning from such samples
    destabilises training, while positive samples are kept whatever their divergence.

    Args:
        logp: [N, T] log pi_theta of the sampled tokens (the policy being trained; read without
            gradient).
        sampler_logp: [N, T] the behaviour policy's (the rollout engine's) log-probs.
        advantages: [N] or [N, T] advantages (a row's sign is its first masked token's).
        mask: [N, T] 1 on completion tokens.
        delta: the divergence threshold (nats per token, >= 0).
    Returns:
        (the [N, T] float mask M_i on each of row i's tokens, the fraction of rows dropped).
    """
    if delta < 0:
        raise ValueError(f"the off-policy mask threshold must be >= 0, got {delta}")
    m = mask.bool()
    divergence = _at_level(-_log_ratio(logp, sampler_logp, mask), mask, "geometric")[:, 0]
    adv = (
        advantages
        if advantages.dim() == 1
        else advantages.gather(1, m.float().argmax(1, True))[:, 0]
    )
    dropped = (adv < 0) & (divergence > delta) & m.any(-1)
    keep = (~dropped).unsqueeze(-1) & m
    return keep.float(), dropped.float().mean().item() if len(dropped) else 0.0
