"""Training-side log-probs: batch layout and equality with a plain per-sample forward."""

from __future__ import annotations

import torch

from rlvr.policy import completion_logprobs, make_batch


def test_make_batch_layout():
    batch = make_batch([[1, 2, 3], [4]], [[7, 8], [9, 9, 9]], pad_id=0)
    assert batch.input_ids.tolist() == [[1, 2, 3, 7, 8, 0], [0, 0, 4, 9, 9, 9]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert batch.position_ids[1].tolist() == [0, 0, 0, 1, 2, 3]
    assert batch.completion_ids.tolist() == [[7, 8, 0], [9, 9, 9]]
    assert batch.completion_mask.tolist() == [[1, 1, 0], [1, 1, 1]]


def test_select_trims_to_the_sub_batch():
    batch = make_batch([[1, 2, 3], [4], [5, 6]], [[7], [9, 9, 9], [8, 8]], pad_id=0)
    sub = batch.select(torch.tensor([0, 2]))
    assert sub.input_ids.tolist() == [[1, 2, 3, 7, 0], [0, 5, 6, 8, 8]]
    assert sub.completion_mask.tolist() == [[1, 0], [1, 1]]


def _plain_logprobs(model, prompt, completion, temperature):
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return logits.log_softmax(-1).gather(-1, torch.tensor(completion)[:, None])[:, 0]


def test_padded_logprobs_equal_unpadded_forward(tiny):
    model, _ = tiny
    prompts = [[3, 40, 41, 42, 43], [5, 6], [7, 8, 9]]
    completions = [[10, 11, 12], [13], [14, 15, 16, 17, 18]]
    batch = make_batch(prompts, completions, pad_id=0)
    with torch.no_grad():
        logp, entropy = completion_logprobs(model, batch, temperature=0.7, with_entropy=True)
        for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
            ref = _plain_logprobs(model, p, c, 0.7)
            assert torch.allclose(logp[i, : len(c)], ref, atol=1e-5)
            assert (logp[i, len(c) :] == 0).all()
    assert (entropy >= 0).all() and entropy.max() <= torch.log(torch.tensor(259.0)) + 1e-4


def test_logprob_gradients_flow(tiny):
    model, _ = tiny
    batch = make_batch([[1, 2]], [[3, 4]], pad_id=0)
    logp, _ = completion_logprobs(model, batch)
    logp.sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    model.zero_grad(set_to_none=True)
