"""Decode-friendly attention on CPU: for the transformers forward, and shared-prefix attention.

For one query token per sequence (decoding), PyTorch's CPU SDPA kernels cost ~10x more than
two batched matmuls at the shapes of small models (measured: 2.2 ms vs 0.21 ms per layer for
64 sequences, 9 query / 3 key-value heads, 100 keys). :func:`decode_attention` computes
grouped-query attention for ``q_len == 1`` with matmuls, query heads grouped onto their shared
key/value head (no repeat of K/V), softmax in fp32; longer queries (prefill, training) go to
the training forward's attention (:mod:`rlvr.train_attention`: transformers' SDPA, in fp32 on a
CPU under bf16 autocast), so a policy the engine shares trains as a loaded model does. Masks are
SDPA's boolean masks (True = attend).

Registered with transformers as the attention implementation ``"rlvr_decode"``.
:func:`shared_prefix_attention` is the lean decoder's (:mod:`rlvr.rollout.decoder`): queries of
the samples of a group against their prompt's keys stored once, plus their own keys.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from rlvr.train_attention import train_attention

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
    """softmax(q k^T * scaling + mask) v for query [B, H, Lq, D], key/value [B, KV, L, D]; the
    scores soft-capped where the model caps them (Gemma 2's ``softcap``, which SDPA cannot do).

    Returns the output as [B, Lq, H, D] (transformers' layout after attention).
    """
    b, h, lq, d = query.shape
    softcap = kwargs.get("softcap")
    if softcap is not None and dropout == 0:
        return capped_attention(query, key, value, attention_mask, scaling, softcap), None
    if lq != 1 or dropout > 0:  # the training forward's (a policy the engine shares)
        return train_attention(
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


def capped_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None,
    softcap: float,
) -> torch.Tensor:
    """Attention with soft-capped scores, ``cap * tanh(q k^T * scaling / cap)`` (Gemma 2, Gemma
    Team 2024), as transformers' eager Gemma 2 attention computes it: query [B, H, Lq, D],
    key/value [B, KV, L, D], a boolean or additive mask [B, 1, Lq, L]. Returns [B, Lq, H, D]."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query, key.transpose(-1, -2)) * scale
    scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is not None:
        mask = attention_mask[..., : key.shape[-2]]
        if mask.dtype == torch.bool:  # a finite floor: a padding query masked from every key
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)  # gives no NaN
        else:
            scores = scores + mask
    probs = scores.softmax(-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(probs, value).transpose(1, 2).contiguous()


AttentionInterface.register(NAME, decode_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)


def shared_prefix_attention(
    query: torch.Tensor,
    prefix_key: torch.Tensor,
    prefix_value: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor,
    grid_index: torch.Tensor,
    group: int,
    scaling: float,
    softcap: float | None = None,
) -> torch.Tensor:
    """Decode attention of B rows whose keys are their prompt's (shared) then their own.

    The keys/values of a prompt are stored once, not once per sample, and read once per step for
    all the rows of its group: the rows' queries are placed in a grid [P, KV, n, G, D] (prompt,
    key/value head, slot of the row among the prompt's n rows, query head) so that the prompt
    part is one batched matmul per prompt and key/value head with n * G query rows (Hydragen,
    Juravsky et al. 2024, "Hydragen: High-Throughput LLM Inference with Shared Prefixes"). One
    softmax runs over the concatenated prompt and own scores, in fp32, so the result is the
    attention over the whole sequence.

    Args:
        query: [B, KV, G, D] queries, head ``kv * G + g`` of a row at ``[:, kv, g]``.
        prefix_key, prefix_value: [P, KV, Lp, D] prompt keys/values.
        key, value: [B, KV, S, D] each row's generated keys/values.
        bias: [B, 1, 1, Lp + S] float32 additive mask (0 = attend, -inf = masked).
        grid_index: [B * KV] long, flat grid position ``(p * KV + kv) * n + slot`` of row
            ``b``'s head group ``kv`` at ``b * KV + kv``.
        group: n, the grid's slots per prompt.
        scaling: softmax scale.
        softcap: Gemma 2's cap of the scaled scores, ``cap * tanh(scores / cap)`` (None: none).
    Returns:
        [B, KV, G, D] attention outputs.
    """
    b, kv, g, d = query.shape
    prompts, _, prompt_len, _ = prefix_key.shape
    grid = query.new_zeros((prompts * kv * group, g * d))  # slots of finished rows stay 0
    grid.index_copy_(0, grid_index, query.reshape(b * kv, g * d))
    prefix_scores = torch.matmul(
        grid.view(prompts, kv, group * g, d), prefix_key.transpose(-1, -2)
    )  # [P, KV, n * G, Lp]
    prefix_scores = prefix_scores.view(-1, g * prompt_len).index_select(0, grid_index)
    own_scores = torch.matmul(query, key.transpose(-1, -2))  # [B, KV, G, S]
    scores = torch.cat((prefix_scores.view(b, kv, g, prompt_len), own_scores), dim=-1)
    if softcap is None:
        probs = torch.add(bias, scores, alpha=scaling).softmax(-1).to(value.dtype)  # fp32 softmax
    else:
        capped = torch.tanh(scores.float() * (scaling / softcap)) * softcap
        probs = (bias + capped).softmax(-1).to(value.dtype)
    grid_probs = probs.new_zeros((prompts * kv * group, g * prompt_len))
    grid_probs.index_copy_(0, grid_index, probs[..., :prompt_len].reshape(b * kv, g * prompt_len))
    prefix_out = torch.matmul(grid_probs.view(prompts, kv, group * g, prompt_len), prefix_value)
    prefix_out = prefix_out.view(-1, g * d).index_select(0, grid_index).view(b, kv, g, d)
    return prefix_out + torch.matmul(probs[..., prompt_len:], value)
