"""The training forward's attention: PyTorch's SDPA, computed in fp32 on a CPU under bf16.

On a CPU, PyTorch 2.13's SDPA backward (the flash-attention kernel for CPU) is several times
slower in bf16 than in fp32 at the shapes of small models' training rows. Measured on a 2-core
Intel Xeon with AMX (2026-11-29, ``bench/train_attention.py``), queries [16, 9, 42, 64] against
keys [16, 9, 105, 64] under a boolean mask (a micro-batch of the shared-prefix forward,
SmolLM2-135M): forward 2.0 ms in bf16, 2.3 ms in fp32; backward 18.2 ms in bf16, 5.3 ms in fp32.
Under bf16 autocast the attention backward was a quarter of the whole forward and backward; with
it in fp32 the micro-batch's forward and backward took 2.71 s instead of 3.57 s (fp32
throughout: 5.08 s). So where the inputs are bf16 or fp16 on a CPU and a gradient is being recorded, the
queries, keys and values enter SDPA as fp32 and the output returns in their dtype (a more
precise attention, the same function); everywhere else this is transformers' SDPA unchanged.

Registered with transformers as the attention implementation ``"rlvr_sdpa"``, which
:func:`rlvr.models.attention_implementation` gives the models rlvr loads.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "rlvr_sdpa"
_LOW = (torch.bfloat16, torch.float16)


def upcast(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether the training attention computes SDPA on these in fp32 instead: on a CPU, with
    gradients on, where SDPA would run in bf16/fp16 (an input is, or autocast is on: it casts
    SDPA's inputs; queries and keys may be fp32 after the rotary embedding)."""
    if query.device.type != "cpu" or not torch.is_grad_enabled():
        return False
    return torch.is_autocast_enabled("cpu") or any(t.dtype in _LOW for t in (query, key, value))


def train_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention for query [B, H, Lq, D] and key/value [B, KV, L, D], in fp32
    where it would run in half precision on a CPU with gradients on (see the module
    docstring). Returns the output [B, Lq, H, D] in the values' dtype, as SDPA does."""
    if not upcast(query, key, value):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    with torch.autocast("cpu", enabled=False):  # CPU autocast would cast SDPA's inputs back
        out, _ = sdpa_attention_forward(
            module, query.float(), key.float(), value.float(), attention_mask, **kwargs
        )
    return out.to(value.dtype), None


AttentionInterface.register(NAME, train_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
