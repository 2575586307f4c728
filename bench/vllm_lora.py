"""How a LoRA policy's updates should reach vLLM: the adapter alone (a LoRA request per
version) or merged weights (``reload_weights`` of W + (alpha / r) B A), on this machine.

For each way, in one process, one engine after the other: SmolLM2-135M with a rank-``--rank``
adapter on all linear layers (random, non-zero B), fp32, vLLM ``enforce_eager``; ``--rounds``
rounds of (an update of the adapter, a publish, a rollout of ``--prompts`` x ``--n`` samples of
``--new-tokens`` tokens at temperature 1, seeded, no stop). Reports the median publish time,
rollout time and tokens/s, the bytes each publish moves, and the ratio merged / adapter of a
round's time (publish + rollout): rlvr.engines.VLLM_LORA_PUBLISH is set to the faster way.
Writes bench/results/vllm-lora-cpu.json.

Usage: python bench/vllm_lora.py [--rank 8] [--prompts 16] [--n 4] [--new-tokens 64]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path

import torch

from rlvr import adapters
from rlvr.models import load_model, load_tokenizer, quiet_transformers
from rlvr.rollout import SamplingParams, describe_device
from rlvr.rollout.streams import group_keys, stream_key
from rlvr.rollout.vllm_engine import VLLMEngine


def measure(way: str, args: argparse.Namespace) -> dict[str, float | str]:
    """Rounds of update, publish and rollout with ``lora_publish=way``."""
    policy = load_model("smollm2-135m-instruct")
    adapters.add_lora(policy, adapters.LoraSpec(rank=args.rank, base="smollm2-135m-instruct"))
    lora = list(adapters.adapter_parameters(policy).values())
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    engine = VLLMEngine(policy, tokenizer, torch.float32, kv_cache_gb=1.0, lora_publish=way)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(200, 40000, (48,), generator=g).tolist() for _ in range(args.prompts)]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens)
    publish, rollout, rates = [], [], []
    for r in range(args.rounds):
        with torch.no_grad():
            for p in lora:  # an update: every adapter tensor changes
                p.add_(torch.randn(p.shape, generator=g) * 1e-3)
        t0 = time.perf_counter()
        engine.update_weights(policy)
        t1 = time.perf_counter()
        keys = group_keys(stream_key(0, r), len(prompts), args.n)
        out = engine.generate(prompts, args.n, sampling, keys)
        t2 = time.perf_counter()
        publish.append(t1 - t0)
        rollout.append(t2 - t1)
        rates.append(sum(len(c) for c in out.completion_ids) / (t2 - t1))
    moved = sum(p.numel() * p.element_size() for p in lora)
    if way == "merged":
        moved = sum(t.numel() * t.element_size() for _, t in adapters.merged_state_dict(policy))
    engine.close()
    del engine, policy
    gc.collect()
    return {
        "way": way,
        "publish_s": statistics.median(publish[1:]),  # the first loads the base weights too
        "rollout_s": statistics.median(rollout[1:]),
        "tokens_per_s": statistics.median(rates[1:]),
        "publish_bytes": moved,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    quiet_transformers()
    rows = [measure(way, args) for way in ("adapter", "merged")]
    for row in rows:
        print(
            f"{row['way']:8s}: publish {row['publish_s']:.2f} s ({row['publish_bytes'] / 2**20:.1f}"
            f" MiB), rollout {row['rollout_s']:.2f} s ({row['tokens_per_s']:.0f} tokens/s)"
        )
    adapter, merged = rows
    round_adapter = adapter["publish_s"] + adapter["rollout_s"]
    round_merged = merged["publish_s"] + merged["rollout_s"]
    result = {
        "benchmark": "vLLM LoRA publish: adapter (LoRA request) vs merged weights",
        "device": describe_device(),
        "model": "smollm2-135m-instruct",
        "rank": args.rank,
        "samples": args.prompts * args.n,
        "new_tokens": args.new_tokens,
        "rows": rows,
        "round_time_ratio_merged_over_adapter": round_merged / round_adapter,
        "faster": "adapter" if round_adapter < round_merged else "merged",
    }
    print(
        f"a round (publish + rollout): adapter {round_adapter:.2f} s, merged {round_merged:.2f} s"
        f" -> {result['faster']} is faster ({result['round_time_ratio_merged_over_adapter']:.2f}x)"
    )
    path = Path(__file__).parent / "results" / "vllm-lora-cpu.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
