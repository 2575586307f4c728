"""Training-side log-probs: batch layout, equality with a plain per-sample forward, and the
shared-prefix (Prefix Grouper) forward's equality with the padded one, gradients included."""

from __future__ import annotations

import pytest
import torch

from rlvr.policy import completion_logprobs, make_batch


def test_make_batch_layout():
    batch = make_batch([[1, 2, 3], [4]], [[7, 8], [9, 9, 9], [5]], pad_id=0, prompt_index=[0, 1, 1])
    assert batch.prompt_ids.tolist() == [[1, 2, 3], [0, 0, 4]]
    assert batch.prompt_mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert batch.prompt_index.tolist() == [0, 1, 1]
    assert batch.completion_ids.tolist() == [[7, 8, 0], [9, 9, 9], [5, 0, 0]]
    assert batch.completion_mask.tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0]]
    assert batch.tokens == (3 + 2) + (1 + 3) + (1 + 1)


def test_make_batch_rejects_a_bad_prompt_index():
    with pytest.raises(ValueError, match="prompt_index"):
        make_batch([[1]], [[2], [3]], pad_id=0, prompt_index=[0, 1])


def test_select_keeps_only_used_prompts_trimmed():
    batch = make_batch([[1, 2, 3], [4], [5, 6]], [[7], [9, 9, 9], [8, 8]], pad_id=0)
    sub = batch.select(torch.tensor([1, 2]))
    assert sub.prompt_ids.tolist() == [[0, 4], [5, 6]]
    assert sub.prompt_index.tolist() == [0, 1]
    assert sub.completion_ids.tolist() == [[9, 9, 9], [8, 8, 0]]
    assert sub.completion_mask.tolist() == [[1, 1, 1], [1, 1, 0]]


def _plain_logprobs(model, prompt, completion, temperature):
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return logits.log_softmax(-1).gather(-1, torch.tensor(completion)[:, None])[:, 0]


PROMPTS = [[3, 40, 41, 42, 43], [5, 6], [7, 8, 9]]
COMPLETIONS = [[10, 11, 12], [13], [14, 15, 16, 17, 18], [19, 20], [21, 22, 23, 24]]
INDEX = [0, 0, 1, 2, 2]


@pytest.mark.parametrize("shared", [False, True])
def test_logprobs_equal_unpadded_forward(tiny, shared):
    model, _ = tiny
    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0, prompt_index=INDEX)
    with torch.no_grad():
        logp, entropy = completion_logprobs(model, batch, 0.7, True, shared_prefix=shared)
        for i, c in enumerate(COMPLETIONS):
            ref = _plain_logprobs(model, PROMPTS[INDEX[i]], c, 0.7)
            assert torch.allclose(logp[i, : len(c)], ref, atol=1e-5)
            assert (logp[i, len(c) :] == 0).all()
    assert (entropy >= 0).all() and entropy.max() <= torch.log(torch.tensor(259.0)) + 1e-4


def _grads(model, batch, shared):
    model.zero_grad(set_to_none=True)
    logp, _ = completion_logprobs(model, batch, 1.0, shared_prefix=shared)
    weights = torch.linspace(-1.0, 1.0, logp.numel()).reshape(logp.shape)
    (logp * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return logp.detach(), grads


def test_shared_prefix_gradients_equal_padded_forward(tiny):
    model, _ = tiny
    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0, prompt_index=INDEX)
    logp_a, grads_a = _grads(model, batch, shared=False)
    logp_b, grads_b = _grads(model, batch, shared=True)
    assert torch.allclose(logp_a, logp_b, atol=1e-5)
    assert grads_a.keys() == grads_b.keys() and grads_a
    for name in grads_a:
        assert (grads_a[name] - grads_b[name]).abs().max() <= 1e-5, name


def test_value_head_is_the_same_through_both_forwards(tiny):
    from rlvr.policy import ValueHead

    model, _ = tiny
    batch = make_batch(PROMPTS, COMPLETIONS, pad_id=0, prompt_index=INDEX)
    head = ValueHead(model.config.hidden_size)
    with torch.no_grad():
        head.linear.weight.normal_(generator=torch.Generator().manual_seed(0))
    out = {}
    for shared in (False, True):
        head.zero_grad(set_to_none=True)
        _, _, values = completion_logprobs(model, batch, shared_prefix=shared, value_head=head)
        values.sum().backward()
        out[shared] = (values.detach(), head.linear.weight.grad.clone())
    assert out[False][0].shape == batch.completion_mask.shape
    assert (out[False][0][batch.completion_mask == 0] == 0).all()
    assert torch.allclose(out[False][0], out[True][0], atol=1e-5)
    assert torch.allclose(out[False][1], out[True][1], atol=1e-4)
    model.zero_grad(set_to_none=True)


def test_pack_rows_first_fit_decreasing_per_prompt():
    from rlvr.policy import pack_rows

    # width = longest completion (5); prompt 0: 5 | 3+2 ; prompt 1: 4+1 | 4
    rows = pack_rows([0, 0, 0, 1, 1, 1], [3, 5, 2, 4, 4, 1])
    assert rows == [(0, [1]), (0, [0, 2]), (1, [3, 5]), (1, [4])]
    assert pack_rows([], []) == []


@pytest.mark.parametrize("forward", ["shared_prefix", "tree"])
def test_the_training_backward_repeats_bit_for_bit(forward):
    """The gathers that copy a row to many (a prompt's keys/values to each packed row, its last
    state to each completion's first token, a trie node to its tokens) sum their gradients in a
    fixed order: the backward of advanced indexing (index_put_ with accumulate) adds duplicates
    from several threads in a varying order on a CPU, and two runs of the same seed drifted
    apart from their first update (SmolLM2 on an Intel Xeon, 2026-11-29)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=512,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).train()
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 512, (40,), generator=g).tolist() for _ in range(2)]
    stem = torch.randint(1, 512, (6,), generator=g).tolist()  # shared by the tree's leaves
    lengths = torch.randint(1, 40, (16,), generator=g).tolist()
    completions = [stem + torch.randint(1, 512, (n,), generator=g).tolist() for n in lengths]
    batch = make_batch(prompts, completions, pad_id=0, prompt_index=[i // 8 for i in range(16)])
    grads = []
    for _ in range(8):
        logp, _ = completion_logprobs(
            model, batch, shared_prefix=forward == "shared_prefix", tree=forward == "tree"
        )
        (logp * torch.linspace(-1.0, 1.0, logp.numel()).reshape(logp.shape)).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        model.zero_grad(set_to_none=True)
    for name in grads[0]:
        assert all(torch.equal(grads[0][name], other[name]) for other in grads[1:]), name
