"""Everything that needs a GPU, in one command (``make gpu-check``), for the few minutes a GPU
may be lent: the tests marked ``cuda``, the roofline (``bench/roofline.py``: decode, prefill,
training and GRPO steps against the device's measured limits at 135M to 8B random-weight
shapes), the demo with ``train.device=cuda`` (the torch engine, and the vLLM engine where a CUDA
vLLM is installed), ``bench/grpo_step.py --device cuda`` against TRL on the same GPU at
SmolLM2-135M and at the Qwen2.5-0.5B shape, the memory benchmark, and one sharded learner
(``bench/sharding.py``) at the Qwen2.5-1.5B shape and at the 7B shape with CPU offload, its
peak against the memory plan's. Each step runs as a subprocess with a
time limit, its output kept; the figures go to ``bench/results/gpu-check-<device>.json`` with
the device named.

Without a CUDA device it says so, runs nothing and exits with status 2.

On a lent machine with no package registry: rlvr's missing dependencies travel as wheels and
``src`` on ``PYTHONPATH``. The SmolLM2 GGUF (94 MiB) is larger than one call can carry (64 MiB):
carry it in two halves in two calls on the same warm machine, copying the first half outside the
repository (``/root``) in the first call (a machine goes back 30 s after a call; on 2026-11-27
the second call found a fresh one). ``--only`` splits the steps between the calls.

The tests step collects only the test files that carry the ``cuda`` marker, so a GPU machine
needs rlvr's core dependencies and pytest, not every optional one the CPU suite imports. The
report is rewritten after each step: a check cut short still leaves the figures of the steps
that finished.

Usage: python bench/gpu_check.py
    [--only tests,roofline,demo,demo-vllm,grpo-step,grpo-step-0.5b,memory,sharding-1.5b,
            sharding-7b]
    [--demo-steps 10] [--timeout 900] [--trl-python PYTHON]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
STEPS = (
    "tests",
    "roofline",
    "demo",
    "demo-vllm",
    "grpo-step",
    "grpo-step-0.5b",
    "memory",
    "sharding-1.5b",
    "sharding-7b",
)
# the roofline on a GPU: decode at 135M to 8B, training at the shapes one GPU trains unsharded
ROOFLINE = [
    "--shapes", "smollm2-135m,qwen2.5-0.5b,qwen2.5-1.5b,qwen3-1.7b,qwen2.5-7b,qwen3-8b",
    "--train-shapes", "smollm2-135m,qwen2.5-0.5b,qwen2.5-1.5b,qwen3-1.7b",
    "--batches", "1,64,256", "--decode-tokens", "32", "--prefill", "16x1024",
    "--train", "16x256", "--grpo-shapes", "smollm2-135m,qwen2.5-0.5b,qwen2.5-1.5b",
    "--grpo", "8x8x64", "--sweep",
]  # fmt: skip
NO_GPU = 2


def cuda_device() -> str | None:
    """The name of CUDA device 0, or None (with the reason on stderr) where there is none."""
    try:
        import torch
    except ImportError:
        print("gpu-check: torch is not installed", file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        build = torch.version.cuda or "none (a CPU-only build of torch)"
        print(
            f"gpu-check: no CUDA GPU here (torch {torch.__version__}, its CUDA: {build}); "
            "nothing was run. Run it on a machine with an NVIDIA GPU and a CUDA build of torch.",
            file=sys.stderr,
        )
        return None
    return torch.cuda.get_device_name(0)


def slug(name: str) -> str:
    """A file-name form of a device name: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def cuda_test_files(tests: Path) -> list[str]:
    """The test files under ``tests`` that mark tests (or the whole module) ``cuda``."""
    return sorted(str(p) for p in tests.glob("test_*.py") if "pytest.mark.cuda" in p.read_text())


def run_step(name: str, argv: list[str], timeout: float, log_dir: Path) -> dict:
    """Run ``argv`` from the repository root; its status, seconds and the tail of its output."""
    start = time.perf_counter()
    log = log_dir / f"{name}.log"
    print(f"gpu-check: {name}: {' '.join(argv)}", file=sys.stderr, flush=True)
    try:
        done = subprocess.run(
            argv,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        output, status = done.stdout.decode(errors="replace"), done.returncode
    except subprocess.TimeoutExpired as err:
        output = (err.stdout or b"").decode(errors="replace")
        status = f"timed out after {timeout:.0f} s"
    log.write_text(output)
    seconds = round(time.perf_counter() - start, 1)
    print(f"gpu-check: {name}: {status} in {seconds} s (log: {log})", file=sys.stderr, flush=True)
    return {"command": argv, "status": status, "seconds": seconds, "tail": output[-2000:]}


def demo_figures(run_dir: Path) -> dict:
    """Held-out accuracy before/after and step times of a demo run directory."""
    figures: dict = {}
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        return figures
    steps = []
    for line in metrics.read_text().splitlines():
        row = json.loads(line)
        if "eval/greedy_accuracy" in row:
            key = "before" if row["step"] == 0 else "after"
            figures[f"greedy_accuracy_{key}"] = row["eval/greedy_accuracy"]
        if "time/step" in row:
            steps.append(row["time/step"])
    if steps:
        figures["steps"] = len(steps)
        figures["seconds_per_step_mean"] = round(sum(steps) / len(steps), 3)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(STEPS), help="comma-separated steps")
    parser.add_argument("--demo-steps", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per step")
    parser.add_argument("--results", default=str(BENCH / "results"))
    parser.add_argument(
        "--trl-python", default=None, help="the Python with TRL (default: grpo_step.py's own)"
    )
    args = parser.parse_args()
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(STEPS))
    if unknown:
        parser.error(f"unknown steps {unknown}; known: {', '.join(STEPS)}")
    device = cuda_device()
    if device is None:
        return NO_GPU
    out = Path(args.results)
    log_dir = out / f"gpu-check-{slug(device)}-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    rlvr = [python, "-m", "rlvr.cli"]
    demo = ["train", "configs/demo.yaml", "--overwrite", "--set", "train.device=cuda"]
    demo += ["--set", f"train.steps={args.demo_steps}", "--set", "logging.progress=false"]
    demo += ["--set", "checkpoint.every=0", "--set", "checkpoint.save_final=false"]
    runs = Path(tempfile.mkdtemp(prefix="rlvr-gpu-check-"))  # run directories: not figures
    steps: dict = {}
    report = {"device": f"cuda ({device})", "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    report["steps"] = steps
    path = out / f"gpu-check-{slug(device)}.json"

    def save() -> None:
        path.write_text(json.dumps(report, indent=2) + "\n")

    if "tests" in wanted:
        argv = [python, "-m", "pytest", "-m", "cuda", "-n", "0", "-p", "no:cacheprovider"]
        argv += cuda_test_files(ROOT / "tests")
        steps["tests"] = run_step("tests", argv, args.timeout, log_dir)
        save()
    if "roofline" in wanted:
        argv = [python, "bench/roofline.py", "--device", "cuda", *ROOFLINE]
        steps["roofline"] = run_step("roofline", argv, args.timeout, log_dir)
        result = BENCH / "results" / f"roofline-cuda-{slug(device)}.json"
        if result.is_file():
            steps["roofline"]["figures"] = json.loads(result.read_text())
        save()
    engines = {"demo": "torch", "demo-vllm": "vllm"}
    for name, engine in engines.items():
        if name not in wanted:
            continue
        if engine == "vllm" and importlib.util.find_spec("vllm") is None:
            steps[name] = {"status": "skipped: vLLM is not installed"}
            continue
        run_dir = runs / name
        argv = [*rlvr, *demo, "--set", f"rollout.engine={engine}"]
        argv += ["--set", f"logging.run_dir={run_dir}"]
        steps[name] = run_step(name, argv, args.timeout, log_dir)
        steps[name]["figures"] = demo_figures(run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)
        save()
    benches = {"grpo-step": ("grpo_step.py", "grpo-step-cuda.json", [])}
    benches["grpo-step-0.5b"] = (
        "grpo_step.py", "grpo-step-cuda-qwen2.5-0.5b.json", ["--model", "random:qwen2.5-0.5b"]
    )  # fmt: skip
    benches["memory"] = ("memory.py", "memory-cuda.json", [])
    # one sharded learner (FSDP2 over one GPU) against the memory plan: 1.5B whole, 7B offloaded
    for size, extra in (("1.5b", []), ("7b", ["--offload"])):
        benches[f"sharding-{size}"] = (
            "sharding.py",
            f"sharding-cuda-qwen2.5-{size}.json",
            ["--model", f"random:qwen2.5-{size}", "--worlds", "1", "--plan", *extra],
        )
    for name, (script, figures, extra) in benches.items():
        if name not in wanted:
            continue
        argv = [python, f"bench/{script}", "--device", "cuda", *extra]
        if name.startswith("grpo-step") and args.trl_python:
            argv += ["--trl-python", args.trl_python]
        steps[name] = run_step(name, argv, args.timeout, log_dir)
        result = BENCH / "results" / figures
        if result.is_file():
            steps[name]["figures"] = json.loads(result.read_text())
        save()
    save()
    failed = [n for n, s in steps.items() if s["status"] != 0 and "skipped" not in str(s["status"])]
    print(f"gpu-check: figures in {path}; failed: {', '.join(failed) or 'none'}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
