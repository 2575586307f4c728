"""A decode-friendly attention for transformers models on CPU.

For one query token per sequence (decoding), PyTorch's CPU SDPA kernels cost ~10x more than
two batched matmuls at the shapes of small models (measured: 2.2 ms vs 0.21 ms per layer for
64 sequences, 9 query / 3 key-value heads, 100 keys). :func:`decode_attention` computes
grouped-query attention for ``q_len == 1`` with matmuls, query heads grouped onto their shared
key/value head (no repeat of K/V), softmax in fp32; longer queries (prefill, training) go to
transformers' SDPA path unchanged. Masks are SDPA's boolean masks (True = attend).

Registered with transformers as the attention implementation ``"rlvr_decode"``.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "rlvr_decode"


def decode_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """softmax(q k^T * scaling + mask) v for query [B, H, Lq, D], key/value [B, KV, L, D].

    Returns the output as [B, Lq, H, D] (transformers' layout after attention).
    """
    b, h, lq, d = query.shape
    if lq != 1 or dropout > 0:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    kv = key.shape[1]
    scale = scaling if scaling is not None else d**-0.5
    q = query.view(b, kv, h // kv, d)  # head i uses key/value head i // (h // kv)
    scores = torch.matmul(q, key.transpose(-1, -2)).float() * scale  # [B, KV, H/KV, L]
    if attention_mask is not None:
        mask = attention_mask[:, :, -1:, :]  # [B, 1, 1, L] for the single query
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.float()
    probs = scores.softmax(-1).to(value.dtype)
    out = torch.matmul(probs, value)  # [B, KV, H/KV, D]
    return out.reshape(b, 1, h, d), None


AttentionInterface.register(NAME, decode_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
