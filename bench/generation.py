"""Generation throughput: rlvr's TorchEngine and vLLM (rollout.engine: vllm) vs transformers'
``model.generate``, one run.

Same model (SmolLM2-135M-Instruct), same prompts, same batch (P prompts x n samples), same
sampling settings and dtype. Reports useful tokens/s (sampled tokens up to and including the
stop token; padding after a finished sample does not count) and the ratios to the baseline.
Each side runs once untimed (kernels and caches warm up; vLLM's engine start is not counted),
then the sides run alternately, ``--repeats`` times each, and each side's fastest run counts
(the machine may be shared: interleaving exposes all sides to the same load). vLLM runs
through rlvr's :class:`~rlvr.rollout.vllm_engine.VLLMEngine` (eager mode, as in training)
where it imports (``--no-vllm`` leaves it out). Writes
bench/results/generation-cpu-<dtype>.json.

Usage: python bench/generation.py [--prompts 8] [--n 8] [--max-new-tokens 64] [--dtype bf16]
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch

from rlvr.data import ArithmeticTask
from rlvr.devices import resolve_device
from rlvr.models import encode_prompt, load_model, load_tokenizer, stop_token_ids
from rlvr.rollout import SamplingParams, TorchEngine, describe_device
from rlvr.rollout.streams import group_keys, stream_key

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def useful_tokens(rows: torch.Tensor, stops: tuple[int, ...]) -> int:
    """Tokens of each generated row up to and including its first stop token."""
    total = 0
    for row in rows.tolist():
        end = next((i + 1 for i, t in enumerate(row) if t in stops), len(row))
        total += end
    return total


def timed(run) -> tuple[int, float]:
    """(tokens, seconds) of one call of ``run``."""
    t0 = time.perf_counter()
    tokens = run()
    return tokens, time.perf_counter() - t0


def fastest(runs: list[tuple[int, float]]) -> tuple[int, float]:
    """The run with the most tokens per second."""
    return max(runs, key=lambda r: r[0] / r[1])


def start_vllm(model: torch.nn.Module, tokenizer, dtype: torch.dtype):
    """rlvr's vLLM engine over a copy of ``model``, or None (with the reason) where vLLM does not
    import."""
    from rlvr.rollout.vllm_engine import VLLMEngine, VLLMUnavailable

    try:
        return VLLMEngine(copy.deepcopy(model), tokenizer, dtype, kv_cache_gb=1.0)
    except VLLMUnavailable as err:
        print(f"vLLM left out: {err}")
        return None


def vllm_version() -> str:
    import vllm

    return vllm.__version__


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    ap.add_argument(
        "--tag",
        default="",
        help="suffix of the result file, for figures from another machine "
        "(generation-cpu-<dtype>-<tag>.json)",
    )
    ap.add_argument(
        "--repeats", type=int, default=2, help="runs per side, alternating; best counts"
    )
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (every side)")
    ap.add_argument("--no-vllm", action="store_true", help="leave vLLM out")
    args = ap.parse_args()

    device = resolve_device(args.device)
    dtype = DTYPES[args.dtype]
    tok = load_tokenizer(args.model)
    model = load_model(args.model, dtype).to(device)
    task = ArithmeticTask(level=3)
    prompts = [encode_prompt(tok, task.train_problem(i).prompt) for i in range(args.prompts)]
    stops = stop_token_ids(tok)
    params = SamplingParams(
        args.temperature, max_new_tokens=args.max_new_tokens, stop_token_ids=stops
    )

    # baseline: transformers generate on the left-padded batch, each prompt repeated n times
    tok.padding_side = "left"
    enc = tok.pad({"input_ids": [p for p in prompts for _ in range(args.n)]}, return_tensors="pt")
    enc = enc.to(device)

    def baseline() -> int:
        with torch.inference_mode():
            out = model.generate(
                **enc,
                do_sample=True,
                temperature=args.temperature,
                top_p=1.0,
                top_k=0,
                max_new_tokens=args.max_new_tokens,
                eos_token_id=list(stops),
                pad_token_id=tok.pad_token_id,
            )
        return useful_tokens(out[:, enc["input_ids"].shape[1] :], stops)

    # the engine gets its own copy: it switches its model to its decode attention, which must
    # not leak into the baseline
    engine = TorchEngine(copy.deepcopy(model), tok.pad_token_id, dtype=dtype)

    def ours() -> int:
        rollout = engine.generate(
            prompts, args.n, params, group_keys(stream_key(0), len(prompts), args.n)
        )
        return sum(len(c) for c in rollout.completion_ids)

    sides = {"baseline": baseline, "ours": ours}
    names = {"baseline": "transformers generate", "ours": "rlvr TorchEngine"}
    vllm_engine = None if args.no_vllm else start_vllm(model, tok, dtype)
    if vllm_engine is not None:

        def with_vllm() -> int:
            rollout = vllm_engine.generate(
                prompts, args.n, params, group_keys(stream_key(0), len(prompts), args.n)
            )
            return sum(len(c) for c in rollout.completion_ids)

        sides["vllm"] = with_vllm
        names["vllm"] = f"vLLM {vllm_version()} (rlvr VLLMEngine, eager)"

    torch.manual_seed(0)
    for run in sides.values():  # warm-up, untimed
        run()
    runs: dict[str, list[tuple[int, float]]] = {side: [] for side in sides}
    for _ in range(args.repeats):
        for side, run in sides.items():
            runs[side].append(timed(run))
    result = {
        "benchmark": "generation",
        "device": describe_device(device),
        "model": args.model,
        "dtype": args.dtype,
        "prompts": args.prompts,
        "n": args.n,
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
    }
    for side in sides:
        tokens, seconds = fastest(runs[side])
        result[side] = {
            "name": names[side],
            "tokens": tokens,
            "seconds": seconds,
            "tokens_per_s": tokens / seconds,
            "runs_tokens_per_s": [t / s for t, s in runs[side]],
        }
        print(
            f"{names[side]:45s} {tokens / seconds:8.1f} useful tokens/s ({tokens} in {seconds:.1f} s)"
        )
    base = result["baseline"]["tokens_per_s"]
    result["ratio"] = result["ours"]["tokens_per_s"] / base
    print(f"ratio rlvr / generate: {result['ratio']:.2f}x")
    if "vllm" in result:
        result["vllm_ratio"] = result["vllm"]["tokens_per_s"] / base
        print(f"ratio vLLM / generate: {result['vllm_ratio']:.2f}x")
    suffix = f"-{args.tag}" if args.tag else ""
    name = f"generation-{device.type}-{args.dtype}{suffix}.json"
    path = Path(__file__).parent / "results" / name
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
