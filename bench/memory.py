"""Peak memory of one GRPO step as the group size G grows (bounded by micro-batching).

Each G runs in a fresh subprocess: rollout of ``prompts`` x G completions (decoded at most
``rollout.max_batch`` samples at a time) and one policy update over micro-batches of
``train.micro_batch_size``, with a dense reward (minus the mean token entropy) so that every
G takes a real optimizer step. Reports the process's peak RSS (ru_maxrss) per G and the step
time. The floor (fp32 policy, bf16 engine copy, AdamW moments, gradients: ~2 GB for
SmolLM2-135M) does not depend on G.
Writes bench/results/memory-cpu.json.

Usage: python bench/memory.py [--groups 8,32,128] [--prompts 2] [--max-new-tokens 48]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from rlvr.rollout import describe_device

CHILD = r"""
import json, resource, sys, time
from rlvr.config import build_config
from rlvr.trainer import train
G, prompts, max_new, run_dir = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cfg = build_config({
    "model": {"name": "smollm2-135m-instruct"},
    "task": {"name": "arithmetic", "level": 3},
    "rollout": {"group_size": G, "prompts_per_step": prompts, "max_new_tokens": max_new,
                "max_batch": 64},
    "algorithm": {"preset": "grpo", "beta": 0.0},
    # a dense reward: every G trains (a 0/1 verifier leaves small groups all-equal, and a step
    # without gradients never allocates the optimizer state, which would flatter small G)
    "reward": {"terms": [{"name": "negative_entropy"}]},
    "train": {"steps": 1, "micro_batch_size": 16},
    "eval": {"before": False, "after": False},
    "logging": {"run_dir": run_dir, "progress": False, "tensorboard": False},
    "checkpoint": {"every": 0, "save_final": False},
})
t0 = time.perf_counter()
train(cfg)
seconds = time.perf_counter() - t0
peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"G": G, "peak_rss_mib": peak_mib, "seconds": seconds}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--groups", default="8,32,128")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    args = ap.parse_args()
    rows = []
    for g in [int(x) for x in args.groups.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    CHILD,
                    str(g),
                    str(args.prompts),
                    str(args.max_new_tokens),
                    tmp,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(
            f"G={g:4d}: peak RSS {row['peak_rss_mib']:7.0f} MiB, step {row['seconds']:.1f} s "
            f"({args.prompts * g} samples)"
        )
    result = {
        "benchmark": "peak memory of one GRPO step vs group size",
        "device": describe_device(),
        "model": "smollm2-135m-instruct",
        "prompts": args.prompts,
        "max_new_tokens": args.max_new_tokens,
        "rollout_max_batch": 64,
        "micro_batch_size": 16,
        "rows": rows,
        "ratio_peak_G_max_over_G_min": rows[-1]["peak_rss_mib"] / rows[0]["peak_rss_mib"],
    }
    path = Path(__file__).parent / "results" / "memory-cpu.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"peak RSS ratio G={rows[-1]['G']} / G={rows[0]['G']}: "
        f"{result['ratio_peak_G_max_over_G_min']:.2f}; wrote {path}"
    )


if __name__ == "__main__":
    main()
