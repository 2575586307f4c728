"""Training forward+backward: padded vs shared-prefix (Prefix Grouper) forward, and MFU.

One GRPO-shaped micro-batch workload on SmolLM2-135M-Instruct: ``groups`` prompts from the
arithmetic task, G completions each of ``completion_len`` tokens, bf16 autocast (fp32 on CPUs
without bf16). Measures in the same run:

* the bf16 matmul peak of this machine (a large square matmul) in TFLOP/s;
* seconds per forward+backward for the padded forward and the shared-prefix forward;
* model FLOPs utilisation of each (6 * params * useful tokens / time / peak), where useful
  tokens are the tokens the padded layout processes (prompt repeated per sample + completion).

Writes bench/results/training-cpu.json.
Usage: python bench/training.py [--groups 2] [--G 8] [--completion-len 48] [--min-len 8]
       [--max-len 96] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from rlvr.data import ArithmeticTask
from rlvr.models import encode_prompt, load_model, load_tokenizer
from rlvr.policy import completion_logprobs, make_batch
from rlvr.precision import auto_dtype
from rlvr.rollout import describe_device


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


def scenario(model, prompts, lengths, group_size, pad_id, dtype, peak, repeats) -> dict:
    """Padded vs shared-prefix (packed) forward+backward on completions of the given lengths."""
    g = torch.Generator().manual_seed(0)
    completions = [torch.randint(200, 40000, (k,), generator=g).tolist() for k in lengths]
    n = len(lengths)
    batch = make_batch(prompts, completions, pad_id, torch.arange(n) // group_size)
    params = sum(p.numel() for p in model.parameters())
    flops = 6 * params * batch.tokens  # useful work: prompt per sample + real completion tokens
    padded = time_step(model, batch, dtype, shared=False, repeats=repeats)
    shared = time_step(model, batch, dtype, shared=True, repeats=repeats)
    padded_tokens = n * (batch.prompt_ids.shape[1] + batch.completion_ids.shape[1])
    return {
        "completion_lengths": lengths,
        "prompt_token_share": 1 - int(batch.completion_mask.sum()) / batch.tokens,
        "padding_share_of_padded_layout": 1 - batch.tokens / padded_tokens,
        "baseline": {
            "name": "padded forward",
            "seconds": padded,
            "mfu": flops / padded / 1e12 / peak,
        },
        "ours": {
            "name": "shared-prefix packed forward",
            "seconds": shared,
            "mfu_equivalent": flops / shared / 1e12 / peak,
        },
        "ratio": padded / shared,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--G", type=int, default=8)
    ap.add_argument("--completion-len", type=int, default=48)
    ap.add_argument("--min-len", type=int, default=8, help="variable scenario: shortest")
    ap.add_argument("--max-len", type=int, default=96, help="variable scenario: longest")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    tok = load_tokenizer(args.model)
    model = load_model(args.model, torch.float32)
    dtype = auto_dtype("cpu", model.config, "train")
    model.train()
    task = ArithmeticTask(level=2)
    prompts = [encode_prompt(tok, task.train_problem(i).prompt) for i in range(args.groups)]
    n = args.groups * args.G
    g = torch.Generator().manual_seed(1)
    spread = torch.randint(args.min_len, args.max_len + 1, (n,), generator=g).tolist()
    peak = matmul_peak(dtype)
    scenarios = {
        "fixed": [args.completion_len] * n,
        "variable": spread,
    }
    result = {
        "benchmark": "training forward+backward",
        "device": describe_device(),
        "model": args.model,
        "dtype": str(dtype).removeprefix("torch."),
        "samples": n,
        "group_size": args.G,
        "prompt_len": [len(p) for p in prompts],
        "matmul_peak_tflops": peak,
    }
    print(f"{dtype} matmul peak: {peak:.2f} TFLOP/s")
    for name, lengths in scenarios.items():
        r = scenario(model, prompts, lengths, args.G, tok.pad_token_id, dtype, peak, args.repeats)
        result[name] = r
        print(
            f"{name} completion lengths ({min(lengths)}-{max(lengths)}): prompt share "
            f"{r['prompt_token_share']:.0%}, padding share of the padded layout "
            f"{r['padding_share_of_padded_layout']:.0%}"
        )
        print(
            f"  padded forward+backward:        {r['baseline']['seconds']:.2f} s  "
            f"(MFU {r['baseline']['mfu']:.0%})"
        )
        print(
            f"  shared-prefix packed:           {r['ours']['seconds']:.2f} s  "
            f"(same work at MFU-equivalent {r['ours']['mfu_equivalent']:.0%})"
        )
        print(f"  ratio: {r['ratio']:.2f}x")
    result["ratio"] = result["variable"]["ratio"]
    path = Path(__file__).parent / "results" / "training-cpu.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
