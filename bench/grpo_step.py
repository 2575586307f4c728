"""One full GRPO step (generation + rewards + update): rlvr vs TRL's GRPOTrainer, one run.

Same model (SmolLM2-135M-Instruct by default, the converted safetensors directory both load; or
``--model random:<shape>``, a published shape with random weights, whose samples run to the
length limit on both sides: it rarely draws the stop token; both sides then reward 0, 1, 0, 1 in
turn, bench/alternating_reward.py, so that both do a whole update), same 8
prompts (arithmetic level 3, rlvr's default prompt template, the tokenizer's chat template),
G = 8, at most 64 new tokens, temperature 1.0, lr 1e-5, no KL term, same numeric verifier,
micro-batches of 16, each side at the precision measured fastest on this machine
(:mod:`rlvr.precision`: rlvr's config says ``auto``, TRL is given the training side's
choice; on CUDA, bf16 where the card supports it). TRL runs
in its own environment (bench/.venv-trl, made by `make bench`; TRL is not an rlvr dependency).
Seconds per step are the median over steps 2..N (step 1 includes warm-up).
Writes bench/results/grpo-step-<device>.json (``grpo-step-<device>-<shape>.json`` for a
random shape).

Usage: python bench/grpo_step.py [--steps 3] [--model random:qwen2.5-0.5b]
    [--trl-python bench/.venv-trl/bin/python]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

import torch

import rlvr.answers as answers
from rlvr.config import build_config
from rlvr.data import ArithmeticTask
from rlvr.devices import resolve_device
from rlvr.logging import read_metrics
from rlvr.models import resolve
from rlvr.precision import choose
from rlvr.rollout import describe_device
from rlvr.trainer import train

BENCH = Path(__file__).parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--G", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--trl-python", default=str(BENCH / ".venv-trl/bin/python"))
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (both sides)")
    ap.add_argument("--model", default="smollm2-135m-instruct", help="a model spec both load")
    args = ap.parse_args()

    device = resolve_device(args.device)
    # a random-weight shape's completions decode to nothing a verifier checks: both sides get
    # rewards 0, 1, 0, 1 (bench/alternating_reward.py), so both do a whole update
    random_model = args.model.startswith("random:")
    # each side at the precision measured fastest here (rlvr.precision): rlvr's config says
    # auto; TRL is given the training side's choice (it generates with the trained weights)
    choice = choose(device)
    dtype = "bf16" if choice.train == torch.bfloat16 else "fp32"
    task = ArithmeticTask(level=3)
    problems = [task.train_problem(i) for i in range(args.prompts)]
    settings = {
        "group_size": args.G,
        "max_new_tokens": args.max_new_tokens,
        "temperature": 1.0,
        "lr": 1e-5,
        "micro_batch_size": 16,
        "steps": args.steps,
        "dtype": dtype,
    }

    with tempfile.TemporaryDirectory() as tmp:
        job = {
            **settings,
            "model_dir": str(resolve(args.model)),
            "prompts": [p.prompt for p in problems],
            "answers": [p.answer for p in problems],
            "verifier_file": answers.__file__,
            "output_dir": f"{tmp}/trl",
            "device": str(device),
            "alternating": random_model,  # rewards 0, 1, 0, 1 on both sides: a whole update
        }
        Path(f"{tmp}/job.json").write_text(json.dumps(job))
        out = subprocess.run(
            [args.trl_python, str(BENCH / "trl_grpo_step.py"), f"{tmp}/job.json"],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise SystemExit(f"TRL run failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        trl_steps = json.loads(out.stdout.strip().splitlines()[-1])["step_seconds"]

        # rlvr: the same problems, in the same order, every step
        cfg = build_config(
            {
                "model": {"name": args.model},
                "task": {"name": "arithmetic", "level": 3},
                "rollout": {
                    "group_size": args.G,
                    "prompts_per_step": args.prompts,
                    "max_new_tokens": args.max_new_tokens,
                    "temperature": 1.0,
                },
                "algorithm": {"preset": "grpo", "kl": {"beta": 0.0}},
                **(
                    {"reward": {"function": "alternating_reward:alternating"}}
                    if random_model
                    else {}
                ),
                "train": {
                    "steps": args.steps,
                    "lr": 1e-5,
                    "micro_batch_size": 16,
                    "device": str(device),
                },
                "eval": {"before": False, "after": False},
                "logging": {"run_dir": f"{tmp}/rlvr", "progress": False, "tensorboard": False},
                "checkpoint": {"every": 0, "save_final": False},
            }
        )
        train(cfg)
        ours_steps = [r["time/step"] for r in read_metrics(Path(f"{tmp}/rlvr")) if "time/step" in r]

    trl_s = statistics.median(trl_steps[1:])
    ours_s = statistics.median(ours_steps[1:])
    result = {
        "benchmark": "one GRPO step (generation + rewards + update)",
        "device": describe_device(device),
        "model": args.model,
        "prompts": args.prompts,
        **settings,
        "baseline": {
            "name": "TRL 1.16 GRPOTrainer",
            "step_seconds": trl_steps,
            "median_seconds": trl_s,
        },
        "ours": {"name": "rlvr train", "step_seconds": ours_steps, "median_seconds": ours_s},
        "ratio": trl_s / ours_s,
        "precision": choice.describe(),
    }
    print(f"TRL GRPOTrainer: {trl_s:6.1f} s/step  (steps {[round(s, 1) for s in trl_steps]})")
    print(f"rlvr:            {ours_s:6.1f} s/step  (steps {[round(s, 1) for s in ours_steps]})")
    print(f"ratio: {result['ratio']:.2f}x")
    shape = args.model.removeprefix("random:") if args.model.startswith("random:") else ""
    path = BENCH / "results" / f"grpo-step-{device.type}{'-' + shape if shape else ''}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
