"""The training forward's attention on a CPU under bf16 autocast: PyTorch's SDPA in bf16 (the
baseline) against ``rlvr_sdpa`` (:mod:`rlvr.train_attention`: SDPA on fp32 inputs), in one run.

Two measurements, each the best of ``--repeats`` after a warm-up:

- SDPA alone, forward and backward, at the shape of one micro-batch of the demo's shared-prefix
  forward (16 rows x 9 heads x 42 queries against 105 keys, head dim 64, a boolean mask): bf16
  and fp32 inputs;
- SmolLM2-135M's training forward and backward (``completion_logprobs`` with the shared prefix,
  2 prompts of 63 tokens, 16 completions of 42) under bf16 autocast with each attention, and in
  fp32 without autocast.

Writes bench/results/train-attention-cpu.json (the device named) with the times and the ratios
baseline / ours.

Usage: python bench/train_attention.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from rlvr import train_attention
from rlvr.models import load_model
from rlvr.policy import Batch, completion_logprobs
from rlvr.rollout import describe_device

BENCH = Path(__file__).resolve().parent


def best(fn: Callable[[], tuple[float, float]], repeats: int) -> tuple[float, float]:
    """The best forward and backward seconds of ``repeats`` calls after a warm-up call."""
    fn()
    runs = [fn() for _ in range(repeats)]
    return min(r[0] for r in runs), min(r[1] for r in runs)


def sdpa(dtype: torch.dtype) -> tuple[float, float]:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(16, 42, 9, 64, generator=g).to(dtype).transpose(1, 2).requires_grad_()
    k = torch.randn(16, 9, 105, 64, generator=g).to(dtype).requires_grad_()
    v = torch.randn(16, 9, 105, 64, generator=g).to(dtype).requires_grad_()
    mask = torch.rand(16, 1, 42, 105, generator=g) > 0.3
    start = time.perf_counter()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125)
    mid = time.perf_counter()
    out.float().sum().backward()
    return mid - start, time.perf_counter() - mid


def model_step(model: torch.nn.Module, batch: Batch, dtype: torch.dtype) -> tuple[float, float]:
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        logp, _ = completion_logprobs(model, batch, shared_prefix=True)
    mid = time.perf_counter()
    logp.sum().backward()
    model.zero_grad(set_to_none=True)
    return mid - start, time.perf_counter() - mid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    out: dict = {
        "benchmark": "training attention under CPU bf16 autocast (bench/train_attention.py)",
        "device": describe_device("cpu"),
        "torch": torch.__version__,
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    bf16, fp32 = (
        best(lambda: sdpa(torch.bfloat16), args.repeats),
        best(lambda: sdpa(torch.float32), args.repeats),
    )
    out["sdpa_seconds"] = {"bf16": {"forward": bf16[0], "backward": bf16[1]}}
    out["sdpa_seconds"]["fp32"] = {"forward": fp32[0], "backward": fp32[1]}
    out["sdpa_backward_bf16_over_fp32"] = bf16[1] / fp32[1]

    model = load_model("smollm2-135m-instruct", torch.float32)
    model.train()
    g = torch.Generator().manual_seed(0)
    prompts, group, prompt_len, length = 2, 8, 63, 42
    batch = Batch(
        prompt_ids=torch.randint(0, 49000, (prompts, prompt_len), generator=g),
        prompt_mask=torch.ones(prompts, prompt_len, dtype=torch.long),
        prompt_index=torch.arange(prompts).repeat_interleave(group),
        completion_ids=torch.randint(0, 49000, (prompts * group, length), generator=g),
        completion_mask=torch.ones(prompts * group, length, dtype=torch.long),
        action_mask=torch.ones(prompts * group, length, dtype=torch.long),
    )
    steps = {}
    for name, implementation, dtype in (
        ("fp32", train_attention.NAME, torch.float32),
        ("bf16, SDPA in bf16 (baseline)", "sdpa", torch.bfloat16),
        ("bf16, rlvr_sdpa (ours)", train_attention.NAME, torch.bfloat16),
    ):
        model.set_attn_implementation(implementation)
        forward, backward = best(lambda d=dtype: model_step(model, batch, d), args.repeats)
        steps[name] = {"forward": forward, "backward": backward, "total": forward + backward}
    out["micro_batch_seconds"] = steps
    baseline, ours = steps["bf16, SDPA in bf16 (baseline)"], steps["bf16, rlvr_sdpa (ours)"]
    out["micro_batch_speedup_ours_over_baseline"] = baseline["total"] / ours["total"]
    out["micro_batch_speedup_ours_over_fp32"] = steps["fp32"]["total"] / ours["total"]
    path = BENCH / "results" / "train-attention-cpu.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
