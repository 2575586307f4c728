"""Chunked output layer (``completion_logprobs(chunk_tokens=...)``) and gradient checkpointing:
the same log-probs, entropies, values and gradients as the plain forward (fp32, 1e-6), through
the padded and the shared-prefix forwards."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.policy import ValueHead, completion_logprobs, enable_gradient_checkpointing, make_batch

PROMPTS = [[3, 40, 41, 42, 43], [5, 6], [7, 8, 9]]
COMPLETIONS = [[10, 11, 12], [13], [14, 15, 16, 17, 18], [19, 20], [21, 22, 23, 24]]
INDEX = [0, 0, 1, 2, 2]  # K = 15 completion tokens
TOL = 1e-6  # relative to the largest magnitude of the tensor compared: fp32 rounding level


def _value_head(model) -> ValueHead:
    head = ValueHead(model.config.hidden_size)
    with torch.no_grad():
        head.linear.weight.normal_(generator=torch.Generator().manual_seed(0))
    return head


def _run(model, batch, shared, chunk, entropy_grad=False, head=None):
    """Outputs and gradients (model and value head) of a weighted sum of every output."""
    params = dict(model.named_parameters())
    if head is not None:
        params.update({f"head.{n}": p for n, p in head.named_parameters()})
    for p in params.values():
        p.grad = None
    outs = completion_logprobs(
        model,
        batch,
        0.7,
        True,
        shared_prefix=shared,
        entropy_grad=entropy_grad,
        value_head=head,
        chunk_tokens=chunk,
    )
    loss = sum(
        (o * torch.linspace(-1.0, 1.0 + i, o.numel()).reshape(o.shape)).sum()
        for i, o in enumerate(outs)
    )
    loss.backward()
    grads = {n: p.grad.clone() for n, p in params.items() if p.grad is not None}
    for p in params.values():
        p.grad = None
    return [o.detach() for o in outs], grads


def _close(x: torch.Tensor, y: torch.Tensor) -> bool:
    """max |x - y| <= TOL * max(1, max |x|): the two sum the same terms in another order."""
    return bool((x - y).abs().max() <= TOL * max(1.0, float(x.abs().max())))


def _assert_same(a, b):
    (outs_a, grads_a), (outs_b, grads_b) = a, b
    for x, y in zip(outs_a, outs_b, strict=True):
        assert _close(x, y)
    assert grads_a.keys() == grads_b.keys() and grads_a
    for name in grads_a:
        assert _close(grads_a[name], grads_b[name]), name


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("entropy_grad", [False, True])
@pytest.mark.parametrize("chunk", [7, 1, 64])  # 7 does not divide K = 15; 64 > K
def test_chunked_equals_all_at_once(tiny, shared, entropy_grad, chunk):
    model, _ = tiny
    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0, prompt_index=INDEX)
    head = _value_head(model)
    full = _run(model, batch, shared, 0, entropy_grad, head)
    _assert_same(full, _run(model, batch, shared, chunk, entropy_grad, head))
    assert "lm_head.weight" in full[1] or "model.embed_tokens.weight" in full[1]


@pytest.mark.parametrize("shared", [False, True])
def test_one_completion_token(tiny, shared):
    model, _ = tiny
    batch = make_batch([[5, 6, 7]], [[9]], pad_id=0)
    _assert_same(_run(model, batch, shared, 0), _run(model, batch, shared, 1))


def test_output_layer_sees_at_most_a_chunk(tiny):
    model, _ = tiny
    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0, prompt_index=INDEX)
    rows = []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda _m, args, _out: rows.append(args[0].shape[0])
    )
    try:
        _run(model, batch, True, 4)  # 15 tokens: 4 + 4 + 4 + 3, each recomputed in backward
        assert rows[:4] == [4, 4, 4, 3] and sorted(rows[4:]) == [3, 4, 4, 4]  # then backward
        rows.clear()
        with torch.no_grad():
            ref = completion_logprobs(model, batch, 0.7, True)
            chunked = completion_logprobs(model, batch, 0.7, True, chunk_tokens=4)
        assert rows[-4:] == [4, 4, 4, 3]
    finally:
        hook.remove()
    for x, y in zip(ref, chunked, strict=True):
        assert _close(x, y)


def test_chunking_rejects_transformed_logits(tiny):
    model = copy.deepcopy(tiny[0])
    model.config.final_logit_softcapping = 30.0
    batch = make_batch([[5, 6]], [[9, 10]], pad_id=0)
    with pytest.raises(ValueError, match="final_logit_softcapping=30.0"):
        completion_logprobs(model, batch, chunk_tokens=4)
    completion_logprobs(model, batch)  # the plain path applies it and runs


def test_chunking_rejects_a_model_with_more_than_base_and_output_layer(tiny):
    model = copy.deepcopy(tiny[0])
    model.logit_bias = torch.nn.Linear(1, 1)
    with pytest.raises(ValueError, match="logit_bias"):
        completion_logprobs(model, make_batch([[5, 6]], [[9, 10]], pad_id=0), chunk_tokens=4)


def test_chunking_rejects_a_negative_size(tiny):
    batch = make_batch([[5, 6]], [[9, 10]], pad_id=0)
    with pytest.raises(ValueError, match="chunk_tokens must be >= 0"):
        completion_logprobs(tiny[0], batch, chunk_tokens=-1)


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("chunk", [0, 7])
def test_gradient_checkpointing_gives_the_same_gradients(tiny, shared, chunk):
    plain = copy.deepcopy(tiny[0]).train()
    ckpt = copy.deepcopy(tiny[0]).train()
    enable_gradient_checkpointing(ckpt)
    calls = {"plain": 0, "ckpt": 0}
    for name, m in (("plain", plain), ("ckpt", ckpt)):  # the first sub-module of a decoder
        m.model.layers[0].self_attn.register_forward_pre_hook(  # layer runs in its recompute
            lambda *_, key=name: calls.__setitem__(key, calls[key] + 1)
        )
    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0, prompt_index=INDEX)
    head = _value_head(plain)
    _assert_same(
        _run(plain, batch, shared, chunk, True, head), _run(ckpt, batch, shared, chunk, True, head)
    )
    passes = 2 if shared else 1  # the prompt pass and the packed rows
    assert calls == {"plain": passes, "ckpt": 2 * passes}


def test_batch_to_moves_every_tensor():
    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0, prompt_index=INDEX)
    moved = batch.to("meta")
    for name in ("prompt_ids", "prompt_mask", "prompt_index", "completion_ids", "completion_mask"):
        assert getattr(moved, name).device.type == "meta"
        assert getattr(moved, name).shape == getattr(batch, name).shape
    assert batch.prompt_ids.device.type == "cpu"
