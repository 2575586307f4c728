"""Fully sharded learners (FSDP2 over gloo, several processes on this machine): M ranks, each
holding 1/M of the policy, its gradients and its AdamW moments, train as one process does.

Each objective's batch is made once by one process; then the same three updates run in one
unsharded learner, in 2 and in 4 sharded ranks (each taking a slice of every minibatch, padding
micro-batches where it has fewer rows), for each objective kind: policy gradient (GRPO with a
sharded reference copy, a LoRA policy over a sharded base, PPO with a sharded value head,
on-policy distillation from a sharded teacher), imitation (SFT on demonstrations, RFT on
verified samples) and pairs (online DPO). A run checkpointed in one unsharded process resumes
on 2 ranks, then on 4, to the uninterrupted updates, and its sharded checkpoint loads into one
unsharded process and exports as a plain model; a sharded LoRA run's exports its adapter."""

from __future__ import annotations

import os
import pickle
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
import torch.multiprocessing as mp
import yaml
from test_trainer import step_rows, tiny_config

from rlvr.checkpoint import TrainerState
from rlvr.config import build_config

STEPS = 3
STEPS_RUN = 4
"""The torchrun runs' steps."""
PRESETS = ("grpo", "lora", "sft", "rft", "online_dpo", "ppo", "distill")
WORLDS = (2, 4)
CASES = [(p, w) for w in WORLDS for p in PRESETS if w == 2 or p in ("grpo", "lora", "sft")]
"""Each objective kind at 2 and 4 ranks (imitation by SFT at 4; RFT, the same kind, at 2), and
the learner's other sharded models (a value head, a teacher) at 2."""
COMPARED = (
    "policy/grad_norm",
    "policy/trained_samples_frac",
    "policy/params_changed_frac",
    "advantages/mean",
    "advantages/abs_mean",
    "advantages/max",
    "sft/tokens",
)
"""The metrics of the whole minibatch. The loss, entropy and ratio diagnostics are means of
micro-batch means, and a rank's micro-batches (of its slice of every minibatch) are another
partition of the rows than one process's; the gradient norm and the weights are compared."""


def _config(run_dir: Path, preset: str, world: int = 0) -> dict:
    """``preset``'s config; ``world`` > 0: sharded over that many learners."""
    cfg = tiny_config(run_dir, steps=STEPS)
    cfg["algorithm"] = {
        "grpo": {"preset": "grpo", "kl": {"beta": 0.04}},  # a reference copy, sharded too
        "lora": {"preset": "grpo", "kl": {"beta": 0.04}},  # the base with its adapter off
        "sft": {"preset": "sft"},
        "rft": {"preset": "rft", "advantage": {"threshold": 0.25}},  # some verified
        "online_dpo": {"preset": "online_dpo"},
        "ppo": {"preset": "ppo"},  # GAE's value head, sharded too
        "distill": {"preset": "on_policy_distillation"},  # a teacher, sharded too
    }[preset]
    if preset == "lora":
        cfg["model"]["lora"] = {"rank": 4, "alpha": 8}
    if preset == "distill":
        cfg["model"]["teacher"] = "tiny-random-qwen2"  # the same byte vocabulary
    cfg["rollout"].update(group_size=4, prompts_per_step=3, dtype="fp32")
    cfg["train"].update(micro_batch_size=2, lr=1e-3, warmup_steps=0, lr_schedule="constant")
    if world:
        cfg["train"]["sharding"] = "fsdp"
        cfg["distributed"] = {"backend": "ray", "learners": world}
    return cfg


def _learner(cfg_data: dict, rank: int, world: int):
    """A fresh learner of ``cfg_data`` (sharded over the group when ``world`` > 0), with its
    tokenizer."""
    from rlvr.distributed.data_parallel import DataParallel
    from rlvr.models import load_tokenizer
    from rlvr.trainer.build import Dtypes, build_learner, load_policy, resolve_algorithm

    cfg = build_config(cfg_data)
    torch.manual_seed(cfg.train.seed)
    policy = load_policy(cfg)
    tokenizer = load_tokenizer(cfg.model.name)
    learner = build_learner(
        cfg,
        resolve_algorithm(cfg),
        policy,
        tokenizer.pad_token_id,
        torch.Generator().manual_seed(cfg.train.seed),
        Dtypes.of(cfg, policy),
    )
    if world:
        learner.group = DataParallel(rank, world, sharded=True)
    return learner, tokenizer


def _train(
    cfg_data: dict,
    batch: Path,
    rank: int,
    world: int,
    steps: int = STEPS,
    resume: bool = False,
    save: bool = False,
) -> dict:
    """``steps`` updates of a learner on the pickled batch (``resume``: from the run's latest
    checkpoint), then a checkpoint when ``save``: their metrics and the policy's parameters
    (whole)."""
    from rlvr.distributed.sharding import full

    learner, tokenizer = _learner(cfg_data, rank, world)
    run_dir = Path(cfg_data["logging"]["run_dir"])
    if resume:
        assert learner.load_checkpoint(run_dir, print) is not None
    data = pickle.loads(batch.read_bytes())
    metrics = [learner.update(data)[0] for _ in range(steps)]
    if save:
        state = TrainerState(step=learner.version)
        learner.save_checkpoint(run_dir, state, tokenizer, keep=5, pending=[])
    params = {n: full(p.detach()).clone() for n, p in learner.policy.named_parameters()}
    return {"metrics": metrics, "params": params}


def _rank(
    rank: int, world: int, port: int, runs: dict, batches: dict, resumed_dir: Path, out: Path
) -> None:
    """Rank ``rank`` of ``world``: each preset's three updates (a LoRA run's checkpointed),
    then the resumed run's part (2 ranks: its second update; 4 ranks: its third); rank 0 saves
    the results."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    address = f"tcp://127.0.0.1:{port}"
    dist.init_process_group("gloo", init_method=address, rank=rank, world_size=world)
    try:
        results = {}
        for preset, cfg in runs.items():
            if (preset, world) in CASES:
                run_dir = Path(cfg["logging"]["run_dir"]).with_name(f"{preset}-{world}")
                sharded = _config(run_dir, preset, world)
                save = preset == "lora"
                results[preset] = _train(sharded, batches[preset], rank, world, save=save)
        resumed = _config(resumed_dir, "grpo", world)
        results["resumed"] = _train(resumed, batches["grpo"], rank, world, 1, True, True)
        if world == 2:  # bf16 gathers and compute, recomputed activations, chunked logits
            mixed = _config(Path(runs["grpo"]["logging"]["run_dir"]), "grpo", world)
            mixed["train"].update(
                shard_param_dtype="bf16", gradient_checkpointing=True, logprob_chunk_tokens=8
            )
            results["mixed"] = _train(mixed, batches["grpo"], rank, world)
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
    """Each preset's three updates on its batch of the tiny model: in one process, in 2 and in
    4 sharded ranks (started once for all the presets); and the resumed run's parts."""
    from rlvr.trainer.backends import build_parts

    folder = tmp_path_factory.mktemp("sharding")
    batches = {}
    for preset in ("grpo", "sft"):  # sampled groups, the task's demonstrations
        parts = build_parts(build_config(_config(folder / f"{preset}-sampler", preset)))
        data, _ = parts.collector.collect(1)
        batches[preset] = folder / f"{preset}.pkl"
        batches[preset].write_bytes(pickle.dumps(data))
    batches = {p: batches["sft" if p == "sft" else "grpo"] for p in PRESETS}
    runs = {preset: _config(folder / preset, preset) for preset in PRESETS}
    resumed = _config(folder / "resumed", "grpo")  # its first update in one process
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each rank: 2 threads on 2 busy cores can be 100x slower
    try:
        one = {p: _train(cfg, batches[p], 0, 0) for p, cfg in runs.items()}
        first = _train(resumed, batches["grpo"], 0, 0, 1, save=True)
    finally:
        torch.set_num_threads(threads)
    results = {"one": one}
    for world in WORLDS:
        out = folder / f"sharded-{world}.pt"
        args = (world, _free_port(), runs, batches, folder / "resumed", out)
        # forked: each rank starts with this process's imports (spawned, each imported torch and
        # transformers anew: ~6 s of CPU a rank)
        mp.start_processes(_rank, args=args, nprocs=world, join=True, start_method="fork")
        results[world] = torch.load(out)
    results["first"] = first
    results["loaded"] = _train(resumed, batches["grpo"], 0, 0, 0, resume=True)  # 4 ranks' shards
    results["dir"] = folder
    return runs, results


def _assert_same_metrics(mine: dict, theirs: dict) -> None:
    """Within 1e-6 relative; within 1e-6 absolute the mean of batch-normalised advantages
    (PPO's), 0 up to the rounding of their sum, and the preference metrics, differences of
    log-ratios whose relative rounding the subtraction enlarges (a reward margin of 0.345
    differed by 5e-7 with fused AdamW on both sides)."""
    assert mine.keys() == theirs.keys()
    for key in [k for k in COMPARED if k in mine] + [k for k in mine if "preference/" in k]:
        near_zero = 1e-6 if key == "advantages/mean" or key.startswith("preference/") else 1e-9
        assert theirs[key] == pytest.approx(mine[key], rel=1e-6, abs=near_zero), key


def _assert_same_weights(start: dict, want: dict, got: dict) -> None:
    """``got`` within 1% of the change from ``start`` to ``want``: the gradients agree to 1e-6,
    but AdamW divides each element by its own scale, so the rounding of a near-zero sum, which
    the ranks add in another order, moves that element by a visible part of a step."""
    assert any(not torch.equal(start[n], v) for n, v in want.items())
    for name, value in want.items():
        moved = (value - start[name]).abs().max().item()
        diff = (got[name] - value).abs().max().item()
        assert diff <= 1e-2 * moved, (name, diff, moved)


@pytest.mark.parametrize(("preset", "world"), CASES)
def test_sharded_ranks_train_as_one_process(preset, world, sharded):
    runs, results = sharded
    one, many = results["one"][preset], results[world][preset]
    for mine, theirs in zip(one["metrics"], many["metrics"], strict=True):
        _assert_same_metrics(mine, theirs)
    assert one["metrics"][0]["policy/loss"] != 0.0  # something was trained
    _assert_same_weights(_train_start(runs[preset]), one["params"], many["params"])


def test_mixed_precision_and_activation_checkpointing_train_close_to_fp32(sharded):
    """train.shard_param_dtype: bf16 (layers gathered and computed in bf16, gradients reduced in
    fp32) with gradient checkpointing and the log-softmax in chunks (the output layer applied
    outside the model's forward), on 2 ranks: the fp32 process's gradient norms to bf16's
    precision (a few parts in a thousand), and the weights stay fp32 shards."""
    _, results = sharded
    one, mixed = results["one"]["grpo"], results[2]["mixed"]
    for mine, theirs in zip(one["metrics"], mixed["metrics"], strict=True):
        assert theirs["policy/grad_norm"] == pytest.approx(mine["policy/grad_norm"], rel=1e-2)
    assert all(p.dtype == torch.float32 for p in mixed["params"].values())  # fp32 shards


def test_a_run_resumes_on_other_world_sizes_and_its_shards_export(sharded, tmp_path):
    """One update in one unsharded process, checkpointed; resumed on 2 sharded ranks for the
    second; on 4 for the third: the uninterrupted three updates' metrics and weights. The 4
    ranks' checkpoint loads into one unsharded process, and exports (consolidated) to a
    directory transformers loads, holding the weights of its step."""
    from transformers import AutoModelForCausalLM

    from rlvr.export import export
    from rlvr.models import load_model

    runs, results = sharded
    one = results["one"]["grpo"]
    parts = [results["first"], results[2]["resumed"], results[4]["resumed"]]
    for mine, part in zip(one["metrics"], parts, strict=True):
        _assert_same_metrics(mine, part["metrics"][0])
    start = _train_start(runs["grpo"])
    _assert_same_weights(start, one["params"], parts[2]["params"])
    for name, value in results["loaded"]["params"].items():  # the shards, read whole
        assert torch.equal(value, parts[2]["params"][name]), name
    checkpoint = results["dir"] / "resumed" / "checkpoints" / "step_000003"
    assert sorted(p.name for p in (checkpoint / "shards").glob("*.distcp")) == [
        f"__{rank}_0.distcp" for rank in range(4)
    ]
    done = export(checkpoint, tmp_path / "exported")
    assert done.kind == "model"
    model = AutoModelForCausalLM.from_pretrained(done.out)
    for name, value in model.named_parameters():
        assert torch.equal(value, parts[2]["params"][name]), name
    loaded = load_model(str(checkpoint))  # rlvr eval / model.name: consolidated once, cached
    for name, value in loaded.named_parameters():
        assert torch.equal(value, parts[2]["params"][name]), name


def test_a_sharded_lora_checkpoint_holds_its_adapter_whole(sharded, tmp_path):
    """A LoRA run on 2 sharded ranks writes its adapter beside the shards, as one process
    writes it: exported as a PEFT adapter, and loaded as a model spec (base + adapter) with
    the trained adapter's weights."""
    from rlvr import adapters
    from rlvr.export import export
    from rlvr.models import load_model

    _, results = sharded
    trained = results[2]["lora"]["params"]
    checkpoint = results["dir"] / "lora-2" / "checkpoints" / "step_000003"
    done = export(checkpoint, tmp_path / "adapter")
    assert done.kind == "adapter"
    assert (done.out / adapters.ADAPTER_WEIGHTS).is_file()
    loaded = adapters.adapter_parameters(load_model(str(checkpoint)))
    assert loaded.keys() == {name for name in trained if ".lora_" in name}
    for name, value in loaded.items():
        assert torch.equal(value, trained[name]), name


def _train_start(cfg_data: dict) -> dict:
    """The policy's parameters before training (the seeded tiny model)."""
    from rlvr.trainer.build import load_policy

    cfg = build_config(cfg_data)
    torch.manual_seed(cfg.train.seed)
    return {n: p.detach().clone() for n, p in load_policy(cfg).named_parameters()}


def _torchrun_config(tmp_path: Path, name: str, sharded: bool) -> Path:
    """A GRPO run of the tiny model (a sharded reference copy), checkpointed every step: on
    torchrun's 2 processes (``sharded``) or in one."""
    cfg = _config(tmp_path / name, "grpo")
    cfg["train"]["steps"] = STEPS_RUN
    if sharded:
        cfg["train"]["sharding"] = "fsdp"
        cfg["distributed"] = {"backend": "torchrun"}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


TESTS = str(Path(__file__).parent)


def _env() -> dict[str, str]:
    """The environment of a run's processes: the tests' reward module importable."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (TESTS, path) if p)}


def _torchrun(*args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", "-m", "rlvr", "train", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, env=_env())  # fmt: skip


def _rows(run_dir: Path) -> dict[int, dict]:
    volatile = ("time/", "rollout/tokens_per_s")
    return {
        step: {k: v for k, v in row.items() if not k.startswith(volatile)}
        for step, row in step_rows(run_dir).items()
    }


def test_torchrun_sharded_run_killed_with_sigkill_resumes_to_one_process_steps(tmp_path):
    """``torchrun --nproc-per-node 2 -m rlvr train`` with train.sharding: fsdp, killed with
    SIGKILL (every process of it, at a random moment of a random step after a checkpoint) and
    resumed with the same command: the run logs one process's steps, the samples exactly and
    the gradient norms to 1e-6."""
    from rlvr.trainer import train

    one = build_config(yaml.safe_load(_torchrun_config(tmp_path, "one", False).read_text()))
    train(one)
    local = _rows(tmp_path / "one")
    assert sorted(local) == list(range(1, STEPS_RUN + 1))
    assert all(row["policy/grad_norm"] > 0 for row in local.values())

    run = _torchrun(str(_torchrun_config(tmp_path, "killed", sharded=True)))
    step = random.randint(1, STEPS_RUN - 2)  # killed in a random moment of the next step
    written = tmp_path / "killed" / "checkpoints" / f"step_{step:06d}"
    deadline = time.monotonic() + 240
    while not written.is_dir() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    step_s = min(row["time/step"] for row in step_rows(tmp_path / "one").values())
    time.sleep(random.uniform(0.0, 0.8 * step_s))
    for process in [*psutil.Process(run.pid).children(recursive=True), psutil.Process(run.pid)]:
        process.kill()  # SIGKILL: torchrun's workers run in sessions of their own
    output = run.communicate(timeout=60)[0]
    assert run.returncode == -signal.SIGKILL, output[-3000:]
    assert len(step_rows(tmp_path / "killed")) < STEPS_RUN  # killed mid-run
    resumed = _torchrun("--resume", str(tmp_path / "killed"))
    output = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, output[-3000:]
    sharded = _rows(tmp_path / "killed")
    assert sorted(sharded) == sorted(local)
    for step, row in local.items():
        assert sharded[step]["reward/mean"] == row["reward/mean"], step
        assert sharded[step]["policy/grad_norm"] == pytest.approx(row["policy/grad_norm"], 1e-6)
    assert (tmp_path / "killed" / "checkpoints" / f"step_{STEPS_RUN:06d}" / "shards").is_dir()
