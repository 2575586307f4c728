"""Per-token policy losses and their aggregation into a scalar.

Notation: completion i of the batch, token t, mask m_{i,t} (1 on completion tokens the loss
sees), advantage A_i (or A_{i,t}), rho_{i,t} = pi(y_t) / pi_old(y_t) = exp(logp - old_logp).

Aggregation is micro-batch invariant: when the trainer splits a batch into micro-batches for
gradient accumulation, it passes the full batch's normalisers (``total_tokens`` = sum of the
full mask, ``total_seqs`` = number of sequences of the full batch) to :func:`aggregate`, which
then returns the micro-batch's share of the full-batch value; summing (and back-propagating)
the shares gives exactly the full-batch loss and gradient.

Masked-out positions must hold finite values: they are zeroed by multiplication with the mask.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlvr.algorithms.kl import kl_k3


def clipped_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate (Schulman et al. 2017, eq. 7) as a per-token loss, as in GRPO.

    L = max(-A * rho, -A * clip(rho, 1 - clip_low, 1 + clip_high)). ``clip_high > clip_low``
    is DAPO's clip-higher (Yu et al. 2025; 0.2 / 0.28). With ``dual_clip = c > 1`` the loss
    of tokens with A < 0 is also bounded above: L = min(L, -A * c) (dual-clip PPO, Ye et al.
    2020), so a huge rho on a bad token cannot blow up the update.

    Args:
        logp: [B, T] log pi of the sampled tokens (requires grad).
        old_logp: [B, T] log pi_old of the same tokens (the sampling policy; no grad).
        advantages: [B] per-sequence or [B, T] per-token advantages.
        clip_low: eps_low, the ratio is clipped below at 1 - clip_low.
        clip_high: eps_high, the ratio is clipped above at 1 + clip_high.
        dual_clip: the bound c (> 1) for negative advantages, or None.
    Returns:
        loss [B, T] (unmasked), and detached [B, T] tensors for metrics: ``ratio`` (rho),
        ``is_clipped_low`` (A < 0 and rho < 1 - clip_low: clip active, no gradient),
        ``is_clipped_high`` (A > 0 and rho > 1 + clip_high), ``is_dual_clipped`` (A < 0 and
        -A * rho above -A * c), ``approx_kl`` (k3 estimate of KL(pi_old || pi)).
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    ratio = torch.exp(logp - old_logp)  # rho = pi / pi_old
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)  # L = max(-A rho, -A clip(rho))
    is_dual_clipped = torch.zeros_like(loss, dtype=torch.bool)
    if dual_clip is not None:
        bound = -adv * dual_clip
        is_dual_clipped = (adv < 0) & (loss > bound)
        loss = torch.where(adv < 0, torch.minimum(loss, bound), loss)  # L = min(L, -A c), A < 0
    ratio = ratio.detach()
    info = {
        "ratio": ratio,
        "is_clipped_low": (adv < 0) & (ratio < 1.0 - clip_low),
        "is_clipped_high": (adv > 0) & (ratio > 1.0 + clip_high),
        "is_dual_clipped": is_dual_clipped,
        "approx_kl": kl_k3(old_logp.detach(), logp.detach()),  # samples from pi_old
    }
    return loss, info


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum(x * m) / sum(m), over all elements or along ``dim``; 0 where the mask is all zero.

    Args:
        x: [...] values.
        mask: [...] same shape, bool or float weights.
    Returns:
        [] (``dim`` None) or x reduced along ``dim``.
    """
    m = mask.to(x.dtype)
    total = (x * m).sum() if dim is None else (x * m).sum(dim)
    count = m.sum() if dim is None else m.sum(dim)
    return total / torch.where(count > 0, count, torch.ones_like(count))


def _share(total: torch.Tensor, normaliser: torch.Tensor | float) -> torch.Tensor:
    """total / normaliser, with 0 / 0 = 0 (a batch without any token or sequence)."""
    den = torch.as_tensor(normaliser, dtype=total.dtype, device=total.device)
    return total / torch.where(den > 0, den, torch.ones_like(den))


AggregationFn = Callable[..., torch.Tensor]

AGGREGATIONS: dict[str, AggregationFn] = {}


def register_aggregation(name: str) -> Callable[[AggregationFn], AggregationFn]:
    """Decorator: add ``fn(loss, mask, *, total_tokens, total_seqs, max_len) -> []``.

    Every aggregation receives all three normalisers and uses those its formula needs.
    """

    def decorator(fn: AggregationFn) -> AggregationFn:
        if name in AGGREGATIONS:
            raise ValueError(f"aggregation {name!r} is already registered")
        AGGREGATIONS[name] = fn
        return fn

    return decorator


@register_aggregation("token-mean")
def token_mean(
    loss: torch.Tensor,
    mask: torch.Tensor,
    *,
    total_tokens: float | None,
    total_seqs: float | None,
    max_len: int | None,
) -> torch.Tensor:
    """DAPO (Yu et al. 2025): sum_{i,t} L m / sum_{i,t} m; every token weighs the same.

    With ``total_tokens`` the denominator is that (full-batch) token count.
    """
    m = mask.to(loss.dtype)
    return _share((loss * m).sum(), m.sum() if total_tokens is None else total_tokens)


@register_aggregation("seq-mean-token-mean")
def seq_mean_token_mean(
    loss: torch.Tensor,
    mask: torch.Tensor,
    *,
    total_tokens: float | None,
    total_seqs: float | None,
    max_len: int | None,
) -> torch.Tensor:
    """GRPO (Shao et al. 2024, eq. 3): (1/B) sum_i (sum_t L m / sum_t m).

    Every sequence weighs the same, so a token of a long completion weighs less. With
    ``total_seqs`` the outer denominator is that (full-batch) sequence count.
    """
    per_seq = masked_mean(loss, mask, dim=-1)  # sum_t L m / sum_t m, 0 for an empty row
    return _share(per_seq.sum(), loss.shape[0] if total_seqs is None else total_seqs)


@register_aggregation("seq-mean-token-sum")
def seq_mean_token_sum(
    loss: torch.Tensor,
    mask: torch.Tensor,
    *,
    total_tokens: float | None,
    total_seqs: float | None,
    max_len: int | None,
) -> torch.Tensor:
    """(1/B) sum_i sum_t L m: a sequence weighs in proportion to its length."""
    m = mask.to(loss.dtype)
    return _share((loss * m).sum(), loss.shape[0] if total_seqs is None else total_seqs)


@register_aggregation("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(
    loss: torch.Tensor,
    mask: torch.Tensor,
    *,
    total_tokens: float | None,
    total_seqs: float | None,
    max_len: int | None,
) -> torch.Tensor:
    """Dr. GRPO (Liu et al. 2025): (1/B) sum_i sum_t L m / max_len.

    The constant ``max_len`` (the generation budget) replaces GRPO's per-sequence length
    normalisation, which biases towards long wrong answers. It is required, not inferred
    from T: micro-batches padded to different T would otherwise be scaled differently.
    """
    if max_len is None or max_len <= 0:
        raise ValueError(f"seq-mean-token-sum-norm needs a positive max_len, got {max_len}")
    m = mask.to(loss.dtype)
    total = (loss * m).sum() / max_len
    return _share(total, loss.shape[0] if total_seqs is None else total_seqs)


def aggregate(
    loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    total_tokens: float | None = None,
    total_seqs: float | None = None,
    max_len: int | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar with the aggregation registered as ``mode``.

    Args:
        loss: [B, T] per-token loss.
        mask: [B, T] bool or float, 1 on tokens the loss sees. A row of zeros contributes 0.
        mode: token-mean | seq-mean-token-mean | seq-mean-token-sum | seq-mean-token-sum-norm.
        total_tokens: full-batch sum of the mask, when ``loss`` is one micro-batch of it.
        total_seqs: full-batch number of sequences, when ``loss`` is one micro-batch of it.
        max_len: the constant of seq-mean-token-sum-norm (max response length).
    Returns:
        [] the loss (or, with the normalisers given, this micro-batch's share of it).
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {mode!r}; accepted: {', '.join(AGGREGATIONS)}")
    if loss.shape != mask.shape or loss.dim() != 2:
        raise ValueError(
            f"loss and mask must both be [B, T], got {tuple(loss.shape)} and {tuple(mask.shape)}"
        )
    return AGGREGATIONS[mode](
        loss, mask, total_tokens=total_tokens, total_seqs=total_seqs, max_len=max_len
    )


POLICY_METRICS = (
    "clip_frac_low",
    "clip_frac_high",
    "dual_clip_frac",
    "ratio_mean",
    "ratio_min",
    "ratio_max",
    "approx_kl",
)


def policy_metrics(loss_info: dict[str, torch.Tensor], mask: torch.Tensor) -> dict[str, float]:
    """Masked summaries of :func:`clipped_policy_loss`'s ``loss_info``, for logging.

    Args:
        loss_info: the [B, T] tensors returned by :func:`clipped_policy_loss`.
        mask: [B, T] bool or float, 1 on tokens the loss sees.
    Returns:
        clip_frac_low, clip_frac_high, dual_clip_frac (fractions of masked tokens), ratio_mean,
        ratio_min, ratio_max (of rho), approx_kl (masked mean k3 estimate of
        KL(pi_old || pi)). Every value is NaN when the mask selects no token.
    """
    selected = mask > 0
    if not bool(selected.any()):
        return dict.fromkeys(POLICY_METRICS, float("nan"))
    ratio = loss_info["ratio"]
    values = {
        "clip_frac_low": masked_mean(loss_info["is_clipped_low"].float(), mask),
        "clip_frac_high": masked_mean(loss_info["is_clipped_high"].float(), mask),
        "dual_clip_frac": masked_mean(loss_info["is_dual_clipped"].float(), mask),
        "ratio_mean": masked_mean(ratio, mask),
        "ratio_min": ratio[selected].min(),
        "ratio_max": ratio[selected].max(),
        "approx_kl": masked_mean(loss_info["approx_kl"], mask),
    }
    return {name: value.item() for name, value in values.items()}
