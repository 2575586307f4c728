"""Scaling out: the demo's GRPO step in one process vs on Ray, one run each, side by side.

Runs (same config as configs/demo.yaml, a few steps, evaluation off): ``local``; Ray with 1 and
2 rollout workers and 1 learner, synchronous; Ray with 2 workers and ``max_staleness: 1`` (the
next batch sampled while the learner trains); ``local`` with ``max_staleness: 1`` too (one
process samples ahead in turn: the same batches, no overlap). Steps/s and sampled tokens/s are
over steps 2..N (step 1 includes warm-up; Ray's start-up, measured apart, is excluded), and
each is given as a ratio to ``local``. With ``--device cuda`` the learners and workers reserve a
GPU each (``gpus_per_worker``). Writes bench/results/scaling-{device}.json.

Usage: python bench/scaling.py [--steps 5] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from rlvr.config import build_config
from rlvr.devices import resolve_device
from rlvr.logging import read_metrics
from rlvr.rollout import describe_device
from rlvr.trainer import train

BENCH = Path(__file__).parent
RUNS = {
    "local": {},
    "ray, 1 worker": {"distributed": {"backend": "ray", "rollout_workers": 1}},
    "ray, 2 workers": {"distributed": {"backend": "ray", "rollout_workers": 2}},
    "ray, 2 workers, max_staleness 1": {
        "distributed": {"backend": "ray", "rollout_workers": 2},
        "rollout": {"max_staleness": 1},
    },
    "local, max_staleness 1": {"rollout": {"max_staleness": 1}},
}


def measure(base: dict, change: dict, run_dir: Path) -> dict[str, float]:
    """Run ``base`` with ``change``; steps/s and tokens/s over steps 2..N, and wall time."""
    cfg = json.loads(json.dumps(base))
    for section, values in change.items():
        cfg.setdefault(section, {}).update(values)
    cfg["logging"] = {"run_dir": str(run_dir), "progress": False, "tensorboard": False}
    start = time.perf_counter()
    train(build_config(cfg))
    wall = time.perf_counter() - start
    steps = [r for r in read_metrics(run_dir) if "policy/loss" in r]
    rows = steps[1:]
    samples = cfg["rollout"]["group_size"] * cfg["rollout"]["prompts_per_step"]
    seconds = [r["time/step"] for r in rows]
    tokens = [r["response/length_mean"] * samples for r in rows]
    return {
        "seconds_per_step_median": statistics.median(seconds),
        "steps_per_s": len(seconds) / sum(seconds),
        "sampled_tokens_per_s": sum(tokens) / sum(seconds),
        "wall_seconds": wall,
        "start_up_seconds": wall - sum(r["time/step"] for r in steps),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    args = ap.parse_args()
    device = resolve_device(args.device)
    base = yaml.safe_load((BENCH.parent / "configs" / "demo.yaml").read_text())
    # the learner's threads: both cores (as in configs/ray_local.yaml; one process uses them too)
    base["train"].update({"steps": args.steps, "device": str(device), "threads": 2})
    base["eval"] = {"before": False, "after": False}
    base["checkpoint"] = {"every": 0, "save_final": False}
    ray_sizes = {"cpus_per_worker": 0.5}
    if device.type == "cuda":
        ray_sizes = {"cpus_per_worker": 1, "gpus_per_worker": 0.3}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, change) in enumerate(RUNS.items()):
            change = json.loads(json.dumps(change))
            if "distributed" in change:
                change["distributed"].update(ray_sizes)
            results[name] = measure(base, change, Path(tmp) / f"run{i}")
            print(name, {k: round(v, 3) for k, v in results[name].items()}, flush=True)
    local = results["local"]
    for r in results.values():
        r["steps_per_s_vs_local"] = r["steps_per_s"] / local["steps_per_s"]
        r["tokens_per_s_vs_local"] = r["sampled_tokens_per_s"] / local["sampled_tokens_per_s"]
    record = {
        "device": describe_device(device),
        "settings": {"config": "configs/demo.yaml", "steps": args.steps, **ray_sizes},
        "results": results,
    }
    out = BENCH / "results" / f"scaling-{device.type}.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
