"""Next-token sampling: temperature, top-k, top-p (nucleus), greedy. Pure functions on logits."""

from __future__ import annotations

import math

import torch

from rlvr.rollout.base import SamplingParams


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Set logits outside the top-k / nucleus (top-p) set to -inf.

    Args:
        logits: [B, V] temperature-scaled logits.
        top_k: keep the k largest (0 = all).
        top_p: keep the smallest set of tokens whose probability mass reaches ``top_p``
            (Holtzman et al. 2020); the most likely token is always kept.
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
    return logits


def _inverse_cdf_sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row of [B, V] probabilities by inverting the CDF with one uniform per row.

    Exact like ``torch.multinomial`` but ~50x cheaper at V = 50k on CPU, where multinomial
    draws V exponentials per row. ``right=True`` returns the first index whose CDF exceeds u,
    so a zero-probability token (flat CDF) is never chosen.
    """
    cdf = probs.double().cumsum(-1)
    u = torch.rand((probs.shape[0], 1), generator=generator, dtype=torch.float64) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True)[:, 0].clamp(max=probs.shape[-1] - 1)


def sample_next(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row.

    Args:
        logits: [B, V] raw next-token logits (any float dtype; computed in fp32).
    Returns:
        tokens [B] long, and logprobs [B]: log-prob of each token under the temperature-scaled
        distribution before top-k/top-p truncation (the policy the trainer optimises); greedy
        decoding (temperature 0) reports log-probs at temperature 1.
    """
    logits = logits.float()
    if params.temperature <= 0:
        tokens = logits.argmax(-1)
        return tokens, logits.log_softmax(-1).gather(-1, tokens[:, None])[:, 0]
    scaled = logits / params.temperature
    filtered = filter_logits(scaled, params.top_k, params.top_p)
    tokens = _inverse_cdf_sample(filtered.softmax(-1), generator)
    return tokens, scaled.log_softmax(-1).gather(-1, tokens[:, None])[:, 0]


def token_stats(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Confidence of the model's next-token distribution p = softmax(logits) (temperature 1).

    Returns [B] entropy H(p) = -sum_j p_j log p_j (RENT, Prabhudesai et al. 2025) and [B]
    self-certainty KL(U || p) = -log V - (1/V) sum_j log p_j (Intuitor, Zhao et al. 2025,
    "Learning to Reason without External Rewards"), both in nats.
    """
    logp = logits.float().log_softmax(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    self_certainty = -math.log(logits.shape[-1]) - logp.mean(-1)
    return entropy, self_certainty
