"""Training forward+backward: padded vs shared-prefix (Prefix Grouper) forward, and MFU.

One GRPO-shaped micro-batch workload on SmolLM2-135M-Instruct: ``groups`` prompts from the
arithmetic task, G completions each of ``completion_len`` tokens, bf16 autocast (fp32 on CPUs
without bf16). Measures in the same run:

* the bf16 matmul peak of this machine (a large square matmul) in TFLOP/s;
* seconds per forward+backward for the padded forward and the shared-prefix forward;
* model FLOPs utilisation of each (6 * params * useful tokens / time / peak), where useful
  tokens are the tokens the padded layout processes (prompt repeated per sample + completion).

Writes bench/results/training-cpu.json.
Usage: python bench/training.py [--groups 2] [--G 8] [--completion-len 48] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from rlvr.data import ArithmeticTask
from rlvr.models import encode_prompt, load_model, load_tokenizer
from rlvr.policy import completion_logprobs, make_batch
from rlvr.rollout import auto_dtype


def matmul_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    """Best observed TFLOP/s of an n x n x n matmul in ``dtype``."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e12


def time_step(model, batch, dtype, shared: bool, repeats: int) -> float:
    """Best seconds of one forward+backward of the summed completion log-probs."""
    best = float("inf")
    for _ in range(repeats + 1):  # first call warms up
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            logp, _ = completion_logprobs(model, batch, shared_prefix=shared)
        logp.sum().backward()
        model.zero_grad(set_to_none=True)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--G", type=int, default=8)
    ap.add_argument("--completion-len", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    dtype = auto_dtype()
    tok = load_tokenizer(args.model)
    model = load_model(args.model, torch.float32)
    model.train()
    task = ArithmeticTask(level=2)
    prompts = [encode_prompt(tok, task.train_problem(i).prompt) for i in range(args.groups)]
    g = torch.Generator().manual_seed(0)
    n = args.groups * args.G
    completions = [
        torch.randint(200, 40000, (args.completion_len,), generator=g).tolist() for _ in range(n)
    ]
    batch = make_batch(prompts, completions, tok.pad_token_id, torch.arange(n) // args.G)
    params = sum(p.numel() for p in model.parameters())
    flops = 6 * params * batch.tokens

    peak = matmul_peak(dtype)
    padded = time_step(model, batch, dtype, shared=False, repeats=args.repeats)
    shared = time_step(model, batch, dtype, shared=True, repeats=args.repeats)
    prompt_share = 1 - int(batch.completion_mask.sum()) / batch.tokens
    result = {
        "benchmark": "training forward+backward",
        "device": f"cpu ({platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads)",
        "model": args.model,
        "dtype": str(dtype).removeprefix("torch."),
        "samples": n,
        "group_size": args.G,
        "prompt_len": [len(p) for p in prompts],
        "completion_len": args.completion_len,
        "prompt_token_share": prompt_share,
        "matmul_peak_tflops": peak,
        "baseline": {
            "name": "padded forward",
            "seconds": padded,
            "mfu": flops / padded / 1e12 / peak,
        },
        "ours": {
            "name": "shared-prefix forward",
            "seconds": shared,
            "mfu_equivalent": flops / shared / 1e12 / peak,
        },
        "ratio": padded / shared,
    }
    print(f"{dtype} matmul peak: {peak:.2f} TFLOP/s; prompt share of tokens {prompt_share:.0%}")
    print(f"padded forward+backward:        {padded:.2f} s  (MFU {result['baseline']['mfu']:.0%})")
    print(
        f"shared-prefix forward+backward: {shared:.2f} s  "
        f"(same work at MFU-equivalent {result['ours']['mfu_equivalent']:.0%})"
    )
    print(f"ratio: {result['ratio']:.2f}x")
    path = Path(__file__).parent / "results" / "training-cpu.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
