"""The memory plan (``rlvr plan``, :mod:`rlvr.trainer.plan`) against measured peaks, for the
tiny model and SmolLM2-135M (its real weights, and its shape with random weights, whose
completions run to ``max_new_tokens``: the case the plan is made for).

Each case is ``rlvr train`` in a fresh process (2 steps, no evaluation) whose peak RSS is read
from ``wait4``'s ``ru_maxrss`` (the process and everything it waited for); the plan is computed
here for the same config, at the config's limits (completions of ``max_new_tokens``) and at the
lengths the run produced (``max_new_tokens`` set to the steps' largest mean completion length,
``response/length_mean``: the training micro-batches pack completions back to back, so their
mean, not the longest, sizes the activations). A real model stops early, so its peak is below
the first estimate; the second is the plan's accuracy. The random-weight models (whose answers
no verifier rewards) are rewarded 0, 1, 0, 1 in turn (bench/alternating_reward.py), so that
every step trains. Writes bench/results/plan-cpu.json.

Usage: python bench/plan_check.py [--cases tiny,smollm2,smollm2-random,smollm2-lora]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

from rlvr.config import build_config
from rlvr.logging import read_metrics

BENCH = Path(__file__).parent
ROOT = BENCH.parent


def demo(model: str, **train: object) -> dict:
    """The demo's config (configs/demo.yaml) on ``model``: 2 steps, no evaluation, no
    checkpoint, no progress bar."""
    cfg = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    cfg["model"] = {"name": model}
    cfg["train"] = {**cfg.get("train", {}), "steps": 2, **train}
    cfg["eval"] = {"before": False, "after": False}
    cfg["checkpoint"] = {"every": 0, "save_final": False}
    cfg.setdefault("logging", {}).update(progress=False, tensorboard=False)
    return cfg


def cases() -> dict[str, dict]:
    alternating = {"function": "alternating_reward:alternating"}  # every step trains
    tiny, random = demo("tiny-random-llama"), demo("random:smollm2-135m")
    tiny["reward"] = random["reward"] = alternating
    lora = demo("smollm2-135m-instruct", autocast="fp32")
    lora["model"]["lora"] = {"rank": 8, "alpha": 16, "target_modules": "all-linear"}
    lora["algorithm"] = {**lora.get("algorithm", {}), "kl": {"beta": 0.04}}
    lora["rollout"] = {**lora.get("rollout", {}), "dtype": "fp32", "max_new_tokens": 32}
    return {
        "tiny": tiny,
        "smollm2": demo("smollm2-135m-instruct"),
        "smollm2-random": random,
        "smollm2-lora": lora,
    }


def run(cfg: dict, folder: Path) -> tuple[int, float]:
    """``rlvr train`` of ``cfg`` in a fresh process: its peak RSS in bytes and seconds."""
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    start = time.perf_counter()
    path_env = os.pathsep.join(p for p in (str(BENCH), os.environ.get("PYTHONPATH")) if p)
    command = [str(Path(sys.executable).with_name("rlvr")), "train", str(path)]
    child = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": path_env})
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"rlvr train failed ({child.returncode}) for {path}")
    return usage.ru_maxrss * 1024, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(cases()))
    parser.add_argument("--out", default=str(BENCH / "results" / "plan-cpu.json"))
    args = parser.parse_args()
    from rlvr.rollout import describe_device
    from rlvr.trainer.plan import plan

    results = []
    for name in args.cases.split(","):
        cfg = cases()[name]
        with tempfile.TemporaryDirectory() as tmp:
            cfg["logging"]["run_dir"] = str(Path(tmp) / "run")
            peak, seconds = run(cfg, Path(tmp))
            rows = read_metrics(Path(tmp) / "run")
        steps = [r for r in rows if "response/length_mean" in r]
        length = math.ceil(max(r["response/length_mean"] for r in steps))
        trained = min(r.get("policy/trained_samples_frac", 0.0) for r in steps)
        at_limits = plan(build_config(cfg)).peak
        produced = copy.deepcopy(cfg)
        produced["rollout"]["max_new_tokens"] = max(length, 1)
        at_lengths = plan(build_config(produced)).peak
        result = {
            "case": name,
            "model": cfg["model"]["name"],
            "measured_peak_rss_bytes": peak,
            "plan_at_limits_bytes": at_limits,
            "plan_at_limits_over_measured": at_limits / peak,
            "max_new_tokens": build_config(cfg).rollout.max_new_tokens,
            "mean_completion_length": length,
            "trained_samples_frac_min": trained,
            "plan_at_lengths_bytes": at_lengths,
            "plan_at_lengths_over_measured": at_lengths / peak,
            "seconds": seconds,
        }
        print(
            f"{name}: measured {peak / 2**30:.2f} GiB, plan {at_limits / 2**30:.2f} GiB "
            f"({at_limits / peak:.2f}), at the produced lengths ({length} tokens) "
            f"{at_lengths / 2**30:.2f} GiB ({at_lengths / peak:.2f})",
            flush=True,
        )
        results.append(result)
    record = {
        "device": describe_device("cpu"),
        "torch": torch.__version__,
        "settings": {name: cases()[name] for name in args.cases.split(",")},
        "results": results,
    }
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
