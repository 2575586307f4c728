"""The README's demo numbers, recorded: ``make demo``'s job (``configs/demo.yaml``, SmolLM2-135M,
GRPO on arithmetic) run for several seeds on this machine, one after the other, each in a fresh
process exactly as ``make demo`` runs it (``rlvr train configs/demo.yaml``, evaluations
included), so the wall time is what a user waits once the install is done.

Writes ``bench/results/demo-<cpu>.json``: per seed the wall time, the held-out greedy and sampled
accuracy and mean length before and after training, what ``auto`` precision chose; their spread
over the seeds (min, mean, max); the machine (CPU model, its bf16 flags, threads), torch and the
commit. The README's demo table and its header's times quote this file
(``tests/test_docs.py::test_the_readme_quotes_the_recorded_demo`` checks it).

``--repeat`` runs the first seed a second time and records whether every logged value that does
not measure time (rewards, losses, gradient norms, evaluations) came out identical: the
run-to-run reproducibility a user can expect on this machine.

``--keep DIR`` keeps the runs' directories (``DIR/seed<S>``) for ``rlvr compare`` and ``rlvr
report``; ``--config`` records another config (e.g. an earlier demo's, to compare with).

Usage: python bench/demo.py [--seeds 1 2 3] [--repeat] [--keep DIR] [--config FILE]
       [--out bench/results/demo-<cpu>.json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from rlvr.rollout import describe_device

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
CONFIG = ROOT / "configs" / "demo.yaml"
EVAL_KEYS = ("eval/greedy_accuracy", "eval/sampled_accuracy", "eval/greedy_length_mean")


def commit() -> str:
    """The checked-out commit (with ``+dirty`` when the tree has changes), read before the runs."""
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return head + ("+dirty" if dirty else "")


def cpu_slug(device: str) -> str:
    """``cpu (AMD EPYC, 2 threads, avx512_bf16)`` -> ``amd-epyc-bf16``: the results file's name,
    one per kind of machine (the same CPU model with and without bf16 flags differs)."""
    model = device.split("(", 1)[1].split(",", 1)[0]
    slug = re.sub(r"[^a-z0-9]+", "-", re.sub(r"\(r\)|\(tm\)|processor|cpu", "", model.lower()))
    bf16 = "nobf16" if "no bf16 flags" in device else "bf16"
    return f"{slug.strip('-')}-{bf16}"


def logged_values(run_dir: Path) -> list[dict]:
    """The run's metrics rows without the values that measure the machine (seconds, rates)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [
        {k: v for k, v in row.items() if not (k.startswith("time/") or "per_s" in k)}
        for row in rows
    ]


def one_seed(seed: int, run_dir: Path, config: Path = CONFIG) -> dict:
    """``rlvr train configs/demo.yaml`` (or ``config``) with ``train.seed`` = ``seed``: wall time
    and the held-out evaluations before (step 0) and after (the last step)."""
    argv = [sys.executable, "-m", "rlvr.cli", "train", str(config)]
    for key, value in {
        "train.seed": seed,
        "logging.run_dir": run_dir,
        "logging.progress": "false",
    }.items():
        argv += ["--set", f"{key}={value}"]
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/greedy_accuracy" in r]
    before, after = evals[0], evals[-1]
    precision = json.loads((run_dir / "precision.json").read_text())
    return {
        "seed": seed,
        "wall_seconds": round(wall, 1),
        "steps": max(r["step"] for r in rows),
        "before": {k: before[k] for k in EVAL_KEYS if k in before},
        "after": {k: after[k] for k in EVAL_KEYS if k in after},
        "precision": {k: precision[k] for k in ("rollout.dtype", "train.autocast", "source")},
    }


def spread(values: list[float]) -> dict:
    return {"min": min(values), "mean": statistics.fmean(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--repeat", action="store_true", help="run the first seed twice")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs under this dir")
    parser.add_argument("--config", type=Path, default=CONFIG)
    args = parser.parse_args()
    config = args.config.resolve()
    device = describe_device("cpu")
    record = {
        "benchmark": "demo",
        "device": device,
        "config": str(config.relative_to(ROOT)) if config.is_relative_to(ROOT) else str(config),
        "torch": torch.__version__,
        "commit": commit(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="rlvr-demo-") as scratch:
        tmp = args.keep or scratch
        for seed in args.seeds:
            run = one_seed(seed, Path(tmp) / f"seed{seed}", config)
            record["runs"].append(run)
            print(json.dumps(run), flush=True)
        if args.repeat:
            seed = args.seeds[0]
            again = one_seed(seed, Path(tmp) / f"seed{seed}-again", config)
            first, second = (
                logged_values(Path(tmp) / d) for d in (f"seed{seed}", f"seed{seed}-again")
            )
            differing = sorted(
                {k for a, b in zip(first, second, strict=False) for k in a if a.get(k) != b.get(k)}
            )
            record["repeat"] = {
                "seed": seed,
                "run": again,
                "identical": first == second,
                "differing_keys": differing,
            }
            print(json.dumps(record["repeat"]), flush=True)
    runs = record["runs"]
    record["spread"] = {
        "wall_minutes": spread([r["wall_seconds"] / 60 for r in runs]),
        **{
            f"{when}/{key}": spread([r[when][key] for r in runs])
            for when in ("before", "after")
            for key in EVAL_KEYS
            if all(key in r[when] for r in runs)
        },
    }
    out = args.out or BENCH / "results" / f"demo-{cpu_slug(device)}.json"
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
