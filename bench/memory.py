"""Peak memory (RSS) of training, each measurement in a fresh subprocess so peaks do not mix.

``--benchmark group-size`` (default): one GRPO step as the group size G grows (bounded by
micro-batching). Each G runs in a fresh subprocess: rollout of ``prompts`` x G completions
(decoded at most ``rollout.max_batch`` samples at a time) and one policy update over
micro-batches of ``train.micro_batch_size``, with a dense reward (minus the mean token entropy)
so that every G takes a real optimizer step. Reports the process's peak RSS (ru_maxrss) per G
and the step time. The floor (fp32 policy, bf16 engine copy, AdamW moments, gradients: ~2 GB
for SmolLM2-135M) does not depend on G. Writes bench/results/memory-cpu.json.

``--benchmark chunked-logprobs``: the training forward+backward (shared-prefix forward) of one
micro-batch of ``--samples`` completions of ``--completion-len`` random tokens sharing one
prompt of 64 on SmolLM2-135M (fp32 weights, the trainer's autocast dtype), once per
``--chunks`` value of ``completion_logprobs(chunk_tokens=...)`` (0: the [K, V] logits all at
once), with gradient checkpointing unless ``--no-gradient-checkpointing`` (without it the
decoder's activations, not the logits, dominate). Reports the peak RSS of the step, the floor
(the peak after two 8-token steps: weights paged in, gradients allocated and accumulated into)
and the step time. Writes bench/results/memory-chunked-logprobs-cpu.json.

Usage: python bench/memory.py [--groups 8,32,128] [--prompts 2] [--max-new-tokens 48]
           [--device cuda]  (also the peak GPU memory; writes memory-cuda.json)
       python bench/memory.py --benchmark chunked-logprobs [--samples 8]
           [--completion-len 512] [--chunks 0,1024] [--no-gradient-checkpointing]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rlvr.rollout import describe_device

CHILD = r"""
import json, resource, sys, time
from rlvr.config import build_config
from rlvr.trainer import train
G, prompts, max_new, run_dir = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
device = sys.argv[5]
cfg = build_config({
    "model": {"name": "smollm2-135m-instruct"},
    "task": {"name": "arithmetic", "level": 3},
    "rollout": {"group_size": G, "prompts_per_step": prompts, "max_new_tokens": max_new,
                "max_batch": 64},
    "algorithm": {"preset": "grpo", "beta": 0.0},
    # a dense reward: every G trains (a 0/1 verifier leaves small groups all-equal, and a step
    # without gradients never allocates the optimizer state, which would flatter small G)
    "reward": {"terms": [{"name": "negative_entropy"}]},
    "train": {"steps": 1, "micro_batch_size": 16, "device": device},
    "eval": {"before": False, "after": False},
    "logging": {"run_dir": run_dir, "progress": False, "tensorboard": False},
    "checkpoint": {"every": 0, "save_final": False},
})
t0 = time.perf_counter()
train(cfg)
seconds = time.perf_counter() - t0
peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
row = {"G": G, "peak_rss_mib": peak_mib, "seconds": seconds}
if device.startswith("cuda"):
    import torch
    row["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
print(json.dumps(row))
"""

CHILD_CHUNKED = r"""
import json, resource, sys, time
import torch
from rlvr.models import load_model
from rlvr.policy import completion_logprobs, make_batch
from rlvr.precision import auto_dtype
samples, length, chunk, ckpt = (int(a) for a in sys.argv[1:5])
model = load_model("smollm2-135m-instruct").train()  # fp32, as the trainer's policy
if ckpt:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
g = torch.Generator().manual_seed(0)
prompt = torch.randint(200, 40000, (64,), generator=g).tolist()
completions = torch.randint(200, 40000, (samples, length), generator=g).tolist()
dtype = auto_dtype("cpu", model.config, "train")


def step(batch):
    with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        logp, entropy = completion_logprobs(model, batch, 1.0, True, shared_prefix=True,
                                            chunk_tokens=chunk)
    logp.sum().backward()


# the floor: two 8-token steps page the weights in, allocate the gradients and accumulate into
# them (as every micro-batch after the first does)
for _ in range(2):
    step(make_batch([prompt], [prompt[:8]], pad_id=0))
floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0 = time.perf_counter()
step(make_batch([prompt], completions, pad_id=0, prompt_index=[0] * samples))
seconds = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"chunk_tokens": chunk, "gradient_checkpointing": bool(ckpt),
                  "vocab": model.config.vocab_size,
                  "dtype": str(dtype).removeprefix("torch."), "peak_rss_floor_mib": floor,
                  "peak_rss_mib": peak, "seconds": seconds}))
"""


def run_child(code: str, *argv: object) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter and parse the JSON of its last stdout line."""
    out = subprocess.run(
        [sys.executable, "-c", code, *map(str, argv)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def group_size(args: argparse.Namespace) -> None:
    """Peak RSS of one GRPO step per group size; writes memory-cpu.json."""
    rows = []
    for g in [int(x) for x in args.groups.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            row = run_child(CHILD, g, args.prompts, args.max_new_tokens, tmp, args.device)
        rows.append(row)
        gpu = f", peak GPU {row['peak_gpu_mib']:7.0f} MiB" if "peak_gpu_mib" in row else ""
        print(
            f"G={g:4d}: peak RSS {row['peak_rss_mib']:7.0f} MiB{gpu}, step "
            f"{row['seconds']:.1f} s ({args.prompts * g} samples)"
        )
    result = {
        "benchmark": "peak memory of one GRPO step vs group size",
        "device": describe_device(args.device),
        "model": "smollm2-135m-instruct",
        "prompts": args.prompts,
        "max_new_tokens": args.max_new_tokens,
        "rollout_max_batch": 64,
        "micro_batch_size": 16,
        "rows": rows,
        "ratio_peak_G_max_over_G_min": rows[-1]["peak_rss_mib"] / rows[0]["peak_rss_mib"],
    }
    key = "peak_gpu_mib" if args.device.startswith("cuda") else "peak_rss_mib"
    result["ratio_peak_G_max_over_G_min"] = rows[-1][key] / rows[0][key]
    kind = "cuda" if args.device.startswith("cuda") else "cpu"
    path = Path(__file__).parent / "results" / f"memory-{kind}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"peak RSS ratio G={rows[-1]['G']} / G={rows[0]['G']}: "
        f"{result['ratio_peak_G_max_over_G_min']:.2f}; wrote {path}"
    )


def chunked_logprobs(args: argparse.Namespace) -> None:
    """Peak RSS of one training forward+backward per ``chunk_tokens``; writes
    memory-chunked-logprobs-cpu.json."""
    rows = []
    for chunk in [int(x) for x in args.chunks.split(",")]:
        row = run_child(
            CHILD_CHUNKED,
            args.samples,
            args.completion_len,
            chunk,
            int(args.gradient_checkpointing),
        )
        rows.append(row)
        print(
            f"chunk_tokens={chunk:5d}: peak RSS {row['peak_rss_mib']:7.0f} MiB "
            f"(floor: {row['peak_rss_floor_mib']:.0f} MiB after 8-token steps), "
            f"forward+backward {row['seconds']:.1f} s"
        )
    result = {
        "benchmark": "peak memory of one training forward+backward vs logprob chunk size",
        "device": describe_device(),
        "model": "smollm2-135m-instruct",
        "samples": args.samples,
        "completion_len": args.completion_len,
        "prompt_len": 64,
        "shared_prefix": True,
        "gradient_checkpointing": args.gradient_checkpointing,
        "full_logits_fp32_mib": args.samples * args.completion_len * rows[0]["vocab"] * 4 / 2**20,
        "rows": rows,
    }
    path = Path(__file__).parent / "results" / "memory-chunked-logprobs-cpu.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"full [K, V] logits in fp32: {result['full_logits_fp32_mib']:.0f} MiB; wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--benchmark", choices=["group-size", "chunked-logprobs"], default="group-size")
    ap.add_argument("--groups", default="8,32,128")
    ap.add_argument("--device", default="cpu", help="group-size: cpu, or cuda (peak GPU memory)")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--completion-len", type=int, default=512)
    ap.add_argument("--chunks", default="0,1024")
    ap.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args()
    (chunked_logprobs if args.benchmark == "chunked-logprobs" else group_size)(args)


if __name__ == "__main__":
    main()
