"""The rollout engine: sampling filters, greedy parity with transformers, stop tokens, seeds."""

from __future__ import annotations

import math

import torch

from rlvr.models import encode_prompt
from rlvr.policy import completion_logprobs, make_batch
from rlvr.rollout import SamplingParams, TorchEngine, filter_logits, left_pad, sample_next

PROMPTS = ["What is 2 + 3?", "Hi", "Compute 17 * 3 and explain."]


def test_filter_top_k_keeps_the_k_largest():
    logits = torch.tensor([[1.0, 4.0, 3.0, 2.0]])
    out = filter_logits(logits, top_k=2)
    assert torch.isinf(out[0, [0, 3]]).all() and out[0, 1] == 4.0 and out[0, 2] == 3.0


def test_filter_top_p_keeps_the_nucleus():
    # probs 0.5, 0.3, 0.2: top_p=0.6 keeps 0.5 (mass before 0) and 0.3 (mass before 0.5 < 0.6)
    logits = torch.tensor([[0.5, 0.3, 0.2]]).log()
    out = filter_logits(logits, top_p=0.6)
    assert torch.isfinite(out[0, :2]).all() and torch.isinf(out[0, 2])
    # top_p smaller than the largest prob keeps only the argmax
    assert torch.isfinite(filter_logits(logits, top_p=0.1)).sum() == 1


def test_sample_next_greedy_and_temperature_logprob():
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    tok, logp = sample_next(logits, SamplingParams(temperature=0.0))
    assert tok.item() == 1
    assert math.isclose(logp.item(), torch.log_softmax(logits, -1)[0, 1].item(), rel_tol=1e-6)
    g = torch.Generator().manual_seed(0)
    tok, logp = sample_next(logits, SamplingParams(temperature=0.5), g)
    expected = torch.log_softmax(logits / 0.5, -1)[0, tok.item()].item()
    assert math.isclose(logp.item(), expected, rel_tol=1e-6)


def test_sampling_frequencies_follow_the_distribution():
    probs = torch.tensor([0.6, 0.3, 0.1])
    logits = probs.log().repeat(20000, 1)
    g = torch.Generator().manual_seed(1)
    tok, _ = sample_next(logits, SamplingParams(temperature=1.0), g)
    freq = torch.bincount(tok, minlength=3).float() / len(tok)
    assert torch.allclose(freq, probs, atol=0.015)


def test_left_pad():
    ids, mask = left_pad([[5, 6], [7]], pad_id=0)
    assert ids.tolist() == [[5, 6], [0, 7]] and mask.tolist() == [[1, 1], [0, 1]]


def _prompts(tok):
    return [encode_prompt(tok, p) for p in PROMPTS]


def test_greedy_matches_transformers_generate(tiny):
    model, tok = tiny
    prompts = _prompts(tok)
    engine = TorchEngine(model, tok.pad_token_id, dtype=torch.float32)
    rollout = engine.generate(prompts, 1, SamplingParams(temperature=0.0, max_new_tokens=12))
    for prompt, completion in zip(prompts, rollout.completion_ids, strict=True):
        ref = model.generate(
            torch.tensor([prompt]),
            max_new_tokens=12,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
        )
        assert completion == ref[0, len(prompt) :].tolist()


def test_group_shares_prompt_and_logprobs_match_training_forward(tiny):
    model, tok = tiny
    prompts = _prompts(tok)
    engine = TorchEngine(model, tok.pad_token_id, dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    params = SamplingParams(temperature=0.8, max_new_tokens=10)
    rollout = engine.generate(prompts, 4, params, g)
    assert len(rollout.completion_ids) == 12
    assert rollout.group_ids.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    batch = make_batch(
        [prompts[i // 4] for i in range(12)], rollout.completion_ids, tok.pad_token_id
    )
    with torch.no_grad():
        logp, _ = completion_logprobs(model, batch, temperature=0.8)
    for i, lps in enumerate(rollout.logprobs):
        assert torch.allclose(logp[i, : len(lps)], torch.tensor(lps), atol=1e-4)


def test_stop_tokens_end_samples_and_compaction_keeps_others_exact(tiny):
    model, tok = tiny
    prompts = _prompts(tok)
    engine = TorchEngine(model, tok.pad_token_id, dtype=torch.float32)
    free = engine.generate(prompts, 1, SamplingParams(temperature=0.0, max_new_tokens=8))
    stop = free.completion_ids[0][2]  # the third greedy token of prompt 0
    stopped = engine.generate(
        prompts, 1, SamplingParams(temperature=0.0, max_new_tokens=8, stop_token_ids=(stop,))
    )
    first = free.completion_ids[0].index(stop)
    assert stopped.completion_ids[0] == free.completion_ids[0][: first + 1]
    assert stopped.finished[0]
    for i in (1, 2):  # samples that did not stop are unchanged by the others leaving the batch
        c = free.completion_ids[i]
        expected = c[: c.index(stop) + 1] if stop in c else c
        assert stopped.completion_ids[i] == expected


def test_same_seed_same_samples_and_chunking_is_invisible(tiny):
    model, tok = tiny
    prompts = _prompts(tok)
    params = SamplingParams(temperature=1.0, max_new_tokens=6)
    a = TorchEngine(model, tok.pad_token_id).generate(
        prompts, 2, params, torch.Generator().manual_seed(3)
    )
    b = TorchEngine(model, tok.pad_token_id).generate(
        prompts, 2, params, torch.Generator().manual_seed(3)
    )
    assert a.completion_ids == b.completion_ids
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    whole = TorchEngine(model, tok.pad_token_id).generate(prompts, 2, greedy)
    chunked = TorchEngine(model, tok.pad_token_id, max_batch=2).generate(prompts, 2, greedy)
    assert whole.completion_ids == chunked.completion_ids
    # a group larger than max_batch is split into micro sampling groups
    big = TorchEngine(model, tok.pad_token_id).generate(prompts, 4, greedy)
    split = TorchEngine(model, tok.pad_token_id, max_batch=3).generate(prompts, 4, greedy)
    assert big.completion_ids == split.completion_ids and len(split.completion_ids) == 12


def test_bf16_engine_copies_weights_in_memory(tiny):
    model, tok = tiny
    engine = TorchEngine(model, tok.pad_token_id, dtype=torch.bfloat16)
    assert engine.model is not model
    name, param = next(iter(model.named_parameters()))
    with torch.no_grad():
        original = param.clone()
        param.add_(1.0)
        engine.update_weights(model)
        copied = dict(engine.model.named_parameters())[name]
        assert torch.allclose(copied.float(), param, atol=0.05)
        param.copy_(original)
