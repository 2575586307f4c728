"""The rollout engine: sampling filters, greedy parity with transformers, the lean decoder's
equality with the transformers forward, stop tokens and stop strings, seeds."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from rlvr.models import encode_prompt, load_model, load_tokenizer, stop_token_ids
from rlvr.policy import completion_logprobs, make_batch
from rlvr.rollout import (
    SamplingParams,
    TorchEngine,
    attention,
    filter_logits,
    left_pad,
    sample_next,
    sampling,
)
from rlvr.rollout.decoder import HFDecoder, LlamaDecoder, make_decoder
from rlvr.rollout.linear import PackedLinear
from rlvr.rollout.streams import group_keys, random_keys, stream_key, uniforms
from rlvr.rollout.torch_engine import fill_holes
from rlvr.trainer.learner.kinds import Averages
from rlvr.trainer.learner.schedule import optimizer_step

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


def test_filter_min_p_keeps_tokens_above_a_fraction_of_the_top_probability():
    # probs 0.5, 0.3, 0.15, 0.05; min_p = 0.25 -> threshold 0.25 * 0.5 = 0.125: 0.05 is dropped
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.3, 0.5]]).log()
    out = filter_logits(logits, min_p=0.25)
    assert torch.isfinite(out[0, :3]).all() and torch.isinf(out[0, 3])
    assert torch.isinf(out[1, 0]) and torch.isfinite(out[1, 1:]).all()
    # min_p = 0.7 -> threshold 0.35: only the top token survives; 0 keeps everything
    assert torch.isfinite(filter_logits(logits, min_p=0.7)).sum(-1).tolist() == [1, 1]
    assert torch.equal(filter_logits(logits, min_p=0.0), logits)
    # the threshold is relative to the top token, so a flatter distribution keeps more tokens
    flat = torch.tensor([[0.3, 0.28, 0.22, 0.2]]).log()
    assert torch.isfinite(filter_logits(flat, min_p=0.25)).all()


def test_min_p_sampling_draws_only_kept_tokens_with_untruncated_logprobs():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().repeat(4000, 1)
    tok, logp = sample_next(logits, SamplingParams(temperature=1.0, min_p=0.25), _u(logits, 0))
    freq = torch.bincount(tok, minlength=4).float() / len(tok)
    assert freq[3] == 0
    assert torch.allclose(freq[:3], probs[:3] / probs[:3].sum(), atol=0.03)
    assert torch.allclose(logp, probs.log()[tok], atol=1e-6)  # before truncation


def test_sampling_params_reject_bad_values():
    for bad in ({"min_p": 1.5}, {"top_p": 0.0}, {"temperature": -1.0}, {"stop": ("",)}):
        with pytest.raises(ValueError, match=f"SamplingParams.{next(iter(bad))}"):
            SamplingParams(**bad)
    assert SamplingParams(stop=["\n\n"]).stop == ("\n\n",)  # lists from configs become tuples
    assert SamplingParams(stop="Answer:").stop == ("Answer:",)  # one string is one stop string


def test_chunked_sampling_equals_one_row_at_a_time(monkeypatch):
    logits = torch.randn(7, 50)
    params = SamplingParams(temperature=0.9, top_p=0.9)
    whole = sample_next(logits, params, _u(logits, 2))
    monkeypatch.setattr(sampling, "CHUNK_ELEMENTS", 50)  # one row per chunk
    rows = sample_next(logits, params, _u(logits, 2))
    assert torch.equal(whole[0], rows[0]) and torch.equal(whole[1], rows[1])


def test_sample_next_greedy_and_temperature_logprob():
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    tok, logp = sample_next(logits, SamplingParams(temperature=0.0))
    assert tok.item() == 1
    assert math.isclose(logp.item(), torch.log_softmax(logits, -1)[0, 1].item(), rel_tol=1e-6)
    tok, logp = sample_next(logits, SamplingParams(temperature=0.5), _u(logits, 0))
    expected = torch.log_softmax(logits / 0.5, -1)[0, tok.item()].item()
    assert math.isclose(logp.item(), expected, rel_tol=1e-6)


def test_sampling_frequencies_follow_the_distribution():
    probs = torch.tensor([0.6, 0.3, 0.1])
    logits = probs.log().repeat(20000, 1)
    tok, _ = sample_next(logits, SamplingParams(temperature=1.0), _u(logits, 1))
    freq = torch.bincount(tok, minlength=3).float() / len(tok)
    assert torch.allclose(freq, probs, atol=0.015)


def _u(logits: torch.Tensor, seed: int) -> torch.Tensor:
    """One uniform per row of ``logits``, from the stream ``seed``."""
    return uniforms(random_keys(logits.shape[0], torch.Generator().manual_seed(seed)), 0)


def _keys(seed: int, prompts: int, n: int) -> torch.Tensor:
    return group_keys(stream_key(seed), prompts, n)


def test_left_pad():
    ids, mask = left_pad([[5, 6], [7]], pad_id=0)
    assert ids.tolist() == [[5, 6], [0, 7]] and mask.tolist() == [[1, 1], [0, 1]]


def _prompts(tok):
    return [encode_prompt(tok, p) for p in PROMPTS]


@pytest.fixture(params=["lean", "transformers"])
def decoder(request, monkeypatch):
    """Run an engine test with the lean decoder and with the transformers-forward fallback."""
    if request.param == "transformers":
        monkeypatch.setattr(LlamaDecoder, "supports", staticmethod(lambda model: False))
    return LlamaDecoder if request.param == "lean" else HFDecoder


def test_packed_linear_matches_f_linear_and_repacks_changed_weights():
    g = torch.Generator().manual_seed(0)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 1e-2)):
        linear = PackedLinear(dtype, torch.device("cpu"))
        w, b, x = (
            torch.randn(shape, generator=g).to(dtype) for shape in ((40, 24), (40,), (5, 24))
        )
        (packed,) = linear.pack([w])
        torch.testing.assert_close(linear(x, packed, b), F.linear(x, w, b), atol=tol, rtol=tol)
        assert linear.pack([w])[0] is packed  # unchanged: not repacked
        w.mul_(-2.0)  # an in-place update (an optimiser step, update_weights) is seen
        (packed,) = linear.pack([w])
        torch.testing.assert_close(linear(x, packed, b), F.linear(x, w, b), atol=tol, rtol=tol)


def test_a_fused_adamw_step_is_seen_by_the_packed_weights():
    """PyTorch's fused AdamW kernel updates parameters in place without advancing their version
    counters; the learner's optimizer step advances them, so weights packed from those
    parameters (an engine sharing the policy's weights) are packed again."""
    linear = PackedLinear(torch.float32, torch.device("cpu"))
    w = torch.nn.Parameter(torch.randn(40, 24))
    x = torch.randn(5, 24)
    optimizer = torch.optim.AdamW([w], lr=0.1, fused=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    with torch.no_grad():
        (packed,) = linear.pack([w])
        before = linear(x, packed)
        w.grad = torch.randn_like(w)
        optimizer_step(optimizer, schedule, 0.0, Averages())
        (repacked,) = linear.pack([w])
        torch.testing.assert_close(linear(x, repacked), F.linear(x, w))
        assert not torch.allclose(before, linear(x, repacked))


def test_fill_holes_moves_the_last_live_rows_into_finished_places():
    assert fill_holes([True, False, False, True, False]) == [4, 1, 2]
    assert fill_holes([False, False, True]) == [0, 1]
    assert fill_holes([True, True]) == []


@pytest.mark.parametrize(
    ("name", "dtype", "atol"),
    [
        ("tiny-random-llama", torch.float32, 1e-5),
        ("tiny-random-qwen2", torch.float32, 1e-5),
        ("tiny-random-qwen3", torch.float32, 1e-5),
        ("tiny-random-mistral", torch.float32, 1e-5),
        ("tiny-random-gemma2", torch.float32, 1e-5),
        ("tiny-random-gemma3", torch.float32, 1e-5),
        ("tiny-random-llama", torch.bfloat16, 0.05),
        ("tiny-random-qwen3", torch.bfloat16, 0.05),
        ("tiny-random-gemma2", torch.bfloat16, 0.05),
    ],
)
def test_lean_decoder_matches_the_transformers_forward(name, dtype, atol):
    """Same logits as the transformers forward with its DynamicCache, through prompts of unequal
    lengths (left padding), groups of unequal sizes, compaction in a new row order and growth
    of the generated-token cache past one block; for Gemma, sequences longer than the sliding
    window (4 tokens) and soft-capped scores and logits."""
    model = load_model(name, dtype)
    model.set_attn_implementation(attention.NAME)
    assert LlamaDecoder.supports(model) and isinstance(make_decoder(model), LlamaDecoder)
    lean, reference = LlamaDecoder(model, block=4), HFDecoder(model)
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16]]
    ids, mask = left_pad(prompts, pad_id=0)
    row_prompt = torch.tensor([0, 0, 0, 1, 2, 2])
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        got, want = lean.prefill(ids, mask, row_prompt), reference.prefill(ids, mask, row_prompt)
        for step in range(10):
            torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=0)
            tokens = torch.randint(0, model.config.vocab_size, (got.shape[0],), generator=g)
            if step == 3:  # rows 1 and 4 finish: the last row moves into the first hole
                order = torch.tensor(fill_holes([False, True, False, False, True, False]))
                lean.select(order)
                reference.select(order)
                tokens = tokens[order]
            got, want = lean.step(tokens), reference.step(tokens)
        torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=0)


@pytest.mark.parametrize(
    "name", ["tiny-random-gemma2", "tiny-random-gemma3", "tiny-random-mistral"]
)
def test_windows_and_caps_change_what_the_lean_decoder_computes(name, monkeypatch):
    """The sliding windows and soft caps change these tiny models' logits (so the test above
    checks them): without the window, or without the caps, the lean decoder's logits move away
    from the transformers forward's."""
    from rlvr.rollout import decoder

    model = load_model(name, torch.float32)
    if name == "tiny-random-mistral":  # full attention in the alias: a window of 4 here
        model.config.sliding_window = 4
    model.set_attn_implementation(attention.NAME)
    ids, mask = left_pad([[5, 6, 7, 8, 9, 10, 11, 12], [13, 14]], pad_id=0)
    row_prompt, tokens = torch.tensor([0, 1]), torch.tensor([20, 21])

    def logits(dec) -> torch.Tensor:
        with torch.inference_mode():
            dec.prefill(ids, mask, row_prompt)
            return dec.step(tokens)

    want = logits(HFDecoder(model))
    torch.testing.assert_close(logits(LlamaDecoder(model)), want, atol=1e-5, rtol=0)
    if name == "tiny-random-gemma2":
        uncapped = LlamaDecoder(model)
        uncapped.softcap = uncapped.final_softcap = None
        assert (logits(uncapped) - want).abs().max() > 1e-3
    monkeypatch.setattr(decoder, "_window", lambda model, attention: None)
    assert (logits(LlamaDecoder(model)) - want).abs().max() > 1e-3


@pytest.mark.parametrize("name", ["tiny-random-gemma2", "tiny-random-gemma3"])
def test_gemma_samples_carry_the_training_forwards_logprobs(name):
    """The engine's sampled log-probs of a Gemma model equal the training forward's (which
    caps Gemma 2's attention scores: transformers' eager attention, SDPA would drop the cap)."""
    from rlvr.models import load_tokenizer

    model, tok = load_model(name, torch.float32), load_tokenizer(name)
    assert model.config._attn_implementation == (
        "eager" if name == "tiny-random-gemma2" else "rlvr_sdpa"
    )
    prompts = _prompts(tok)
    engine = TorchEngine(model, tok.pad_token_id, dtype=torch.float32)
    assert isinstance(engine.decoder, LlamaDecoder)
    params = SamplingParams(temperature=0.8, max_new_tokens=10)
    rollout = engine.generate(prompts, 2, params, _keys(0, len(prompts), 2))
    batch = make_batch(
        [prompts[i // 2] for i in range(len(rollout.completion_ids))],
        rollout.completion_ids,
        tok.pad_token_id,
    )
    fresh = load_model(name, torch.float32)  # the training forward's own attention
    with torch.no_grad():
        logp, _ = completion_logprobs(fresh, batch, temperature=0.8)
    for i, lps in enumerate(rollout.logprobs):
        assert torch.allclose(logp[i, : len(lps)], torch.tensor(lps), atol=1e-4)


def test_a_forked_row_continues_as_a_row_started_with_its_tokens(tiny, decoder):
    """select() with a row listed more than once forks it (a tree rollout's branch point):
    each copy, then compaction, gives the logits of a row prefilled and fed the same tokens
    by the transformers forward."""
    model, tok = tiny
    prompts = _prompts(tok)[:2]
    ids, mask = left_pad(prompts, tok.pad_token_id)
    forked = make_decoder(model)
    assert isinstance(forked, decoder)
    with torch.no_grad():
        forked.prefill(ids, mask, torch.tensor([0, 1]))
        forked.step(torch.tensor([5, 7]))
        forked.step(torch.tensor([6, 8]))
        forked.select(torch.tensor([1, 0, 1, 0, 1]))  # prompt 1 forked in 3, prompt 0 in 2
        got = forked.step(torch.tensor([9, 10, 11, 12, 13]))
        forked.select(torch.tensor([4, 1]))  # compaction after the fork
        after = forked.step(torch.tensor([14, 15]))
        ref = HFDecoder(model)
        ref.prefill(ids, mask, torch.tensor([1, 0, 1, 0, 1]))
        ref.step(torch.tensor([7, 5, 7, 5, 7]))
        ref.step(torch.tensor([8, 6, 8, 6, 8]))
        want = ref.step(torch.tensor([9, 10, 11, 12, 13]))
        ref.select(torch.tensor([4, 1]))
        want_after = ref.step(torch.tensor([14, 15]))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(after, want_after, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got[0], got[2])  # the copies took different tokens


def test_greedy_matches_transformers_generate(tiny, decoder):
    model, tok = tiny
    prompts = _prompts(tok)
    engine = TorchEngine(model, tok.pad_token_id, dtype=torch.float32)
    assert isinstance(engine.decoder, decoder)
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


def test_group_shares_prompt_and_logprobs_match_training_forward(tiny, decoder):
    model, tok = tiny
    prompts = _prompts(tok)
    engine = TorchEngine(model, tok.pad_token_id, dtype=torch.float32)
    params = SamplingParams(temperature=0.8, max_new_tokens=10)
    rollout = engine.generate(prompts, 4, params, _keys(0, len(prompts), 4))
    assert len(rollout.completion_ids) == 12
    assert rollout.group_ids.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    batch = make_batch(
        [prompts[i // 4] for i in range(12)], rollout.completion_ids, tok.pad_token_id
    )
    with torch.no_grad():
        logp, _ = completion_logprobs(model, batch, temperature=0.8)
    for i, lps in enumerate(rollout.logprobs):
        assert torch.allclose(logp[i, : len(lps)], torch.tensor(lps), atol=1e-4)


def test_a_prefill_is_reused_for_the_same_prompts_under_the_same_weights(tiny, monkeypatch):
    """The greedy then the sampled held-out evaluation prefill their prompts once: the second
    call starts from the first's prefill (same results as computing it again); other prompts,
    or weights changed in place (an optimizer step, a published copy), prefill anew."""
    model, tok = tiny
    model = copy.deepcopy(model)
    prompts = _prompts(tok)
    engine = TorchEngine(model, tok.pad_token_id, dtype=torch.float32)
    fresh = TorchEngine(copy.deepcopy(model), tok.pad_token_id, dtype=torch.float32)
    computed = []  # prefills of the engine under test
    read = LlamaDecoder._read_weights

    def counted(self: LlamaDecoder) -> None:
        if self is engine.decoder:
            computed.append(1)
        read(self)

    monkeypatch.setattr(LlamaDecoder, "_read_weights", counted)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    sampled = SamplingParams(temperature=0.8, max_new_tokens=8)
    keys = _keys(0, len(prompts), 2)
    engine.generate(prompts, 1, greedy)
    again = engine.generate(prompts, 2, sampled, keys)
    assert len(computed) == 1  # the second call reused the first's prefill
    want = fresh.generate(prompts, 2, sampled, keys)
    assert again.completion_ids == want.completion_ids and again.logprobs == want.logprobs
    engine.generate(prompts[:2], 1, greedy)  # other prompts
    assert len(computed) == 2
    engine.generate(prompts[:2], 1, greedy)
    assert len(computed) == 2
    with torch.no_grad():
        model.lm_head.weight.mul_(1.5)  # an in-place update, as an optimizer's
    engine.generate(prompts[:2], 1, greedy)
    assert len(computed) == 3


def test_greedy_matches_transformers_generate_on_smollm2():
    """The real pretrained model in fp32: the lean decoder's greedy tokens are generate's."""
    pytest.importorskip("gguf")
    model = load_model("smollm2-135m-instruct")
    tok = load_tokenizer("smollm2-135m-instruct")
    prompts = [encode_prompt(tok, p) for p in PROMPTS]
    engine = TorchEngine(model, tok.pad_token_id, dtype=torch.float32)
    assert isinstance(engine.decoder, LlamaDecoder)
    params = SamplingParams(temperature=0.0, max_new_tokens=24, stop_token_ids=stop_token_ids(tok))
    rollout = engine.generate(prompts, 2, params)
    for i, prompt in enumerate(prompts):
        ref = model.generate(
            torch.tensor([prompt]),
            max_new_tokens=24,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
            eos_token_id=list(stop_token_ids(tok)),
        )[0, len(prompt) :].tolist()
        ref = ref[: next((j + 1 for j, t in enumerate(ref) if t in params.stop_token_ids), None)]
        assert rollout.completion_ids[2 * i] == rollout.completion_ids[2 * i + 1] == ref


def test_stop_tokens_end_samples_and_compaction_keeps_others_exact(tiny, decoder):
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


def test_same_seed_same_samples_and_chunking_is_invisible(tiny, decoder):
    model, tok = tiny
    prompts = _prompts(tok)
    params = SamplingParams(temperature=1.0, max_new_tokens=6)
    a = TorchEngine(model, tok.pad_token_id).generate(prompts, 2, params, _keys(3, len(prompts), 2))
    b = TorchEngine(model, tok.pad_token_id).generate(prompts, 2, params, _keys(3, len(prompts), 2))
    assert a.completion_ids == b.completion_ids
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    whole = TorchEngine(model, tok.pad_token_id).generate(prompts, 2, greedy)
    chunked = TorchEngine(model, tok.pad_token_id, max_batch=2).generate(prompts, 2, greedy)
    assert whole.completion_ids == chunked.completion_ids
    # a group larger than max_batch is split into micro sampling groups
    big = TorchEngine(model, tok.pad_token_id).generate(prompts, 4, greedy)
    split = TorchEngine(model, tok.pad_token_id, max_batch=3).generate(prompts, 4, greedy)
    assert big.completion_ids == split.completion_ids and len(split.completion_ids) == 12


def test_a_sample_depends_on_its_stream_not_on_its_batch(tiny, decoder):
    """Worker-count invariance at the engine: a group sampled alone, or with other groups, or in
    chunks of max_batch, draws the same tokens from the same stream keys."""
    model, tok = tiny
    prompts = _prompts(tok)
    params = SamplingParams(temperature=1.0, max_new_tokens=8)
    keys = _keys(5, len(prompts), 3)
    together = TorchEngine(model, tok.pad_token_id).generate(prompts, 3, params, keys)
    for i, prompt in enumerate(prompts):
        alone = TorchEngine(model, tok.pad_token_id, max_batch=2).generate(
            [prompt], 3, params, keys[3 * i : 3 * i + 3]
        )
        assert alone.completion_ids == together.completion_ids[3 * i : 3 * i + 3]
        for a, b in zip(alone.logprobs, together.logprobs[3 * i : 3 * i + 3], strict=True):
            torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-5, rtol=0)
    other = TorchEngine(model, tok.pad_token_id).generate(prompts, 3, params, _keys(6, 3, 3))
    assert other.completion_ids != together.completion_ids


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_engine_follows_in_place_weight_updates(tiny, dtype):
    """After an optimiser-like in-place update (and update_weights, a no-op when the fp32 engine
    shares the policy's parameters) the engine samples what a fresh engine samples."""
    policy, tok = copy.deepcopy(tiny[0]), tiny[1]
    prompts = _prompts(tok)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    engine = TorchEngine(policy, tok.pad_token_id, dtype=dtype)
    before = engine.generate(prompts, 1, greedy)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in policy.parameters():
            param.add_(torch.randn(param.shape, generator=g) * param.std())
    engine.update_weights(policy)
    after = engine.generate(prompts, 1, greedy)
    fresh = TorchEngine(policy, tok.pad_token_id, dtype=dtype).generate(prompts, 1, greedy)
    assert after.completion_ids == fresh.completion_ids
    assert after.logprobs == fresh.logprobs != before.logprobs


def _letters(ids: list[int]) -> str:
    """A decode function for tests: token t is the letter ``a + t % 26``."""
    return "".join(chr(ord("a") + t % 26) for t in ids)


def _first_hit(ids: list[int], stop: str, decode) -> int | None:
    """Length of the shortest prefix of ``ids`` whose decoded text contains ``stop``."""
    return next((k for k in range(1, len(ids) + 1) if stop in decode(ids[:k])), None)


def test_stop_strings_truncate_after_the_token_that_completes_them(tiny):
    model, tok = tiny
    prompts = _prompts(tok)
    engine = TorchEngine(model, tok.pad_token_id, decode=_letters)
    params = SamplingParams(temperature=1.0, max_new_tokens=16)
    free = engine.generate(prompts, 3, params, _keys(0, len(prompts), 3)).completion_ids
    stop = _letters(free[0][3:5])  # spans two tokens
    stopped = engine.generate(
        prompts,
        3,
        dataclasses.replace(params, stop=(stop,)),
        _keys(0, len(prompts), 3),
    )
    first = [_first_hit(c, stop, _letters) for c in free]
    earliest = min(k for k in first if k is not None)
    assert earliest <= 5
    for i, c in enumerate(stopped.completion_ids):
        if first[i] == earliest:  # nothing stopped before: the same draws, cut after the stop
            assert c == free[i][:earliest] and stopped.finished[i]
        # every sample ends with the token that completes its first occurrence, or runs to the end
        hit = _first_hit(c, stop, _letters)
        assert (hit == len(c) and stopped.finished[i]) or (
            hit is None and len(c) == 16 and not stopped.finished[i]
        )


def test_stop_strings_with_the_tokenizer_and_without_a_decode_function(tiny):
    model, tok = tiny
    prompts = _prompts(tok)
    engine = TorchEngine(model, tok.pad_token_id, decode=tok.decode)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12)
    free = engine.generate(prompts, 1, greedy)
    stop = tok.decode(free.completion_ids[0])[1:3]  # two characters: two byte-level tokens
    stopped = engine.generate(prompts, 1, dataclasses.replace(greedy, stop=(stop,)))
    for i, full in enumerate(free.completion_ids):
        end = _first_hit(full, stop, tok.decode)
        assert stopped.completion_ids[i] == full[: end or len(full)]
        assert stopped.finished[i] == (end is not None)
    with pytest.raises(ValueError, match="decode"):
        TorchEngine(model, tok.pad_token_id).generate(prompts, 1, SamplingParams(stop=("a",)))


def test_describe_device_names_the_cpu_threads_and_bf16_flags():
    from rlvr.rollout import describe_device

    text = describe_device("cpu")
    assert text.startswith("cpu (") and f"{torch.get_num_threads()} threads" in text
    flags = open("/proc/cpuinfo").read().split()
    named = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    assert text.endswith(f", {'+'.join(named) or 'no bf16 flags'})")
