"""The training forward's attention (rlvr.train_attention): SDPA in fp32 on a CPU where it would
run in bf16 with gradients on (the CPU's bf16 SDPA backward is slow), SDPA unchanged elsewhere."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from rlvr import train_attention
from rlvr.models import load_model
from rlvr.rollout import TorchEngine


def _qkv(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 5, 8, generator=g)  # [B, H, Lq, D]
    k, v = torch.randn(2, 2, 7, 8, generator=g), torch.randn(2, 2, 7, 8, generator=g)
    return tuple(t.to(dtype).requires_grad_() for t in (q, k, v))


def test_upcast_where_sdpa_would_run_in_half_precision_with_gradients():
    q32, k32, v32 = _qkv(torch.float32)
    q16, k16, v16 = _qkv(torch.bfloat16)
    assert not train_attention.upcast(q32, k32, v32)  # fp32 already
    assert train_attention.upcast(q16, k16, v16)
    assert train_attention.upcast(q32, k32, v16)  # fp32 queries after the rotary embedding
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert train_attention.upcast(q32, k32, v32)  # autocast would cast them
    with torch.no_grad():  # sampling and no-grad passes: SDPA as it is
        assert not train_attention.upcast(q16, k16, v16)


class _Module(torch.nn.Module):
    num_key_value_groups = 2
    is_causal = True


def test_under_autocast_it_is_fp32_sdpa_returned_in_bf16():
    mask = torch.ones(2, 1, 5, 7, dtype=torch.bool).tril(diagonal=2)
    q, k, v = _qkv(torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        v16 = v.to(torch.bfloat16)  # a projection's output under autocast
        out, weights = train_attention.train_attention(_Module(), q, k, v16, mask, scaling=0.3)
    assert weights is None and out.dtype == torch.bfloat16 and out.shape == (2, 5, 4, 8)
    want, _ = sdpa_attention_forward(_Module(), q, k, v16.float(), mask, scaling=0.3)
    assert torch.equal(out, want.to(torch.bfloat16))  # computed in fp32, rounded once
    out.float().square().sum().backward()
    assert q.grad is not None and q.grad.dtype == torch.float32 and k.grad is not None
    # no gradient: transformers' SDPA (under autocast: in bf16)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = train_attention.train_attention(_Module(), q, k, v16, mask, scaling=0.3)
        plain, _ = sdpa_attention_forward(_Module(), q, k, v16, mask, scaling=0.3)
    assert torch.equal(got, plain)


def test_models_load_with_it_and_fp32_training_is_plain_sdpa():
    model = load_model("tiny-random-llama", torch.float32)
    assert model.config._attn_implementation == train_attention.NAME
    ids = torch.randint(3, 200, (2, 9), generator=torch.Generator().manual_seed(1))
    got = model(ids).logits
    model.set_attn_implementation("sdpa")
    want = model(ids).logits
    assert torch.equal(got, want)


def test_bf16_autocast_training_runs_every_attention_in_fp32(monkeypatch):
    """A tiny Llama's training step under bf16 autocast: each layer's SDPA gets fp32 inputs with
    autocast off; its no-grad forward keeps SDPA in bf16."""
    model = load_model("tiny-random-llama", torch.float32)
    ids = torch.randint(3, 200, (2, 9), generator=torch.Generator().manual_seed(2))
    calls = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, *args, **kwargs):
        calls.append((q.dtype, k.dtype, v.dtype, torch.is_autocast_enabled("cpu")))
        return real(q, k, v, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(ids).logits.float().logsumexp(-1).mean()
    loss.backward()
    layers = model.config.num_hidden_layers
    assert calls == [(torch.float32,) * 3 + (False,)] * layers
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    calls.clear()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        model(ids)
    assert len(calls) == layers and all(c[3] for c in calls)  # autocast casts them to bf16
    # an fp32 engine shares the policy and gives it its decode attention: training is the same
    engine = TorchEngine(model, 0, dtype=torch.float32)
    assert engine.model is model and model.config._attn_implementation == "rlvr_decode"
    calls.clear()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(ids).logits.float().sum().backward()
    assert calls == [(torch.float32,) * 3 + (False,)] * layers
