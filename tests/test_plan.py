"""The memory plan (rlvr.trainer.plan): exact parameter counts, each component on a
hand-computed example, the advice, ``rlvr plan``, and a run that cannot fit stopping before any
model loads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.config import ConfigError, build_config
from rlvr.trainer import plan as planning
from rlvr.trainer.plan import GiB, PlanError, model_shape, parse_size, plan, setup_of

SMOL = "random:smollm2-135m"
SMOL_PARAMS = 49152 * 576 + 30 * (2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536 + 2 * 576) + 576
"""SmolLM2-135M by hand: tied embeddings, 30 layers of q, o (576 x 576), k, v (576 x 192), gate,
up, down (576 x 1536) and two norms, the final norm."""
SMOL_LORA_8 = 8 * 30 * (2 * (576 + 576) + 2 * (576 + 192) + 3 * (576 + 1536))
"""Rank 8 on all seven projections of each layer: r x (in + out) each."""


def config(**sections: dict) -> object:
    """A run config of SmolLM2's shape with fixed precisions (no measurement) and no eval."""
    data = {
        "model": {"name": SMOL},
        "rollout": {"dtype": "bf16", "group_size": 8, "prompts_per_step": 2},
        "train": {"autocast": "bf16", "device": "cpu", "micro_batch_size": 16},
        "eval": {"before": False, "after": False},
        "algorithm": {"kl": {"beta": 0.0}},
    }
    for key, values in sections.items():
        data[key] = {**data.get(key, {}), **values}  # a section given replaces those keys
    return build_config(data)


def rows(found: planning.Plan) -> dict[tuple[str, str], int]:
    return {(r.name, r.phase): r.bytes for r in found.rows}


def test_parse_size() -> None:
    assert parse_size("80GB") == 80 * 10**9
    assert parse_size("512MiB") == 512 * 2**20
    assert parse_size("24G") == 24 * GiB
    assert parse_size("1.5 GiB") == 3 * GiB // 2
    assert parse_size("1000") == 1000
    with pytest.raises(ConfigError, match="80GB"):
        parse_size("eighty")


def test_parameter_counts_are_exact() -> None:
    shape = model_shape(SMOL)
    assert shape.params == SMOL_PARAMS == 134_515_008
    assert shape.layers == 30 and shape.vocab == 49152 and shape.kv_width == 192
    assert shape.head == 49152 * 576  # tied: counted once in params
    assert shape.root == 49152 * 576 + 576
    assert model_shape(SMOL, 8).lora == SMOL_LORA_8
    assert model_shape(SMOL, 8, ("q_proj", "v_proj")).lora == 8 * 30 * (576 + 576 + 576 + 192)


def test_lora_count_matches_peft_on_the_tiny_model() -> None:
    from rlvr import adapters
    from rlvr.models import load_model

    model = load_model("tiny-random-llama")
    adapters.add_lora(model, adapters.LoraSpec(rank=4, base="tiny-random-llama"))
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert model_shape("tiny-random-llama", 4).lora == trained


def test_resident_rows_of_full_fine_tuning() -> None:
    found = plan(config())
    got = rows(found)
    assert got[("policy weights", "resident")] == 4 * SMOL_PARAMS
    assert got[("AdamW moments", "resident")] == 8 * SMOL_PARAMS
    assert got[("gradients", "train")] == 4 * SMOL_PARAMS
    assert got[("initial weights", "resident")] == 4 * SMOL_PARAMS  # update_sparsity, CPU
    assert got[("engine weights", "resident")] == 2 * SMOL_PARAMS  # the bf16 engine's copy
    assert ("reference", "resident") not in got  # beta 0: none
    in_peak = ("resident", found.largest_phase)
    assert found.peak == sum(r.bytes for r in found.rows if r.phase in in_peak)


def test_engine_shares_fp32_weights_and_a_reference_is_a_copy() -> None:
    got = rows(plan(config(rollout={"dtype": "fp32"}, algorithm={"kl": {"beta": 0.04}})))
    assert ("engine weights", "resident") not in got
    assert got[("reference", "resident")] == 4 * SMOL_PARAMS


def test_fsdp_halves_the_states_at_two_learners() -> None:
    ray = {"backend": "ray", "learners": 2, "address": "auto"}
    whole = rows(plan(config(distributed=ray, algorithm={"kl": {"beta": 0.04}})))
    sharded = rows(
        plan(config(distributed=ray, algorithm={"kl": {"beta": 0.04}}, train={"sharding": "fsdp"}))
    )
    for key in (
        ("policy weights", "resident"),
        ("AdamW moments", "resident"),
        ("gradients", "train"),
        ("reference", "resident"),
    ):
        assert sharded[key] == whole[key] // 2, key
    assert sharded[("whole policy", "load")] == 4 * SMOL_PARAMS
    assert ("engine weights", "resident") not in whole  # on the rollout workers (Ray)


def test_lora_keeps_adapter_only_states() -> None:
    got = rows(plan(config(model={"lora": {"rank": 8}}, algorithm={"kl": {"beta": 0.04}})))
    assert got[("AdamW moments", "resident")] == 8 * SMOL_LORA_8
    assert got[("gradients", "train")] == 4 * SMOL_LORA_8
    assert got[("policy weights", "resident")] == 4 * (SMOL_PARAMS + SMOL_LORA_8)
    assert ("reference", "resident") not in got  # the policy with its adapter disabled


def test_checkpointing_and_chunking_lower_the_training_step() -> None:
    base = rows(plan(config()))
    checkpointed = rows(plan(config(train={"gradient_checkpointing": True})))
    assert checkpointed[("activations", "train")] < base[("activations", "train")] / 4
    chunked = rows(plan(config(train={"logprob_chunk_tokens": 256})))
    completion_tokens = 16 * 128  # micro-batch x rollout.max_new_tokens
    assert chunked[("logits", "train")] * completion_tokens == pytest.approx(
        base[("logits", "train")] * 256, rel=1e-6
    )


def test_one_optimizer_step_allocates_the_moments_at_its_end() -> None:
    got = rows(plan(config(train={"steps": 1})))
    assert ("AdamW moments", "resident") not in got
    assert got[("AdamW moments", "optimizer")] == 8 * SMOL_PARAMS


def test_advice_names_the_cheapest_change_that_fits() -> None:
    cfg = config(logging={"update_sparsity": False})
    setup = setup_of(cfg)
    smaller = planning.estimate(dataclasses.replace(setup, micro_batch=8)).peak
    found = plan(cfg, device_memory=smaller + 1)
    assert not found.fits and "does not fit" in found.verdict()
    assert found.advice[0].startswith("cheapest change that fits: --set train.micro_batch_size=8")


def test_advice_turns_off_the_sparsity_snapshot_first() -> None:
    cfg = config()
    without = plan(config(logging={"update_sparsity": False}))
    found = plan(cfg, device_memory=without.peak + 1)
    assert "logging.update_sparsity=false" in found.advice[0]


def run_cli(*args: str):
    return CliRunner().invoke(app, ["plan", *args], prog_name="rlvr")


def test_cli_plan_fits(tmp_path: Path) -> None:
    result = run_cli(
        "configs/demo.yaml",
        "--set",
        "model.name=tiny-random-llama",
        "--set",
        "rollout.dtype=fp32",
        "--set",
        "train.autocast=fp32",
        "--device-memory",
        "80GB",
    )
    assert result.exit_code == 0, result.output
    assert "memory plan: tiny-random-llama" in result.output
    assert "policy weights" in result.output and "KV cache" in result.output
    assert ": fits" in result.output


def test_cli_plan_too_large_exits_1() -> None:
    result = run_cli(
        "configs/demo.yaml",
        "--set",
        "model.name=random:qwen2.5-7b",
        "--set",
        "rollout.dtype=bf16",
        "--set",
        "train.autocast=bf16",
        "--device-memory",
        "16GB",
    )
    assert result.exit_code == 1, result.output
    assert "does not fit" in result.output


def test_too_large_run_stops_before_loading(tmp_path: Path, monkeypatch, capsys) -> None:
    from rlvr.trainer import run as running
    from rlvr.trainer import train

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(running, "build_parts", never)
    monkeypatch.setattr("rlvr.models.load_model", never)
    monkeypatch.setattr("rlvr.models.random_model", never)
    run_dir = tmp_path / "run"
    cfg = config(
        model={"name": "random:qwen2.5-7b"},
        train={"device_memory_gb": 16},
        logging={"run_dir": str(run_dir), "tensorboard": False},
    )
    expected = plan(cfg, device_memory=16 * GiB)
    with pytest.raises(PlanError) as err:
        train(cfg)
    assert str(err.value).splitlines()[0] == expected.verdict()
    assert str(err.value).startswith("does not fit: estimated")
    assert expected.advice and expected.advice[0] in str(err.value)
    assert not run_dir.exists()  # a run that never started leaves nothing behind


def test_run_prints_the_plan_at_its_start(tmp_path: Path, monkeypatch, capsys) -> None:
    from rlvr.trainer import run as running
    from rlvr.trainer import train

    class Stop(Exception):
        pass

    def stop(*args: object, **kwargs: object) -> None:
        raise Stop

    monkeypatch.setattr(running, "build_parts", stop)
    cfg = config(
        model={"name": "tiny-random-llama"},
        rollout={"dtype": "fp32"},
        train={"autocast": "fp32"},
        logging={"run_dir": str(tmp_path / "run"), "tensorboard": False},
    )
    with pytest.raises(Stop):
        train(cfg)
    printed = capsys.readouterr().err
    assert "memory plan: tiny-random-llama" in printed
    assert "per device: fits" in printed


def test_device_memory_of_the_config_key_and_the_machine() -> None:
    assert planning.device_memory(config(train={"device_memory_gb": 2.5})) == int(2.5 * GiB)
    if Path("/proc/meminfo").is_file():
        assert planning.device_memory(config()) > GiB
    assert torch.device("cpu").type == setup_of(config()).device


def test_processes_sharing_this_machine_count_on_a_cpu() -> None:
    ray_here = {"backend": "ray", "learners": 2, "rollout_workers": 2}
    found = plan(config(distributed=ray_here))
    shared = {r.name for r in found.rows if r.shared}
    assert shared == {"other learners", "rollout workers", "driver"}
    assert found.peak > found.learner_peak
    cluster = plan(config(distributed={**ray_here, "address": "auto"}))
    assert not any(r.shared for r in cluster.rows)
    assert cluster.peak == cluster.learner_peak == found.learner_peak


def test_torchrun_rank_0_holds_the_served_copy_its_engine_samples_from() -> None:
    """Rank 0's engine serves a whole copy in the rollout dtype (bf16 here), and no other."""
    got = rows(plan(config(distributed={"backend": "torchrun"}), devices=2))
    assert got[("served copy", "resident")] == 2 * SMOL_PARAMS
    assert ("engine weights", "resident") not in got
    assert got[("published copy", "resident")] == 4 * SMOL_PARAMS


def test_tree_rollouts_plan_for_their_most_leaves() -> None:
    """2 trees of branch factor 2 and depth 2 per prompt: up to 8 leaves, planned as a group
    of 8 (the flat config's group_size 8), not of 2."""
    tree = {"group_size": 2, "tree": {"branching": "fixed", "depth": 2}}
    assert setup_of(config(rollout=tree)).samples == setup_of(config()).samples == 16
    assert setup_of(config(rollout=tree)).group == 8
    assert plan(config(rollout=tree)).peak == plan(config()).peak
