"""The demo's step time with ``auto`` precision against explicit bf16 and explicit fp32, in one
run on this machine: the check that ``auto`` (measured, :mod:`rlvr.precision`) is within 10% of
the fastest explicit setting. The arms run fp32, auto, bf16; an arm that runs past
``--cap`` times the slowest finished arm's time is stopped and reported as a lower bound
(emulated bf16 can be twenty times slower than fp32: measuring it fully would take half an
hour and decide nothing).

Each arm trains the demo config (``configs/demo.yaml``: SmolLM2-135M, GRPO, 8 prompts x 8
samples) for ``--steps`` steps from the same seed in a fresh process, without evaluation or
checkpoints, with ``rollout.dtype`` and ``train.autocast`` both set to the arm's value; the
step time is the mean of ``time/step`` (rollout, reward and update). Writes
bench/results/precision-cpu.json, with what ``auto`` chose and why.

Usage: python bench/precision.py [--steps 2] [--cap 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlvr.rollout import describe_device

BENCH = Path(__file__).resolve().parent
ARMS = ("fp32", "auto", "bf16")


def arm(setting: str, steps: int, timeout: float | None) -> dict:
    """Train ``steps`` demo steps with both precision settings at ``setting``; past
    ``timeout`` seconds, stop and report the time it ran as a lower bound."""
    with tempfile.TemporaryDirectory(prefix="rlvr-precision-") as tmp:
        run_dir = Path(tmp) / "run"
        sets = {
            "rollout.dtype": setting,
            "train.autocast": setting,
            "train.steps": steps,
            "eval.before": "false",
            "eval.after": "false",
            "checkpoint.every": 0,
            "checkpoint.save_final": "false",
            "logging.run_dir": str(run_dir),
            "logging.progress": "false",
            "logging.tensorboard": "false",
        }
        argv = [sys.executable, "-m", "rlvr.cli", "train", str(BENCH.parent / "configs/demo.yaml")]
        for key, value in sets.items():
            argv += ["--set", f"{key}={value}"]
        start = time.perf_counter()
        try:
            subprocess.run(argv, check=True, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            ran = time.perf_counter() - start
            return {"stopped_after_seconds": ran, "mean_step_seconds_at_least": ran / steps}
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        times = [r["time/step"] for r in rows if "time/step" in r]
        chosen = run_dir / "precision.json"
        return {
            "step_seconds": times,
            "mean_step_seconds": sum(times) / len(times),
            "auto_chose": json.loads(chosen.read_text()) if chosen.is_file() else None,
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--cap", type=float, default=3.0, help="stop an arm past cap x the slowest")
    args = parser.parse_args()
    arms: dict[str, dict] = {}
    longest = 0.0
    for setting in ARMS:
        start = time.perf_counter()
        arms[setting] = arm(setting, args.steps, args.cap * longest if longest else None)
        longest = max(longest, time.perf_counter() - start)
        print(f"{setting}: {json.dumps(arms[setting])}", flush=True)

    def seconds(setting: str) -> float:
        found = arms[setting]
        return found.get("mean_step_seconds", found.get("mean_step_seconds_at_least", 0.0))

    fastest = min(("bf16", "fp32"), key=seconds)
    ratio = seconds("auto") / seconds(fastest)
    chose = arms["auto"]["auto_chose"]
    result = {
        "benchmark": "demo step time: precision auto vs explicit bf16 vs explicit fp32",
        "device": describe_device(),
        "config": "configs/demo.yaml",
        "steps_per_arm": args.steps,
        "arms": arms,
        "fastest_explicit": fastest,
        "auto_over_fastest": round(ratio, 3),
        "auto_within_10_percent": ratio <= 1.10,
        "auto_summary": chose["summary"] if chose else None,
    }
    out = BENCH / "results" / "precision-cpu.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "arms"}, indent=2))


if __name__ == "__main__":
    main()
