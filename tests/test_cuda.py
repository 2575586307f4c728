"""The CUDA path, on a GPU (``pytest -m cuda``, run by ``make gpu-check``; skipped elsewhere):
training end to end on the device, the engine's log-probs equal to the trainer's on the
device, the sampler on CUDA against the CPU, bf16 chosen by ``auto``, and a checkpoint made on
the GPU resumed on the CPU."""

from __future__ import annotations

import math

import pytest
import torch
from test_trainer import COMPARED, step_rows, tiny_config

from rlvr import precision
from rlvr.checkpoint import set_aside
from rlvr.config import build_config
from rlvr.models import load_model, load_tokenizer
from rlvr.policy import completion_logprobs, make_batch
from rlvr.rollout import SamplingParams, TorchEngine
from rlvr.trainer import train

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_auto_precision_is_bf16_on_a_bf16_gpu():
    assert torch.cuda.is_bf16_supported()  # every GPU this project is lent (H100, H200)
    choice = precision.choose("cuda")
    assert (choice.rollout, choice.train, choice.source) == (torch.bfloat16, torch.bfloat16, "cuda")


def test_training_runs_on_the_gpu_and_matches_the_cpu_at_step_one(tmp_path):
    """fp32 everywhere (TF32 off): step 1 samples from the same weights with the same random
    streams, so its rewards agree with the CPU's; later steps may part as fp32 sums differ."""
    torch.backends.cuda.matmul.allow_tf32 = False
    fp32 = {"autocast": "fp32"}
    gpu = tmp_path / "gpu"
    train(
        build_config(
            tiny_config(gpu, steps=3, train={**fp32, "device": "cuda"}, rollout={"dtype": "fp32"})
        )
    )
    cpu = tmp_path / "cpu"
    train(
        build_config(
            tiny_config(cpu, steps=3, train={**fp32, "device": "cpu"}, rollout={"dtype": "fp32"})
        )
    )
    on_gpu, on_cpu = step_rows(gpu), step_rows(cpu)
    assert sorted(on_gpu) == [1, 2, 3]
    for row in on_gpu.values():
        assert math.isfinite(row["policy/loss"]) and math.isfinite(row["policy/grad_norm"])
    assert on_gpu[1]["reward/mean"] == pytest.approx(on_cpu[1]["reward/mean"], abs=1e-6)


def test_bf16_training_on_the_gpu_is_finite(tmp_path):
    run = tmp_path / "bf16"
    train(build_config(tiny_config(run, steps=2, train={"autocast": "auto", "device": "cuda"})))
    for row in step_rows(run).values():
        assert math.isfinite(row["policy/loss"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_engines_logprobs_equal_the_trainers_on_the_gpu(dtype):
    """What the sampler reports for its own tokens is what the trainer computes for them (the
    ratio pi/pi_old starts at 1), within the dtype's rounding."""
    torch.manual_seed(0)
    tok = load_tokenizer("tiny-random-llama")
    model = load_model("tiny-random-llama", torch.float32).to("cuda").eval()
    engine = TorchEngine(model, tok.pad_token_id, dtype=dtype)
    prompts = [tok.encode("1 + 2 ="), tok.encode("The answer is")]
    out = engine.generate(prompts, 4, SamplingParams(max_new_tokens=8, temperature=1.0))
    rows = [i // 4 for i in range(len(out.completion_ids))]
    batch = make_batch(prompts, out.completion_ids, tok.pad_token_id, prompt_index=rows)
    with torch.no_grad(), torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
        logp, _ = completion_logprobs(model, batch.to("cuda"), 1.0, shared_prefix=True)
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    for i, sampled in enumerate(out.logprobs):
        assert logp[i, : len(sampled)].cpu().tolist() == pytest.approx(sampled, abs=tol)


def test_a_gpu_checkpoint_resumes_on_the_cpu(tmp_path):
    """fp32 everywhere (TF32 off): 3 steps on the GPU, then step 3 again on the CPU, resumed
    from step 2's checkpoint (step 3's set aside). The CPU's step 3 samples from the weights the
    GPU's did, with the same random streams, so its rewards agree, and its entropy, loss and
    gradient norm agree within fp32 sums' differences; steps 1-2 stay as the GPU logged them."""
    torch.backends.cuda.matmul.allow_tf32 = False
    run = tmp_path / "run"

    def config(device: str):
        train_section = {"autocast": "fp32", "device": device}
        return build_config(
            tiny_config(run, steps=3, train=train_section, rollout={"dtype": "fp32"})
        )

    train(config("cuda"))
    on_gpu = step_rows(run)
    set_aside(run, 3)  # step 2's checkpoint, made on the GPU, is the latest again
    train(config("cpu"), resume=run)
    on_cpu = step_rows(run)
    assert sorted(on_cpu) == [1, 2, 3]
    for step in (1, 2):
        for key in COMPARED:
            assert on_cpu[step][key] == on_gpu[step][key], (step, key)
    assert on_cpu[3]["reward/mean"] == pytest.approx(on_gpu[3]["reward/mean"], abs=1e-6)
    assert on_cpu[3]["response/length_mean"] == on_gpu[3]["response/length_mean"]
    for key in ("policy/entropy", "policy/loss", "policy/grad_norm"):
        assert on_cpu[3][key] == pytest.approx(on_gpu[3][key], rel=1e-4, abs=1e-6), key


def test_adamw_is_fused_on_the_gpu_and_steps(tmp_path):
    """A learner on the GPU steps its parameters with fused AdamW (one kernel per step)."""
    from rlvr.trainer.backends import build_parts

    cfg = build_config(tiny_config(tmp_path / "run", steps=1, train={"device": "cuda"}))
    parts = build_parts(cfg)
    assert parts.learners.optimizer.param_groups[0]["fused"] is True
    before = [p.detach().clone() for p in parts.learners.policy.parameters()]
    data, _ = parts.collector.collect(1)
    parts.learners.update(data)
    after = list(parts.learners.policy.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))
