"""rlvr against the machine's limit, at the shapes users train: decode, prefill, training, and one
GRPO step, each as a fraction of what the hardware allows (a roofline, Williams et al. 2009).

The limits are measured here, not taken from a data sheet: the copy bandwidth (one large
tensor copied; bytes read + written per second) and the matmul peak (the fastest of a few
square matmuls in the bench's dtype). The models are published shapes with seeded random weights
(``random:<shape>``, :data:`rlvr.models.SHAPES`; no download), so the work is known: samples
run to the length limit (a random model rarely draws the stop token; the engine is told no
stop token at all).

- **decode**: rlvr's :class:`~rlvr.rollout.TorchEngine` sampling ``B`` rows. Tokens/s over the
  decode steps alone (a run of 1 + D tokens minus a run of 1: the prefill cancels). Limit per
  step: the larger of (weights + the KV cache read) / bandwidth and 2 x matmul parameters x B
  / peak.
- **prefill**: the model's forward over ``B x T`` prompt tokens, last position's logits only (as
  the engine does); FLOPs 2 x matmul parameters x tokens (the output layer's for the last
  position only) + causal attention, against the peak.
- **train**: :func:`rlvr.policy.completion_logprobs` forward and backward over ``B`` samples of
  ``T`` prompt + ``T`` completion tokens under bf16 autocast with fp32 weights (the learner's
  precision on a bf16 device); FLOPs 3x the forward's, against the peak (MFU).
- **grpo**: ``rlvr train`` (GRPO, ``--grpo-steps`` steps, median of steps 2..N) at group size
  G and completion length L, rewards alternating 0, 1 (bench/alternating_reward.py: every
  sample is trained; rewards all 0 would skip the update); its limit is the sum of the three limits above for its work (the
  generation's decode and prefill, the update's forward and backward).
  ``--sweep`` adds how a step's cost grows with G and with L at the first shape.

Each figure is written with its limit and the fraction ``measured / limit`` to
``bench/results/roofline-<device>.json`` (``cpu`` or ``cuda-<device name>``).

Usage: python bench/roofline.py [--device cpu] [--shapes smollm2-135m,qwen2.5-0.5b]
    [--batches 1,16,64] [--decode-tokens 32] [--grpo-shapes smollm2-135m] [--sweep]
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from rlvr.config import build_config
from rlvr.data import ArithmeticTask
from rlvr.devices import resolve_device
from rlvr.logging import read_metrics
from rlvr.models import byte_tokenizer, encode_prompt, random_model, shape_config
from rlvr.policy import completion_logprobs, make_batch
from rlvr.rollout import SamplingParams, TorchEngine, describe_device
from rlvr.trainer import train

BENCH = Path(__file__).parent
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_seconds(fn: Callable[[], object], device: torch.device, repeats: int = 3) -> float:
    """The fastest of ``repeats`` timed calls of ``fn`` after one untimed call."""
    fn()
    sync(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - start)
    return best


def copy_bandwidth(device: torch.device) -> float:
    """Bytes/s of a large device-to-device copy, counting bytes read and written."""
    n = (1 << 30) if device.type == "cuda" else (256 << 20)
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    seconds = best_seconds(lambda: dst.copy_(src), device, repeats=5)
    return 2 * n / seconds


def matmul_peak(device: torch.device, dtype: torch.dtype) -> float:
    """FLOP/s of the fastest square matmul in ``dtype`` among a few sizes (4096 and 8192 on a
    GPU; 1024 to 4096 on a CPU, where one size is not the best of all)."""
    best = 0.0
    for n in (4096, 8192) if device.type == "cuda" else (1024, 2048, 4096):
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        best = max(best, 2 * n**3 / best_seconds(lambda: a @ b, device, repeats=3))  # noqa: B023
    return best


def shape_facts(name: str, itemsize: int) -> dict[str, float]:
    """Counts a roofline needs: the parameters in matmuls (the output layer included, the input
    embedding, a table lookup, not), the bytes a decode step reads for the weights, and the KV
    cache bytes per token of context."""
    cfg = shape_config(name)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    embed = cfg.vocab_size * cfg.hidden_size
    total = sum(p.numel() for p in random_model(name, device="meta").parameters())
    matmul = total - (0 if cfg.tie_word_embeddings else embed)  # tied: the table is the head
    return {
        "parameters": total,
        "matmul_parameters": matmul,
        "weight_bytes_per_step": matmul * itemsize,
        "head_parameters": embed,  # the output layer: [vocab, hidden]
        "kv_bytes_per_token": 2
        * cfg.num_hidden_layers
        * cfg.num_key_value_heads
        * head_dim
        * itemsize,
        "layers": cfg.num_hidden_layers,
        "attention_width": cfg.num_attention_heads * head_dim,
    }


def attention_flops(facts: dict, rows: int, q_len: int, kv_len: int) -> float:
    """FLOPs of the score and value matmuls of ``rows`` causal sequences (q over kv, mean half)."""
    pairs = q_len * (kv_len - q_len + (q_len + 1) / 2)
    return 4 * facts["layers"] * facts["attention_width"] * pairs * rows


def decode_row(engine, facts, limits, batch: int, prompt: int, tokens: int, device) -> dict:
    """Decode tokens/s of ``batch`` rows against the roofline's limit."""
    prompts = [[(7 * i + j) % 250 + 3 for j in range(prompt)] for i in range(batch)]

    def run(n: int) -> float:
        params = SamplingParams(temperature=1.0, max_new_tokens=n, stop_token_ids=())
        return best_seconds(lambda: engine.generate(prompts, 1, params), device, 2)

    seconds = run(1 + tokens) - run(1)
    measured = batch * tokens / seconds
    context = prompt + 1 + tokens / 2
    read = facts["weight_bytes_per_step"] + facts["kv_bytes_per_token"] * context * batch
    flops = 2 * facts["matmul_parameters"] * batch + attention_flops(facts, batch, 1, int(context))
    step = max(read / limits["bandwidth"], flops / limits["peak"])
    limit = batch / step
    bound = "memory" if read / limits["bandwidth"] >= flops / limits["peak"] else "compute"
    return {
        "batch": batch,
        "tokens_per_s": measured,
        "limit_tokens_per_s": limit,
        "fraction": measured / limit,
        "bound": bound,
    }


def prefill_row(model, facts, limits, batch: int, length: int, device) -> dict:
    ids = torch.randint(3, 250, (batch, length), device=device)
    with torch.inference_mode():
        seconds = best_seconds(lambda: model(input_ids=ids, logits_to_keep=1), device)
    body = facts["matmul_parameters"] - facts["head_parameters"]  # the output layer: last only
    flops = 2 * body * batch * length + 2 * facts["head_parameters"] * batch
    flops += attention_flops(facts, batch, length, length)
    return {"batch": batch, "tokens": length, "seconds": seconds, **rated(flops, seconds, limits)}


def rated(flops: float, seconds: float, limits: dict) -> dict:
    achieved = flops / seconds
    return {
        "tflops": achieved / 1e12,
        "limit_seconds": flops / limits["peak"],
        "fraction": achieved / limits["peak"],
    }


def train_row(name: str, facts, limits, batch: int, length: int, device, seed: int) -> dict:
    """Forward + backward of the learner's log-probs: fp32 weights, bf16 autocast."""
    model = random_model(name, torch.float32, device, seed).train()
    prompts = [[(3 * i + j) % 250 + 3 for j in range(length)] for i in range(batch)]
    completions = [[(5 * i + j) % 250 + 3 for j in range(length)] for i in range(batch)]
    data = make_batch(prompts, completions, pad_id=0).to(device)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logp, _ = completion_logprobs(model, data)
        logp.sum().backward()
        model.zero_grad(set_to_none=True)

    seconds = best_seconds(step, device, repeats=2)
    tokens = batch * 2 * length
    flops = 3 * (
        2 * facts["matmul_parameters"] * tokens
        + attention_flops(facts, batch, 2 * length, 2 * length)
    )
    model.cpu()
    free(device)
    return {"batch": batch, "tokens": tokens, "seconds": seconds, **rated(flops, seconds, limits)}


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def grpo_row(
    shape: str,
    facts: dict,
    limits: dict,
    device: torch.device,
    prompts: int,
    group: int,
    length: int,
    steps: int,
) -> dict:
    """Seconds per ``rlvr train`` GRPO step (median of steps 2..N) and the step's limit."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = build_config(
            {
                "model": {"name": f"random:{shape}"},
                "task": {"name": "arithmetic", "level": 3},
                "rollout": {
                    "group_size": group,
                    "prompts_per_step": prompts,
                    "max_new_tokens": length,
                    "temperature": 1.0,
                    "max_batch": prompts * group,
                },
                "reward": {"function": "alternating_reward:alternating"},  # a whole update
                "algorithm": {"preset": "grpo", "kl": {"beta": 0.0}},
                "train": {
                    "steps": steps,
                    "lr": 1e-6,
                    "micro_batch_size": 16,
                    "device": str(device),
                },
                "eval": {"before": False, "after": False},
                "logging": {"run_dir": f"{tmp}/run", "progress": False, "tensorboard": False},
                "checkpoint": {"every": 0, "save_final": False},
            }
        )
        train(cfg)
        rows = [r for r in read_metrics(Path(f"{tmp}/run")) if "time/step" in r]
    free(device)
    seconds = statistics.median(r["time/step"] for r in rows[1:])
    samples = prompts * group
    task = ArithmeticTask(level=3)
    prompt_tokens = statistics.mean(
        len(encode_prompt(byte_tokenizer(), task.train_problem(i).prompt)) for i in range(prompts)
    )
    mean_len = statistics.mean(r.get("response/length_mean", length) for r in rows[1:])
    context = prompt_tokens + mean_len / 2
    read = facts["weight_bytes_per_step"] + facts["kv_bytes_per_token"] * context * samples
    decode = mean_len * max(
        read / limits["bandwidth"], 2 * facts["matmul_parameters"] * samples / limits["peak"]
    )
    prefill = 2 * facts["matmul_parameters"] * prompts * prompt_tokens / limits["peak"]
    # the least work: each prompt once (a group shares it), then every sample's completion
    tokens = prompts * prompt_tokens + samples * mean_len
    update = 3 * 2 * facts["matmul_parameters"] * tokens / limits["peak"]
    limit = decode + prefill + update
    return {
        "prompt_tokens": prompt_tokens,
        "G": group,
        "prompts": prompts,
        "max_new_tokens": length,
        "mean_completion_tokens": mean_len,
        "seconds": seconds,
        "limit_seconds": limit,
        "fraction": limit / seconds,
        "rollout_seconds": statistics.median(r.get("time/rollout", 0.0) for r in rows[1:]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--shapes", default="smollm2-135m,qwen2.5-0.5b")
    ap.add_argument("--batches", default="1,16,64", help="decode batch sizes")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--prefill", default="8x512", help="BATCHxTOKENS of the prefill row")
    ap.add_argument("--train", default="8x128", help="BATCHxTOKENS (prompt and completion each)")
    ap.add_argument("--train-shapes", default=None, help="shapes trained (default: --shapes)")
    ap.add_argument("--grpo-shapes", default="smollm2-135m")
    ap.add_argument("--grpo", default="8x8x64", help="PROMPTSxGxLENGTH of the GRPO step")
    ap.add_argument("--grpo-steps", type=int, default=3)
    ap.add_argument("--sweep", action="store_true", help="GRPO step vs G and vs L")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    device = resolve_device(args.device)
    dtype = DTYPES[args.dtype]
    shapes = [s for s in args.shapes.split(",") if s]
    trained = (
        shapes if args.train_shapes is None else [s for s in args.train_shapes.split(",") if s]
    )
    named = describe_device(device)
    limits = {"bandwidth": copy_bandwidth(device), "peak": matmul_peak(device, dtype)}
    print(
        f"{named}: copy {limits['bandwidth'] / 1e9:.1f} GB/s, {args.dtype} matmul "
        f"{limits['peak'] / 1e12:.2f} TFLOP/s",
        flush=True,
    )
    slug = (
        "cpu"
        if device.type == "cpu"
        else "cuda-"
        + re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(device).lower()).strip("-")
    )
    path = Path(args.out) if args.out else BENCH / "results" / f"roofline-{slug}.json"
    report = {
        "benchmark": "rlvr against the machine's roofline (bench/roofline.py)",
        "device": named,
        "dtype": args.dtype,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "limits": {
            "copy_bandwidth_gb_s": limits["bandwidth"] / 1e9,
            "matmul_peak_tflops": limits["peak"] / 1e12,
        },
        "settings": vars(args),
        "shapes": {},
    }

    def save() -> None:
        path.write_text(json.dumps(report, indent=2) + "\n")

    pb, pt = (int(x) for x in args.prefill.split("x"))
    tb, tt = (int(x) for x in args.train.split("x"))
    for shape in shapes:
        facts = shape_facts(shape, torch.finfo(dtype).bits // 8)
        entry = report["shapes"][shape] = {"parameters": facts["parameters"]}
        start = time.perf_counter()
        model = random_model(shape, dtype, device)
        engine = TorchEngine(model, pad_token_id=0, dtype=dtype, max_batch=4096)
        entry["build_seconds"] = time.perf_counter() - start
        entry["decode"] = []
        for batch in (int(b) for b in args.batches.split(",")):
            row = decode_row(
                engine, facts, limits, batch, args.prompt_tokens, args.decode_tokens, device
            )
            entry["decode"].append(row)
            print(
                f"{shape} decode B={batch}: {row['tokens_per_s']:.0f} tok/s, "
                f"{row['fraction']:.1%} of the {row['bound']} limit",
                flush=True,
            )
            save()
        entry["prefill"] = prefill_row(model, facts, limits, pb, pt, device)
        print(f"{shape} prefill: {entry['prefill']['fraction']:.1%} of peak", flush=True)
        del engine, model
        free(device)
        if shape in trained:
            entry["train"] = train_row(shape, facts, limits, tb, tt, device, seed=0)
            print(f"{shape} train: MFU {entry['train']['fraction']:.1%}", flush=True)
        save()
    prompts, group, length = (int(x) for x in args.grpo.split("x"))
    for i, shape in enumerate(s for s in args.grpo_shapes.split(",") if s):
        facts = shape_facts(shape, torch.finfo(dtype).bits // 8)
        entry = report["shapes"].setdefault(shape, {"parameters": facts["parameters"]})
        runs = [(group, length)]
        if args.sweep and i == 0:
            runs += [
                (group // 2, length),
                (group * 2, length),
                (group, length // 2),
                (group, length * 2),
            ]
        entry["grpo"] = []
        for g, n in runs:
            row = grpo_row(shape, facts, limits, device, prompts, g, n, args.grpo_steps)
            entry["grpo"].append(row)
            print(
                f"{shape} GRPO step G={g} L={n}: {row['seconds']:.2f} s, "
                f"{row['fraction']:.1%} of the limit",
                flush=True,
            )
            save()
    save()
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
