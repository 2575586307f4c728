"""Next-token sampling: temperature, top-k, top-p (nucleus), min-p, greedy. Pure functions on logits."""

from __future__ import annotations

import math

import torch

from rlvr.rollout.base import AdaptiveTemperature, SamplingParams


def filter_logits(
    logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0
) -> torch.Tensor:
    """Set logits outside the top-k / nucleus (top-p) / min-p set to -inf.

    Args:
        logits: [B, V] temperature-scaled logits.
        top_k: keep the k largest (0 = all).
        top_p: keep the smallest set of tokens whose probability mass reaches ``top_p``
            (Holtzman et al. 2020); the most likely token is always kept.
        min_p: keep the tokens whose probability is at least ``min_p`` times the largest one
            (Nguyen et al. 2024, "Turning Up the Heat: Min-p Sampling for Creative and Coherent
            LLM Outputs"); 0 = all. Tested in log space: p_i >= min_p * p_max exactly when
            logit_i >= max logit + log(min_p). The ratio to the top token does not change when
            top-k/top-p renormalise, so the order of the filters does not matter.
    Returns:
        [B, V] filtered logits.
    """
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        mass_before = probs.cumsum(-1) - probs  # mass of strictly more likely tokens
        drop_sorted = mass_before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    if min_p > 0.0:
        threshold = logits.amax(-1, keepdim=True) + math.log(min_p)
        logits = logits.masked_fill(logits < threshold, float("-inf"))
    return logits


# Rows of [B, V] logits handled at a time: a few MB of fp32 intermediates that stay in the CPU's
# cache from one elementwise pass to the next, instead of B * V floats streamed through memory
# at every pass (measured 3-4x faster at B = 64, V = 49152 on a 2-core EPYC).
CHUNK_ELEMENTS = 1 << 19


def _row_chunks(logits: torch.Tensor) -> list[slice]:
    """Row slices of ``logits`` [B, V] of at most :data:`CHUNK_ELEMENTS` elements (one row at
    least)."""
    step = max(1, CHUNK_ELEMENTS // logits.shape[-1])
    return [slice(lo, lo + step) for lo in range(0, logits.shape[0], step)]


def _inverse_cdf_sample(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One draw per row of [B, V] probabilities by inverting the CDF at the uniforms ``u`` [B, 1].

    Exact like ``torch.multinomial`` but ~50x cheaper at V = 50k on CPU, where multinomial
    draws V exponentials per row. The CDF is accumulated in fp64. ``right=True`` returns the
    first index whose CDF exceeds u, so a zero-probability token (flat CDF) is never chosen.
    """
    cdf = probs.cumsum(-1, dtype=torch.float64)
    return torch.searchsorted(cdf, u * cdf[:, -1:], right=True)[:, 0].clamp(max=probs.shape[-1] - 1)


def sample_next(
    logits: torch.Tensor, params: SamplingParams, u: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row.

    Args:
        logits: [B, V] raw next-token logits (any float dtype; computed in fp32).
        u: [B, 1] float64 uniforms in [0, 1), one per row (each row's stream:
            :func:`rlvr.rollout.streams.uniforms`); unused (may be None) when greedy.
    Returns:
        tokens [B] long, and logprobs [B]: log-prob of each token under the temperature-scaled
        distribution before top-k/top-p/min-p truncation (the policy the trainer optimises);
        greedy decoding (temperature 0) reports log-probs at temperature 1. With
        ``params.adaptive`` each row is drawn at its own temperature
        (:func:`adaptive_temperatures`), its log-prob that distribution's. Rows are processed
        in cache-sized chunks.
    """
    b = logits.shape[0]
    tokens = torch.empty(b, dtype=torch.long, device=logits.device)
    logprobs = torch.empty(b, dtype=torch.float32, device=logits.device)
    greedy = params.temperature <= 0
    if not greedy:
        if u is None or u.shape != (b, 1):
            raise ValueError(f"sample_next needs uniforms of shape ({b}, 1) when sampling")
        u = u.to(logits.device)
    for rows in _row_chunks(logits):
        chunk = logits[rows].float()
        if greedy:
            tok = chunk.argmax(-1)
        else:
            temperature: float | torch.Tensor = params.temperature
            if params.adaptive is not None:  # HAPO: each row's own temperature [rows, 1]
                temperature = adaptive_temperatures(chunk, params.temperature, params.adaptive)
                temperature = temperature[:, None]
            chunk = chunk / temperature
            filtered = filter_logits(chunk, params.top_k, params.top_p, params.min_p)
            tok = _inverse_cdf_sample(filtered.softmax(-1), u[rows])
        tokens[rows] = tok
        logprobs[rows] = chunk.log_softmax(-1).gather(-1, tok[:, None])[:, 0]
    return tokens, logprobs


def adaptive_temperatures(
    logits: torch.Tensor, temperature: float, adaptive: AdaptiveTemperature
) -> torch.Tensor:
    """HAPO's per-token temperatures [B] of the next-token ``logits`` [B, V] (fp32):
    T (1 + tau h), h the clamped score of the distribution's log-entropy at temperature 1
    against the previous step's statistics (:class:`rlvr.rollout.base.AdaptiveTemperature`)."""
    logp = logits.log_softmax(-1)
    x = (-(logp.exp() * logp).sum(-1)).clamp_min(1e-8).log()
    h = x - adaptive.pivot
    score = torch.where(h > 0, h / max(adaptive.top, 1e-8), h / max(abs(adaptive.bottom), 1e-8))
    return temperature * (1.0 + adaptive.tau * score.clamp(-1.0, 1.0))


def entropy_statistics(
    entropies: list[list[float]], tau: float, pivot: float = 0.8
) -> AdaptiveTemperature | None:
    """The statistics of a step's completion tokens that the next step's adaptive temperatures
    score against: m, the ``pivot`` quantile (nearest rank, as the authors' code) of the tokens'
    log-entropies x = log max(H, 1e-8), and the largest and smallest x - m; None without
    tokens."""
    values = [h for row in entropies for h in row]
    if not values:
        return None
    x = torch.tensor(values, dtype=torch.float64).clamp_min(1e-8).log()
    # torch.quantile's "nearest" rank, without its 2^24-element limit
    m = x.sort().values[round(pivot * (len(values) - 1))]
    h = x - m
    top = float(h.max()) if bool((h > 0).any()) else 0.0
    bottom = float(h.min()) if bool((h < 0).any()) else 0.0
    return AdaptiveTemperature(tau, float(m), top, bottom)


def token_stats(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Confidence of the model's next-token distribution p = softmax(logits) (temperature 1).

    Returns [B] entropy H(p) = -sum_j p_j log p_j (RENT, Prabhudesai et al. 2025) and [B]
    self-certainty KL(U || p) = -log V - (1/V) sum_j log p_j (Intuitor, Zhao et al. 2025,
    "Learning to Reason without External Rewards"), both in nats.
    """
    entropy = torch.empty(logits.shape[0], device=logits.device)
    self_certainty = torch.empty_like(entropy)
    for rows in _row_chunks(logits):
        logp = logits[rows].float().log_softmax(-1)
        entropy[rows] = -(logp.exp() * logp).sum(-1)
        self_certainty[rows] = -math.log(logits.shape[-1]) - logp.mean(-1)
    return entropy, self_certainty
