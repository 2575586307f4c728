"""LoRA adapters through the trainer: the adapter alone trains, the reference is the base model
(or a frozen adapter), engines sample from the current adapter (and a missed one stops the
run), checkpoints hold the adapter in PEFT's format and resume exactly, export."""

from __future__ import annotations

import contextlib
import copy
import json
import signal
from pathlib import Path

import pytest
import torch
import yaml
from test_trainer import COMPARED, _launch, _resume, _wait_for, step_rows, tiny_config

from rlvr import adapters, algorithms
from rlvr.checkpoint import latest_checkpoint, list_checkpoints
from rlvr.config import ConfigError, build_config
from rlvr.export import ExportError, export
from rlvr.models import load_model, load_tokenizer
from rlvr.trainer import train
from rlvr.trainer.backends.local import build
from rlvr.trainer.publish_check import PublishMismatch

LORA = {"name": "tiny-random-llama", "lora": {"rank": 4, "alpha": 8}}
FAST = {"lr": 1e-2}  # adapters move visibly in a few steps


def lora_config(run_dir: Path, steps: int = 3, **sections) -> dict:
    sections["rollout"] = {"dtype": "fp32", **sections.get("rollout", {})}
    cfg = tiny_config(run_dir, steps=steps, model=copy.deepcopy(LORA), **sections)
    cfg["train"].update({k: v for k, v in FAST.items() if k not in sections.get("train", {})})
    return cfg


@contextlib.contextmanager
def built(cfg: dict):
    with contextlib.ExitStack() as stack:
        yield build(build_config(cfg), None, stack)


def test_only_the_adapter_trains_and_the_policy_starts_as_the_base_model(tmp_path):
    with built(lora_config(tmp_path / "run", algorithm={"beta": 0.04})) as parts:
        learner = parts.learners
        policy = learner.policy
        in_optimizer = {id(p) for g in learner.optimizer.param_groups for p in g["params"]}
        lora = adapters.adapter_parameters(policy, adapters.TRAINED)
        assert in_optimizer == {id(p) for p in lora.values()} and len(lora) == 2 * 7 * 2
        assert all(p.requires_grad == (id(p) in in_optimizer) for p in policy.parameters())
        assert learner.reference.copy is None and learner.reference.adapter == "base"  # no 2nd copy
        base = load_model("tiny-random-llama")
        ids = torch.randint(0, 200, (2, 9), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            expected = base(ids).logits
            assert torch.equal(policy(ids).logits, expected)  # B = 0: exactly the base model
            for p in lora.values():
                p.add_(0.5)
            assert not torch.allclose(policy(ids).logits, expected)
            with adapters.disabled(policy):  # the reference's view: the adapter off
                assert torch.equal(policy(ids).logits, expected)
            assert not torch.allclose(policy(ids).logits, expected)  # on again


def test_at_step_zero_the_ratio_is_one_and_the_kl_to_the_reference_zero(tmp_path):
    algorithm = {"beta": 0.04, "ppo_epochs": 2}  # pi_old from a no-grad pass, not the update's
    with built(lora_config(tmp_path / "run", algorithm=algorithm)) as parts:
        data, _ = parts.collector.collect(1)
        step = parts.learners.prepare(data)
        assert torch.equal(step.old_logp, step.ref_logp)  # ratio pi/pi_ref exactly 1
        kl = algorithms.kl_penalty("k3", step.old_logp, step.ref_logp)
        assert torch.count_nonzero(kl) == 0


def test_the_engine_samples_from_the_current_adapter(tmp_path):
    """After every LoRA update the torch engine's log-probs equal the learner's (fp32, 1e-5):
    the publish check's and the batch's own (the mismatch metrics), while the policy moves."""
    run_dir = tmp_path / "run"
    train(build_config(lora_config(run_dir, steps=3, algorithm={"beta": 0.04})))
    rows = step_rows(run_dir)
    for row in rows.values():
        assert row["rollout/publish_check_diff"] < 1e-5
        assert row["mismatch/abs_log_ratio"] < 1e-5
    assert rows[3]["policy/kl_ref"] > 1e-3  # the adapter moved away from the base model


def test_an_engine_that_misses_the_adapter_stops_the_run(tmp_path, monkeypatch):
    """The peers' silent failure, made on purpose: the engine's decoder ignores the adapter
    (samples from the base model). The publish check stops the run at the first update."""
    monkeypatch.setattr(
        adapters.MergedWeights, "__call__", lambda self, m: getattr(m, "base_layer", m).weight
    )
    with pytest.raises(PublishMismatch, match="torch engine") as err:
        train(build_config(lora_config(tmp_path / "run", steps=3)))
    assert "policy version 1" in str(err.value) and "adapter did not reach it" in str(err.value)


def test_a_skipped_publish_stops_the_run(tmp_path, monkeypatch):
    """An engine with its own weights (bf16 here) that is not given the update of step 2."""
    from rlvr.trainer.backends.local import LocalRollouts

    publish = LocalRollouts.publish

    def skip_version_two(self, weights, version):
        return publish(self, weights, version) if version != 2 else {}

    monkeypatch.setattr(LocalRollouts, "publish", skip_version_two)
    cfg = lora_config(tmp_path / "run", steps=4, rollout={"dtype": "bf16"}, train={"lr": 5e-2})
    with pytest.raises(PublishMismatch, match="policy version 2"):
        train(build_config(cfg))
    assert sorted(step_rows(tmp_path / "run")) == [1]  # step 2 never logged


def test_dropout_is_refused_for_rl(tmp_path):
    cfg = lora_config(tmp_path / "run")
    cfg["model"]["lora"]["dropout"] = 0.1
    with pytest.raises(ConfigError, match="dropout"):
        train(build_config(cfg))


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory) -> tuple[Path, dict[int, dict]]:
    """Four LoRA steps with beta > 0 in one go: the run resumes are compared with."""
    run_dir = tmp_path_factory.mktemp("lora") / "run"
    train(build_config(lora_config(run_dir, steps=4, algorithm={"beta": 0.04})))
    return run_dir, step_rows(run_dir)


def test_checkpoints_hold_the_adapter_in_peft_format(straight_run):
    from peft import PeftModel

    run_dir, _ = straight_run
    ckpt = latest_checkpoint(run_dir)
    names = {p.name for p in ckpt.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "optimizer.pt"} <= names
    assert "model.safetensors" not in names  # the frozen base is not copied into every step
    config = json.loads((ckpt / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "tiny-random-llama" and config["r"] == 4
    ids = torch.tensor([[5, 6, 7, 8]])
    peft = PeftModel.from_pretrained(load_model("tiny-random-llama"), str(ckpt))
    ours = load_model(str(ckpt))  # a checkpoint is a model spec: base + adapter
    with torch.no_grad():
        assert torch.equal(peft(ids).logits, ours(ids).logits)
        assert not torch.allclose(ours(ids).logits, load_model("tiny-random-llama")(ids).logits)


def test_exact_resume_of_a_lora_run(tmp_path, straight_run):
    _, reference = straight_run
    run_dir = tmp_path / "run"
    train(build_config(lora_config(run_dir, steps=2, algorithm={"beta": 0.04})))
    train(build_config(lora_config(run_dir, steps=4, algorithm={"beta": 0.04})), resume=run_dir)
    rows = step_rows(run_dir)
    assert sorted(rows) == [1, 2, 3, 4]
    for step in (3, 4):
        for key in COMPARED:  # bitwise: the adapter, optimizer and streams come back exactly
            assert rows[step][key] == reference[step][key], (step, key)


def test_a_lora_run_killed_mid_checkpoint_resumes(tmp_path):
    run_dir = tmp_path / "run"
    config_path = tmp_path / "config.yaml"
    cfg = lora_config(run_dir, steps=6)
    config_path.write_text(yaml.safe_dump(cfg))
    proc = _launch(config_path)
    _wait_for(lambda: len(list_checkpoints(run_dir)) >= 2, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    output = _resume(run_dir)
    assert sorted(step_rows(run_dir)) == [1, 2, 3, 4, 5, 6]
    assert (latest_checkpoint(run_dir) / adapters.ADAPTER_CONFIG).is_file()
    # PEFT imports bitsandbytes, which warns on import (on CPUs with AVX512-BF16) that the
    # ``kernels`` package of its CPU 4-bit matmul is missing: nothing a LoRA run uses
    assert "kernels" not in output, output


def test_export_merged_generates_the_run_policys_greedy_text(tmp_path, straight_run):
    from transformers import AutoModelForCausalLM

    run_dir, _ = straight_run
    merged = export(run_dir, tmp_path / "merged", merge=True).out
    assert (merged / "config.json").is_file() and (merged / "model.safetensors").is_file()
    plain = AutoModelForCausalLM.from_pretrained(merged)  # no PEFT involved
    policy = load_model(str(latest_checkpoint(run_dir)))
    tok = load_tokenizer(str(merged))
    prompt = tok("<|im_start|>user\n2+3=<|im_end|>\n", return_tensors="pt")
    settings = {"max_new_tokens": 12, "do_sample": False, "pad_token_id": tok.pad_token_id}
    with torch.no_grad():
        a = plain.generate(**prompt, **settings)
        b = policy.generate(**prompt, **settings)
    assert torch.equal(a, b)
    adapter = export(run_dir, tmp_path / "adapter").out
    assert {p.name for p in adapter.iterdir()} >= {"adapter_config.json", "tokenizer.json"}
    with pytest.raises(ExportError, match="exists"):
        export(run_dir, tmp_path / "adapter")


def test_an_existing_adapter_trains_further_against_itself(tmp_path, straight_run):
    """model.lora.path: the run starts from the saved adapter (not the base model) and its
    KL reference is that adapter, frozen."""
    run_dir, _ = straight_run
    saved = export(run_dir, tmp_path / "adapter").out
    cfg = lora_config(tmp_path / "run", algorithm={"beta": 0.04, "ppo_epochs": 2})
    cfg["model"]["lora"] = {"path": str(saved)}
    with built(cfg) as parts:
        learner = parts.learners
        assert learner.reference.adapter == adapters.REFERENCE
        ids = torch.tensor([[5, 6, 7, 8]])
        with torch.no_grad():
            expected = load_model(str(saved))(ids).logits
            assert torch.equal(learner.policy(ids).logits, expected)
        data, _ = parts.collector.collect(1)
        step = learner.prepare(data)
        assert torch.equal(step.old_logp, step.ref_logp)


def test_a_lora_adapter_as_model_name_is_explained(tmp_path, straight_run):
    run_dir, _ = straight_run
    cfg = tiny_config(tmp_path / "run", model={"name": str(latest_checkpoint(run_dir))})
    with pytest.raises(ConfigError, match="model.lora.path"):
        train(build_config(cfg))


def test_prorl_reset_copies_the_adapter_into_the_reference_and_resumes(tmp_path):
    algorithm = {"beta": 0.04, "reference_reset_every": 2}
    constant = {"lr_schedule": "constant", "warmup_steps": 0, "lr": 1e-2}
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "run"
    train(build_config(lora_config(ref_dir, steps=4, algorithm=algorithm, train=constant)))
    train(build_config(lora_config(run_dir, steps=3, algorithm=algorithm, train=constant)))
    assert (latest_checkpoint(run_dir) / "reference.safetensors").is_file()
    resumed = lora_config(run_dir, steps=4, algorithm=algorithm, train=constant)
    train(build_config(resumed), resume=run_dir)
    a, b = step_rows(ref_dir), step_rows(run_dir)
    assert a[4]["policy/kl_ref"] == b[4]["policy/kl_ref"]
    assert a[3]["policy/kl_ref"] < a[2]["policy/kl_ref"]  # reset before step 3: KL starts over


@pytest.mark.parametrize("quantize", ["4bit", "8bit"])
def test_qlora_trains_an_adapter_on_a_quantised_base(tmp_path, quantize):
    """QLoRA on this CPU (bitsandbytes): the base's linear weights are stored in 4 / 8 bits,
    the adapter trains, the engine samples from the quantised model with the adapter (the
    publish check within 1e-5), and the reference is the quantised base."""
    pytest.importorskip("bitsandbytes")
    run_dir = tmp_path / "run"
    cfg = lora_config(run_dir, steps=2, algorithm={"beta": 0.04})
    cfg["model"]["lora"]["quantize"] = quantize
    with built(cfg) as parts:
        policy = parts.learners.policy
        assert adapters.is_quantized(policy)
        q_proj = policy.model.layers[0].self_attn.q_proj.get_base_layer().weight
        assert q_proj.dtype in (torch.uint8, torch.int8)  # stored quantised, not fp32
    train(build_config(cfg))
    rows = step_rows(run_dir)
    assert all(r["rollout/publish_check_diff"] < 1e-5 for r in rows.values())
    assert rows[2]["policy/kl_ref"] > 0 and rows[2]["policy/grad_norm"] > 0


def test_qlora_refuses_vllm(tmp_path):
    cfg = lora_config(tmp_path / "run")
    cfg["model"]["lora"]["quantize"] = "4bit"
    cfg["rollout"]["engine"] = "vllm"
    with pytest.raises(ConfigError, match="torch engine only"):
        train(build_config(cfg))


def test_rlvr_eval_evaluates_a_lora_run(tmp_path, straight_run):
    from rlvr.evaluation import evaluate

    run_dir, _ = straight_run
    summary = evaluate(run_dir, n=2, n_prompts=4, out=tmp_path / "eval", progress=False)
    assert summary["checkpoint"] == "step_000004" and "pass@1" in summary["metrics"]
