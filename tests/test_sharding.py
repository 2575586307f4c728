"""Fully sharded learners (FSDP2 over gloo, several processes on this machine): M ranks, each
holding 1/M of the policy, its gradients and its AdamW moments, train as one process does.

The batch is sampled once by one process; then the same three updates run in one unsharded
learner and in 2 sharded ranks (each taking a slice of every minibatch, padding micro-batches
where it has fewer rows), for each objective kind: policy gradient (GRPO), imitation (RFT) and
pairs (online DPO)."""

from __future__ import annotations

import pickle
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from test_trainer import tiny_config

from rlvr.config import build_config

STEPS = 3
PRESETS = ("grpo", "rft", "online_dpo")
COMPARED = (
    "policy/grad_norm",
    "policy/trained_samples_frac",
    "policy/params_changed_frac",
    "advantages/mean",
    "advantages/abs_mean",
    "advantages/max",
)
"""The metrics of the whole minibatch. The loss, entropy and ratio diagnostics are means of
micro-batch means, and a rank's micro-batches (of its slice of every minibatch) are another
partition of the rows than one process's; the gradient norm and the weights are compared."""


def _config(run_dir: Path, preset: str) -> dict:
    cfg = tiny_config(run_dir, steps=STEPS, algorithm={"preset": preset})
    cfg["algorithm"] = {
        "grpo": {"preset": "grpo", "kl": {"beta": 0.0}},
        "rft": {"preset": "rft", "advantage": {"threshold": 0.25}},  # some verified
        "online_dpo": {"preset": "online_dpo"},
    }[preset]
    cfg["rollout"].update(group_size=4, prompts_per_step=3, dtype="fp32")
    cfg["train"].update(micro_batch_size=2, lr=1e-3, warmup_steps=0, lr_schedule="constant")
    return cfg


def _train(cfg_data: dict, batch_path: Path, rank: int, world: int) -> dict:
    """Three updates of a fresh learner on the pickled batch: their metrics and the policy's
    final parameters (whole, on rank 0 of a sharded group)."""
    from rlvr.distributed.data_parallel import DataParallel
    from rlvr.distributed.sharding import full, shard
    from rlvr.models import load_tokenizer
    from rlvr.trainer.build import Dtypes, build_learner, load_policy, resolve_algorithm

    torch.set_num_threads(1)
    cfg = build_config(cfg_data)
    torch.manual_seed(cfg.train.seed)
    policy = load_policy(cfg)
    if world > 1:
        shard(policy)
    learner = build_learner(
        cfg,
        resolve_algorithm(cfg),
        policy,
        load_tokenizer(cfg.model.name).pad_token_id,
        torch.Generator().manual_seed(cfg.train.seed),
        Dtypes.of(cfg, policy),
    )
    if world > 1:
        learner.group = DataParallel(rank, world, sharded=True)
    data = pickle.loads(batch_path.read_bytes())
    metrics = [learner.update(data)[0] for _ in range(STEPS)]
    params = {name: full(p.detach()).clone() for name, p in policy.named_parameters()}
    return {"metrics": metrics, "params": params}


def _rank(rank: int, world: int, port: int, runs: dict, batch: Path, out: Path) -> None:
    """Rank ``rank`` of ``world``: each preset's run of ``runs`` in turn (rank 0 saves them)."""
    import torch.distributed as dist

    address = f"tcp://127.0.0.1:{port}"
    dist.init_process_group("gloo", init_method=address, rank=rank, world_size=world)
    try:
        results = {preset: _train(cfg, batch, rank, world) for preset, cfg in runs.items()}
        if rank == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> tuple[dict, dict]:
    """Each preset's three updates on one step's batch of the tiny model's samples: in one
    process, and in 2 sharded ranks (started once for all the presets)."""
    from rlvr.trainer.backends import build_parts

    folder = tmp_path_factory.mktemp("sharding")
    parts = build_parts(build_config(_config(folder / "sampler", "grpo")))
    data, _ = parts.collector.collect(1)
    batch = folder / "batch.pkl"
    batch.write_bytes(pickle.dumps(data))
    runs = {preset: _config(folder / preset, preset) for preset in PRESETS}
    one = {preset: _train(cfg, batch, 0, 1) for preset, cfg in runs.items()}
    out = folder / "sharded.pt"
    mp.spawn(_rank, args=(2, _free_port(), runs, batch, out), nprocs=2, join=True)
    return runs, {"one": one, "two": torch.load(out)}


@pytest.mark.parametrize("preset", PRESETS)
def test_two_sharded_ranks_train_as_one_process(preset, sharded):
    runs, results = sharded
    one, two = results["one"][preset], results["two"][preset]
    cfg_data = runs[preset]
    for mine, theirs in zip(one["metrics"], two["metrics"], strict=True):
        assert mine.keys() == theirs.keys()
        for key in [k for k in COMPARED if k in mine] + [k for k in mine if "preference/" in k]:
            assert theirs[key] == pytest.approx(mine[key], rel=1e-6, abs=1e-9), key
    assert one["metrics"][0]["policy/loss"] != 0.0  # something was trained
    # the weights: within 1% of their change over the three updates (the gradients agree to
    # 1e-6, but AdamW divides each element by its own scale: the rounding of a near-zero sum,
    # which the ranks add in another order, moves that element by a visible part of a step)
    start = _train_start(cfg_data)
    for name, value in one["params"].items():
        moved = (value - start[name]).abs().max().item()
        diff = (two["params"][name] - value).abs().max().item()
        assert diff <= 1e-2 * moved, (name, diff, moved)
    assert any(not torch.equal(start[n], v) for n, v in one["params"].items())


def _train_start(cfg_data: dict) -> dict:
    """The policy's parameters before training (the seeded tiny model)."""
    from rlvr.trainer.build import load_policy

    cfg = build_config(cfg_data)
    torch.manual_seed(cfg.train.seed)
    return {n: p.detach().clone() for n, p in load_policy(cfg).named_parameters()}
