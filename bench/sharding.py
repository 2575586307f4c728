"""Sharded learners' memory: per-rank memory and step time of FSDP2 learners (``train.sharding:
fsdp``) at world sizes 1, 2 and 4, at a random-weight shape that makes memory visible (default
``random:qwen2.5-0.5b``, 494M parameters, fp32 weights and AdamW moments: 7.9 GB of states in
one process), with gradient checkpointing and the log-softmax in chunks so that the states, not
the activations, dominate.

Each world size runs in its own processes (``torch.multiprocessing.spawn``, a gloo group on
this machine), each rank built as a Ray learner actor builds itself (policy loaded, sharded per
decoder layer, AdamW over its shards), then two SFT updates on the same batch of the arithmetic
task's demonstrations (nothing is sampled: the learner alone is measured). Per rank it records:

* ``states_bytes``: the bytes of this rank's parameter shards, gradient shards and AdamW
  moments after the updates, counted from the tensors themselves (the 1/N claim);
* ``peak_rss_bytes``: the process's peak resident memory (``ru_maxrss``), which includes
  loading the whole model once before sharding it;
* ``train_peak_rss_bytes``: the peak RSS sampled every 10 ms during the two updates;
* ``step_s``: the second update's seconds (the first allocates the moments).

With ``--plan`` each row also carries the memory plan's estimate of one learner's process for
the same config (:func:`rlvr.trainer.plan.plan`, ``learner_peak``) and its ratio to the
measured peak of the rank that peaked highest. The ranks share this
machine's cores (``torch`` threads = cores / world size, at least 1), so step times at larger
world sizes measure contention, not a cluster. Writes bench/results/sharding-cpu.json.

On a GPU (``--device cuda``, ``make gpu-check``) each rank takes one GPU (NCCL) and its
figure is the peak GPU memory torch allocated, against the plan's; ``--offload`` keeps the
shards and AdamW moments in CPU memory. Writes bench/results/sharding-cuda-<shape>.json.

Usage: python bench/sharding.py [--model random:qwen2.5-0.5b] [--worlds 1,2,4] [--plan]
           [--device cuda] [--offload]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import socket
import tempfile
import threading
import time
from pathlib import Path

import psutil
import torch
import torch.multiprocessing as mp

from rlvr.config import build_config

BENCH = Path(__file__).parent


def config(
    model: str, world: int, run_dir: Path, device: str = "cpu", offload: bool = False
) -> dict:
    """SFT on the arithmetic task's worked solutions, sharded over ``world`` learners (0: one
    unsharded process, which makes the batch)."""
    cfg = {
        "model": {"name": model},
        "task": {"name": "arithmetic", "level": 2},
        "algorithm": {"preset": "sft"},
        "rollout": {"prompts_per_step": 8, "max_new_tokens": 96},
        "train": {
            "steps": 2,
            "micro_batch_size": 2,
            "autocast": "fp32",
            "sharding": "fsdp",
            "gradient_checkpointing": True,  # states, not activations, dominate
            "logprob_chunk_tokens": 512,
            "lr": 1e-5,
            "threads": max(1, (os.cpu_count() or 1) // max(world, 1)),  # the cores shared
            "device": device,
            "shard_offload": offload,
        },
        "distributed": {"backend": "ray", "learners": world},
        "eval": {"before": False, "after": False},
        "logging": {"run_dir": str(run_dir), "progress": False, "tensorboard": False},
    }
    if not world:
        cfg["train"].update(sharding="none", shard_offload=False, device="cpu")
        cfg["distributed"] = {"backend": "local"}
    return cfg


class PeakRss:
    """The peak resident memory of this process while the block runs, sampled every 10 ms."""

    def __enter__(self) -> PeakRss:
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        process = psutil.Process()
        while not self._stop.is_set():
            self.peak = max(self.peak, process.memory_info().rss)
            time.sleep(0.01)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def states_bytes(learner) -> int:
    """This rank's bytes of parameter shards, gradient shards and optimizer states."""
    from rlvr.distributed.sharding import is_sharded

    def local(t: torch.Tensor) -> torch.Tensor:
        return t.to_local() if is_sharded(t) else t

    total = 0
    for p in learner.policy.parameters():
        total += local(p).numel() * local(p).element_size()
        if p.grad is not None:
            total += local(p.grad).numel() * local(p.grad).element_size()
    for state in learner.optimizer.state.values():
        for value in state.values():
            if torch.is_tensor(value):
                total += local(value).numel() * local(value).element_size()
    return total


def rank_main(rank: int, world: int, port: int, cfg_data: dict, batch: Path, out: Path) -> None:
    """One learner rank, built as torchrun's and Ray's are (:class:`LearnerWorker`: the policy
    loaded, sharded, AdamW over the shards, the published snapshot), then two updates."""
    import torch.distributed as dist

    from rlvr.trainer.backends.ray_actors import LearnerWorker

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    worker = LearnerWorker(cfg_data, rank, world)
    worker.setup(None, 600)
    learner = worker.learner
    loaded = psutil.Process().memory_info().rss
    data = pickle.loads(batch.read_bytes())
    seconds = []
    with PeakRss() as watch:
        for _ in range(2):
            start = time.perf_counter()
            learner.update(data)
            seconds.append(time.perf_counter() - start)
    row = {
        "rank": rank,
        "cuda_peak_allocated_bytes": cuda_peak(),
        "states_bytes": states_bytes(learner),
        "rss_after_setup_bytes": loaded,
        "train_peak_rss_bytes": watch.peak,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "step_s": seconds[1],
        "first_step_s": seconds[0],
    }
    rows: list = [None] * world
    dist.all_gather_object(rows, row)
    if rank == 0:
        out.write_text(json.dumps(rows))
    dist.destroy_process_group()


def cuda_peak() -> int | None:
    """The peak bytes torch allocated on this rank's GPU (None on a CPU)."""
    return torch.cuda.max_memory_allocated() if torch.cuda.is_initialized() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="random:qwen2.5-0.5b")
    parser.add_argument("--worlds", default="1,2,4")
    parser.add_argument("--plan", action="store_true", help="add the memory plan's estimates")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--offload", action="store_true", help="train.shard_offload (CUDA)")
    parser.add_argument("--out", default=None, help="default: bench/results/sharding-DEVICE.json")
    args = parser.parse_args()
    name = "sharding-cpu.json"
    if args.device == "cuda":
        name = f"sharding-cuda-{args.model.removeprefix('random:')}.json"
    args.out = args.out or str(BENCH / "results" / name)
    from rlvr.models import resolve
    from rlvr.rollout import describe_device
    from rlvr.trainer.backends import build_parts

    resolve(args.model)  # built (random weights) and cached once, before the ranks start
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        # the demonstrations' token ids: a random shape's tokenizer is the tiny model's
        batch_model = "tiny-random-llama" if args.model.startswith("random:") else args.model
        parts = build_parts(build_config(config(batch_model, 0, folder / "batch")))
        data, _ = parts.collector.collect(1)
        del parts
        batch = folder / "batch.pkl"
        batch.write_bytes(pickle.dumps(data))
        for world in [int(w) for w in args.worlds.split(",")]:
            cfg = config(args.model, world, folder / f"w{world}", args.device, args.offload)
            out = folder / f"w{world}.json"
            start = time.perf_counter()
            mp.spawn(rank_main, args=(world, free_port(), cfg, batch, out), nprocs=world)
            ranks = json.loads(out.read_text())
            result = {"world": world, "wall_s": time.perf_counter() - start, "ranks": ranks}
            if args.plan:
                from rlvr.trainer.plan import plan

                estimate = plan(build_config(cfg), devices=world).learner_peak
                key = "peak_rss_bytes" if args.device == "cpu" else "cuda_peak_allocated_bytes"
                measured = max(r[key] for r in ranks)
                result["plan_peak_bytes"] = estimate
                result["plan_over_measured"] = estimate / measured
            states = max(r["states_bytes"] for r in ranks)
            print(
                f"world {world}: states/rank {states / 2**30:.2f} GiB, peak RSS/rank "
                f"{max(r['peak_rss_bytes'] for r in ranks) / 2**30:.2f} GiB, step "
                f"{max(r['step_s'] for r in ranks):.1f} s",
                flush=True,
            )
            results.append(result)
    base = max(r["states_bytes"] for r in results[0]["ranks"]) if results else 0
    for result in results:
        states = max(r["states_bytes"] for r in result["ranks"])
        result["states_times_world_over_one"] = states * result["world"] / base
    record = {
        "device": describe_device(args.device),
        "torch": torch.__version__,
        "model": args.model,
        "settings": config(args.model, 1, Path("RUN"), args.device, args.offload),
        "batch": {"samples": len(data), "tokens": int(sum(len(c) for c in data.completion_ids))},
        "results": results,
    }
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
