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

``--benchmark lora``: two GRPO steps with a reference (beta = 0.04) per arm: full fine-tuning,
LoRA rank 8 and rank 1 (all linear layers), on SmolLM2-135M and on a Llama-shaped model of
about 1.1B parameters with random weights built in-process (hidden 2048, 16 layers, SmolLM2's
tokenizer; memory and time only: its completions are noise). Each arm runs in a fresh
subprocess watched from here: one whose RSS passes ``--limit-gib`` is stopped and reported as
not fitting. Reports the peak RSS and the second step's time (rollout and update). Writes
bench/results/memory-lora-cpu.json.

Usage: python bench/memory.py [--groups 8,32,128] [--prompts 2] [--max-new-tokens 48]
           [--device cuda]  (also the peak GPU memory; writes memory-cuda.json)
       python bench/memory.py --benchmark lora [--models smollm2-135m-instruct,llama-1b-random]
           [--limit-gib 20]
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
    "algorithm": {"preset": "grpo", "kl": {"beta": 0.0}},
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


CHILD_LORA = r"""
import json, resource, sys
from rlvr.config import build_config
from rlvr.logging import read_metrics
from rlvr.trainer import train
model, arm, run_dir = sys.argv[1], sys.argv[2], sys.argv[3]
spec = {"name": model}
if arm != "full":
    spec["lora"] = {"rank": int(arm)}
cfg = build_config({
    "model": spec,
    "task": {"name": "arithmetic", "level": 3},
    "rollout": {"group_size": 8, "prompts_per_step": 2, "max_new_tokens": 32, "dtype": "fp32"},
    "algorithm": {"preset": "grpo", "kl": {"beta": 0.04}},
    "reward": {"terms": [{"name": "negative_entropy"}]},  # dense: every step trains
    "train": {"steps": 2, "micro_batch_size": 16, "autocast": "fp32"},
    "eval": {"before": False, "after": False},
    "logging": {"run_dir": run_dir, "progress": False, "tensorboard": False},
    "checkpoint": {"every": 0, "save_final": False},
})
train(cfg)
rows = [r for r in read_metrics(run_dir) if "policy/loss" in r]
last = rows[-1]
print(json.dumps({
    "model": model, "arm": arm,
    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "step_s": last["time/step"], "rollout_s": last["time/rollout"],
    "publish_s": last["time/publish"],
    "update_s": last["time/step"] - last["time/rollout"] - last["time/publish"],
    "kl_ref": last["policy/kl_ref"],
}))
"""

RANDOM_1B = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "tie_word_embeddings": True,
}
"""A Llama of Llama-3.2-1B's shapes with SmolLM2's vocabulary (49152): ~1.1B parameters."""


def random_1b() -> str:
    """A local model directory of :data:`RANDOM_1B` with random weights (bf16 on disk), built
    once under the rlvr cache; SmolLM2's tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlvr.models import cache_dir, load_tokenizer

    out = cache_dir() / "models" / "bench-llama-1b-random"
    if (out / "config.json").is_file():
        return str(out)
    tok = load_tokenizer("smollm2-135m-instruct")
    config = AutoConfig.for_model(
        "llama",
        vocab_size=len(tok),
        max_position_embeddings=2048,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **RANDOM_1B,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    tmp.rename(out)
    return str(out)


def run_watched(code: str, limit_gib: float, *argv: object) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; stop it if its RSS passes ``limit_gib`` (returns
    ``{"fits": False, ...}`` then) rather than let the machine run out of memory."""
    import time

    proc = subprocess.Popen(
        [sys.executable, "-c", code, *map(str, argv)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = 0.0
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                rss = next(int(x.split()[1]) for x in f if x.startswith("VmRSS:")) / 2**20
        except (OSError, StopIteration):
            rss = 0.0
        peak = max(peak, rss)
        if rss > limit_gib:
            proc.kill()
            proc.wait()
            return {"fits": False, "killed_at_rss_gib": round(rss, 2), "limit_gib": limit_gib}
        time.sleep(0.2)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"the child failed:\n{err[-3000:]}")
    return {"fits": True, **json.loads(out.strip().splitlines()[-1])}


def lora(args: argparse.Namespace) -> None:
    """Peak RSS and step time of full fine-tuning vs LoRA rank 8 / 1 with beta > 0; writes
    memory-lora-cpu.json."""
    rows = []
    for name in args.models.split(","):
        model = random_1b() if name == "llama-1b-random" else name
        for arm in ("full", "8", "1"):
            with tempfile.TemporaryDirectory() as tmp:
                row = run_watched(CHILD_LORA, args.limit_gib, model, arm, tmp)
            row.update(model=name, arm=arm if arm == "full" else f"lora-r{arm}")
            rows.append(row)
            if row["fits"]:
                print(
                    f"{name:24s} {row['arm']:8s}: peak RSS {row['peak_rss_mib'] / 1024:6.2f} GiB, "
                    f"step {row['step_s']:6.1f} s (rollout {row['rollout_s']:.1f}, update "
                    f"{row['update_s']:.1f}, publish {row['publish_s']:.1f})",
                    flush=True,
                )
            else:
                print(
                    f"{name:24s} {row['arm']:8s}: did not fit in {args.limit_gib} GiB", flush=True
                )
    path = Path(__file__).parent / "results" / "memory-lora-cpu.json"
    done = {row["model"] for row in rows}
    if path.is_file():  # the other models' rows of an earlier run stay
        rows = [r for r in json.loads(path.read_text())["rows"] if r["model"] not in done] + rows
    result = {
        "benchmark": "full fine-tuning vs LoRA, two GRPO steps with beta = 0.04 (second timed)",
        "device": describe_device(),
        "settings": "2 prompts x G=8, 32 new tokens, fp32, micro-batch 16, all linear layers",
        "random_1b": RANDOM_1B,
        "rows": rows,
    }
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


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
    ap.add_argument(
        "--benchmark", choices=["group-size", "chunked-logprobs", "lora"], default="group-size"
    )
    ap.add_argument("--models", default="smollm2-135m-instruct,llama-1b-random")
    ap.add_argument("--limit-gib", type=float, default=20.0)
    ap.add_argument("--groups", default="8,32,128")
    ap.add_argument("--device", default="cpu", help="group-size: cpu, or cuda (peak GPU memory)")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--completion-len", type=int, default=512)
    ap.add_argument("--chunks", default="0,1024")
    ap.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args()
    benchmarks = {"group-size": group_size, "chunked-logprobs": chunked_logprobs, "lora": lora}
    benchmarks[args.benchmark](args)


if __name__ == "__main__":
    main()
