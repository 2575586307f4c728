"""distributed.backend: ray on a local 2-CPU Ray cluster: the same per-step metrics as one
process whatever the number of rollout workers, data-parallel learners, the weights broadcast,
bounded staleness, faults (a killed worker) and resume."""

from __future__ import annotations

import functools
import logging
import os
import time
from pathlib import Path

import pytest
import torch
from test_trainer import step_rows, tiny_config

from rlvr.config import build_config
from rlvr.trainer import train

ray = pytest.importorskip("ray", reason="distributed.backend: ray needs Ray (rlvr[ray])")

TESTS = str(Path(__file__).parent)
VOLATILE = ("time/", "rollout/tokens_per_s", "rollout/worker", "rollout/publish_bytes")
"""Metrics that measure the machine (seconds, throughput) or the transport, not the run."""


class _Records(logging.Handler):
    """Collects the messages of the log records that reach it."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def cluster():
    """One local Ray instance for the module (2 CPUs, no dashboard), started the way a run
    starts one (:func:`rlvr.trainer.backends.ray.connect`); workers import the tests' reward
    module. Yields the messages Ray's loggers logged while it started."""
    from rlvr.trainer.backends.ray import connect

    init, path = ray.init, os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (TESTS, path) if p)
    ray.init = functools.partial(init, num_cpus=2)  # whatever the machine's core count
    records = _Records()
    logging.getLogger("ray").addHandler(records)
    try:
        assert connect(build_config({"distributed": {"backend": "ray"}}))
    finally:
        logging.getLogger("ray").removeHandler(records)
        ray.init = init
        if path is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = path
    yield records.messages
    ray.shutdown()


EVAL = {"before": False, "after": False, "every": 2, "sampled": True}
"""Held-out evaluation at step 2, greedy and sampled: split across the workers on Ray."""


def local_config(run_dir: Path, steps: int = 3, **sections) -> dict:
    return tiny_config(run_dir, steps=steps, eval=EVAL, **sections)


def ray_config(run_dir: Path, workers: int = 1, steps: int = 3, **sections) -> dict:
    # every call of these tiny runs takes seconds: a rare hang in re-forming the weight group
    # after a worker is replaced (seen once in ~10 runs, then survived by the timeout) costs a
    # minute here instead of the default ten; the actors' start on a machine the other test
    # workers keep busy took up to a minute (3 pytest-xdist workers on 2 cores): 5 are allowed
    distributed = {
        "backend": "ray",
        "rollout_workers": workers,
        "cpus_per_worker": 0.25,
        "timeout_s": 60,
        "start_timeout_s": 300,
    }
    distributed.update(sections.pop("distributed", {}))
    return local_config(run_dir, steps=steps, distributed=distributed, **sections)


def comparable(rows: dict[int, dict]) -> dict[int, dict]:
    return {
        step: {k: v for k, v in row.items() if not k.startswith(VOLATILE)}
        for step, row in rows.items()
    }


_RUNS: dict[str, dict[int, dict]] = {}
_DIRS: dict[str, Path] = {}


def run_once(name: str, cfg: dict, tmp_path_factory) -> dict[int, dict]:
    """The per-step metrics of ``cfg`` (run once per module under ``name``)."""
    if name not in _RUNS:
        run_dir = tmp_path_factory.mktemp(name) / "run"
        cfg["logging"]["run_dir"] = str(run_dir)
        train(build_config(cfg))
        _RUNS[name] = comparable(step_rows(run_dir))
        _DIRS[name] = run_dir
    return _RUNS[name]


def test_local_and_ray_with_one_worker_log_the_same_steps(cluster, tmp_path_factory):
    """Worker-count invariance: every sample's stream is named by (seed, step, draw, prompt,
    sample), so a rollout worker samples the tokens one process samples (weights sent through
    the object store here; the two-worker runs below use the broadcast group)."""
    local = run_once("local", local_config(Path("unused")), tmp_path_factory)
    object_store = {"weight_sync": "object_store"}  # the fallback to the broadcast group
    one = run_once(
        "ray1", ray_config(Path("unused"), 1, distributed=object_store), tmp_path_factory
    )
    assert local == one
    assert "eval/sampled_accuracy" in local[2] and local[3]["staleness/max"] == 0.0


def idle() -> set[str]:
    """The ids of the driver's idle actors (:mod:`rlvr.trainer.backends.ray_pool`)."""
    from rlvr.trainer.backends.ray import POOL

    return {actor._actor_id.hex() for actor in POOL.idle(ray)}


def test_a_drivers_next_run_starts_in_the_idle_actors_of_its_last(cluster, tmp_path_factory):
    """distributed.reuse_actors (the default): a clean run leaves its learner and rollout
    worker idle; the next run on the cluster starts in those same actors (no new process) and
    logs one process's steps; an idle actor whose next run fails to start ends, as a fresh one
    does (reuse_actors false: test_a_run_without_reuse_actors_leaves_no_idle_actor)."""
    from rlvr.errors import WorkerFailed
    from rlvr.trainer.backends.ray import RayRollouts

    local = run_once("local", local_config(Path("unused")), tmp_path_factory)
    runs = []
    for name in ("reuse-a", "reuse-b"):
        run_dir = tmp_path_factory.mktemp(name) / "run"
        train(build_config(ray_config(run_dir, 1)))
        assert comparable(step_rows(run_dir)) == local
        runs.append(idle())
    assert len(runs[0]) == 2 and runs[1] == runs[0]  # the learner and the worker, both kept

    missing = {"name": str(tmp_path_factory.mktemp("reuse-c") / "no-model")}
    cfg = build_config(ray_config(Path("unused"), 1, model=missing))
    with pytest.raises(WorkerFailed, match="a rollout worker failed during start"):
        RayRollouts(cfg, None, learners=None)
    assert len(idle()) == 1  # the worker that failed to start its run is gone


def test_two_workers_one_killed_mid_step_log_the_same_steps_as_one_process(
    cluster, tmp_path_factory, monkeypatch, capfd
):
    """AAPO on two rollout workers, each sampling half the groups and keeping an engine over its
    initial policy for the reference's groups; ray.kill one while its shard of step 2 is being
    sampled: it is recreated (its reference engine too), given the weights it served, its shard
    sent again; every step's metrics equal one process's (step 1 undisturbed, 2 and 3 after)."""
    from rlvr.trainer.backends import ray as ray_backend

    killed = []

    def kill_in_step_two(rollouts, index):
        if index == 1 and not killed and rollouts.version == 1:
            ray.kill(rollouts.workers[index])
            killed.append(index)

    original = ray_backend.RayRollouts.__init__

    def with_hook(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.before_get = kill_in_step_two

    monkeypatch.setattr(ray_backend.RayRollouts, "__init__", with_hook)
    settings = {"algorithm": {"preset": "aapo", "beta": None}, "train": {"lr": 5e-2}}
    run_dir = tmp_path_factory.mktemp("killed") / "run"
    cfg = ray_config(run_dir, 2, steps=3, **settings)
    cfg["algorithm"].pop("beta")
    train(build_config(cfg))
    assert killed == [1]
    assert "rollout worker 1 failed" in capfd.readouterr().err
    local_cfg = local_config(Path("unused"), steps=3, **settings)
    local_cfg["algorithm"].pop("beta")
    local = run_once("aapo-local", local_cfg, tmp_path_factory)
    assert comparable(step_rows(run_dir)) == local
    assert local[3]["policy/loss"] != local[1]["policy/loss"]


def test_a_lora_tree_run_on_ray_equals_one_process_and_sends_only_the_adapter(
    cluster, tmp_path_factory
):
    """LoRA (beta > 0: the reference is the adapter switched off) with tree rollouts (2 trees
    of 4 leaves per prompt, TreeRPO's step-level advantages) on two rollout workers fed by the
    broadcast group, each growing the trees of its prompts: the same steps as one process;
    each publication carries the adapter's tensors only (rank 4 on 7 layers x 2 blocks of the
    tiny model, fp32)."""
    lora = {"name": "tiny-random-llama", "lora": {"rank": 4, "alpha": 8}}
    tree = {"group_size": 2, "tree": {"branching": "fixed", "depth": 2, "segment_tokens": 3}}
    settings = {
        "model": lora,
        "rollout": tree,
        "algorithm": {"beta": 0.04, "advantage": {"name": "treerpo"}},
        "train": {"lr": 1e-2},
    }
    local = run_once("lora-local", local_config(Path("unused"), **settings), tmp_path_factory)
    run_dir = tmp_path_factory.mktemp("lora-ray") / "run"
    train(build_config(ray_config(run_dir, 2, **settings)))
    rows = step_rows(run_dir)
    assert comparable(rows) == local
    assert local[3]["policy/kl_ref"] > 0 and local[3]["rollout/publish_check_diff"] < 1e-5
    assert local[1]["tree/leaves_per_prompt"] == 8 and local[3]["advantages/abs_mean"] > 0
    hidden, inter = 64, 128
    shapes = [(hidden, hidden)] * 2 + [(hidden, 32)] * 2 + [(hidden, inter)] * 2 + [(inter, hidden)]
    adapter = 2 * sum(4 * (i + o) for i, o in shapes) * 4  # A [r, in] + B [out, r], 2 layers
    assert {r["rollout/publish_bytes"] for r in rows.values()} == {adapter}


@pytest.mark.parametrize(
    "algorithm",
    [
        {"preset": "semi_online_dpo", "sync_every": 2},
        {"preset": "on_policy_distillation"},
        {
            "preset": "grpo",
            "stages": [{"name": "guidance", "length": 4}, {"name": "error_correction"}],
        },
    ],
    ids=["semi_online_dpo", "distillation", "guidance_and_correction"],
)
def test_objectives_on_ray_equal_one_process(cluster, tmp_path_factory, algorithm):
    """Semi-online DPO (the worker keeps the snapshot between syncs), on-policy distillation
    (the learner actor's teacher scores the samples the worker sent), and G2RPO-A's guided
    samples with EDGE-GRPO's corrections (replies continued from given prefixes, written
    corrections scored by the worker) on a rollout worker: the same steps as one process
    (several workers split the groups the same way for every objective: the AAPO and judge
    tests)."""
    settings = {
        "algorithm": {"beta": None, **algorithm},
        "model": {"name": "tiny-random-llama", "teacher": "tiny-random-llama"},
        "rollout": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 12, "dtype": "fp32"},
        "train": {"lr": 5e-2},
    }
    name = algorithm["preset"]
    local_cfg = local_config(Path("unused"), steps=4, **settings)
    local_cfg["algorithm"].pop("beta")
    local = run_once(f"{name}-local", local_cfg, tmp_path_factory)
    run_dir = tmp_path_factory.mktemp(f"{name}-ray") / "run"
    cfg = ray_config(run_dir, 1, steps=4, **settings)
    cfg["algorithm"].pop("beta")
    train(build_config(cfg))
    assert comparable(step_rows(run_dir)) == local
    assert local[4]["policy/loss"] != local[1]["policy/loss"]
    if "stages" in algorithm:  # guided rows and written corrections were played and scored
        assert local[1]["sampling/guided"] == 4 and local[1]["sampling/corrected"] > 0


def test_a_judge_rewards_on_each_rollout_worker_as_in_one_process(cluster, tmp_path_factory):
    """A local judge (reward.judges, the tiny model) is built on each of two rollout workers
    from the config its term carries: the rewards and the judge's usage (summed over the
    workers' shards) are those of one process, up to the judge's batch arithmetic."""
    letters = {c: i / 25 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}
    reward = {
        "function": None,
        "judges": {"tiny": {"model": "tiny-random-llama"}},
        "terms": [
            {"name": "judge_score", "params": {"judge": "tiny", "choices": letters}},
            {"name": "rewards_for_tests:letter_fraction"},
        ],
    }
    local_cfg = local_config(Path("unused"), steps=2, reward=reward)
    local_cfg["eval"] = {"before": False, "after": False}
    local = run_once("judge-local", local_cfg, tmp_path_factory)
    run_dir = tmp_path_factory.mktemp("judge-ray") / "run"
    cfg = ray_config(run_dir, 2, steps=2, reward=reward)
    cfg["eval"] = {"before": False, "after": False}
    train(build_config(cfg))
    rows = comparable(step_rows(run_dir))
    for step in (1, 2):
        for key in ("reward/judge_score/mean", "reward/mean", "policy/loss"):
            assert rows[step][key] == pytest.approx(local[step][key], rel=1e-4, abs=1e-6), key
        assert rows[step]["judge/calls"] + rows[step]["judge/cache_hits"] == 8
    assert 0 < local[1]["reward/judge_score/mean"] < 1


def test_asynchronous_rollouts_respect_the_staleness_bound(cluster, tmp_path_factory):
    """max_staleness 1 in one process: batches at most one version old, AReaL's behaviour
    weight at work (the Ray run of the next test must equal this one)."""
    async_local = local_config(Path("unused"), rollout={"max_staleness": 1})
    local = run_once("local_async", async_local, tmp_path_factory)
    assert [local[s]["staleness/max"] for s in (1, 2, 3)] == [0.0, 1.0, 1.0]
    sync = run_once("local", local_config(Path("unused")), tmp_path_factory)
    assert local[2]["reward/mean"] != sync[2]["reward/mean"]  # step 2 trains on an older batch
    assert "rollout/is_weight_mean" in local[2]  # the behaviour weight, truncated at 2


def test_the_default_cpu_share_fits_the_actors_on_the_nodes(cluster, tmp_path):
    """distributed.cpus_per_worker null (the default): 2 rollout workers and a learner share
    the 2 CPUs (2/3 each, in Ray's 1/10000 units) where 1 CPU each does not fit."""
    from rlvr.trainer.backends.ray import (
        InfeasibleResources,
        check_resources,
        fitting_share,
        with_cpus,
    )

    assert fitting_share([2.0], 3) == 0.6666 and fitting_share([2.0, 2.0], 3) == 1.0
    assert fitting_share([4.0, 1.0], 2) == 2.0 and fitting_share([0.0], 2) == 0.0
    cfg = build_config(tiny_config(tmp_path / "run", distributed={"rollout_workers": 2}))
    assert cfg.distributed.cpus_per_worker is None
    check_resources(cfg)
    assert with_cpus(cfg).distributed.cpus_per_worker == 0.6666
    with pytest.raises(InfeasibleResources, match=r"reserve 3 CPU \(1 each"):
        check_resources(build_config(tiny_config(tmp_path / "run", distributed={
            "rollout_workers": 2, "cpus_per_worker": 1}))
        )  # fmt: skip


def test_starting_ray_prints_no_token_authentication_notice(cluster):
    """Ray's notice of its default token authentication, printed when a driver starts an
    instance, is dropped for the instances rlvr starts (the module's own was started by
    :func:`~rlvr.trainer.backends.ray.connect`)."""
    assert not any("Token authentication" in m for m in cluster), cluster


def test_the_instance_rlvr_starts_runs_its_workers_at_the_drivers_priority(cluster):
    """Ray's workers run at niceness 15 unless told otherwise; those of an instance rlvr
    starts run at the driver's (rlvr's actors are the run: at 15 any busy process beside them
    starves them)."""

    @ray.remote
    def niceness() -> int:
        return os.nice(0)

    assert ray.get(niceness.remote()) == 0


def test_impossible_resources_fail_fast_naming_the_resource(cluster, tmp_path):
    from rlvr.trainer.backends.ray import InfeasibleResources

    start = time.perf_counter()
    cfg = ray_config(tmp_path / "run", 4, distributed={"cpus_per_worker": 1})
    with pytest.raises(InfeasibleResources, match=r"reserve 5 CPU .* cluster has 2 CPU"):
        train(build_config(cfg))
    cfg = ray_config(tmp_path / "run", 1, distributed={"gpus_per_worker": 1})
    with pytest.raises(InfeasibleResources, match="reserve 2 GPU .* has 0 GPU"):
        train(build_config(cfg))
    assert time.perf_counter() - start < 30
    assert not (tmp_path / "run").exists()  # a run that never started leaves nothing


def test_two_gloo_learners_give_one_process_gradient_and_broadcast_exact_weights(cluster, tmp_path):
    """Two data-parallel learners (gloo) on one batch: the summed gradient equals one
    process's to 1e-6; then learner rank 0 broadcasts the weights to two rollout workers,
    which hold them bit for bit."""
    from rlvr.trainer.backends import build_parts
    from rlvr.trainer.backends.ray import RayLearners, RayRollouts

    sections = {"train": {"micro_batch_size": 2}, "distributed": {"learners": 2}}
    cfg = build_config(ray_config(tmp_path / "run", 2, **sections))
    parts = build_parts(
        cfg.model_copy(
            update={"distributed": cfg.distributed.model_copy(update={"backend": "local"})}
        )
    )
    data, _ = parts.collector.collect(1)
    parts.learners.update(data)
    want = [p.grad for _, p in sorted(parts.learners.policy.named_parameters())]

    learners = RayLearners(cfg, parts.learners.algo)
    rollouts = RayRollouts(cfg, None, learners)  # started while the learners start
    try:
        learners.started()
        learners.update(data)
        for rank in learners.ranks:
            got = ray.get(rank.gradients.remote())
            diff = max((g - w).abs().max().item() for g, w in zip(got, want, strict=True))
            assert diff <= 1e-6, diff
        rollouts.publish(learners, 1)
        sent = ray.get(ray.get(learners.ranks[0].state.remote(False)))
        for worker in rollouts.workers:
            held = ray.get(worker.parameters.remote())
            assert all(torch.equal(a, b) for a, b in zip(held, sent, strict=True))
        assert [ray.get(w.ready.remote())["version"] for w in rollouts.workers] == [1, 1]
    finally:
        rollouts.close(reuse=True)
        learners.close(reuse=True)


def test_a_worker_playing_episodes_is_given_their_time_limits_before_it_counts_as_dead():
    """distributed.timeout_s (60 s here) plus one env.step_timeout_s per episode under
    end_episode: 16 episodes that each hang 10 s once must not pass for a dead worker."""
    from types import SimpleNamespace

    from rlvr.trainer.backends.ray import RayRollouts

    env = {"name": "guess_number", "step_timeout_s": 10.0}
    cfg = build_config(
        ray_config(
            Path("unused"), env=env, task={"name": "guess_number"}, reward={"function": None}
        )
    )
    assert RayRollouts._wait_s(SimpleNamespace(cfg=cfg), 16) == 60 + 16 * 10
    assert RayRollouts._wait_s(SimpleNamespace(cfg=cfg), 0) == 60  # a probe, a weight load
    env["on_error"] = "raise"  # the first fault stops the run at once
    cfg = build_config(
        ray_config(
            Path("unused"), env=env, task={"name": "guess_number"}, reward={"function": None}
        )
    )
    assert RayRollouts._wait_s(SimpleNamespace(cfg=cfg), 16) == 60


def _ecosystem_sections(ecosystem: str, stack) -> dict:
    """Task and env sections of a 2-step run on ``ecosystem``'s environment (the ones the
    ecosystem's own test module trains locally); an OpenEnv server is started on ``stack``."""
    if ecosystem == "gem":
        pytest.importorskip("gem", reason="gem-llm is not installed (make test installs it)")
        name = "gem:game:GuessTheNumber-v0-easy"
        return {
            "task": {"name": name, "n_eval": 2},
            "env": {"name": name, "max_turns": 4, "max_episode_tokens": 96},
            "reward": {"function": None},
        }
    if ecosystem == "skyrl":
        pytest.importorskip("skyrl_gym", reason="skyrl-gym is not installed")
        from test_envs_skyrl import GSM8K_TEMPLATE

        task = {"name": "arithmetic", "level": 1, "n_eval": 2, "prompt_template": GSM8K_TEMPLATE}
        env = {"name": "skyrl_gym:gsm8k_multi_turn", "params": {"extras": {"max_turns": 2}}}
        env = {**env, "max_turns": 2, "max_episode_tokens": 64}
        return {"task": task, "env": env, "reward": {"function": None}}
    if ecosystem == "openenv":
        pytest.importorskip("openenv", reason="openenv-core is not installed")
        from test_envs_openenv import _serve

        proc, url = _serve("guess")
        stack.callback(proc.wait)
        stack.callback(proc.kill)
        name = f"openenv:{url}"
        return {
            "task": {"name": name, "n_eval": 2},
            "env": {"name": name, "max_turns": 3, "max_episode_tokens": 64},
            "reward": {"function": None},
        }
    if ecosystem == "verifiers":  # its own Env plays the user, at each worker's own endpoint
        pytest.importorskip("verifiers.v1", reason="verifiers is not installed")
        name = "verifiers:vf_guess_for_tests"
        env = {"name": name, "params": {"harness": "rlvr"}, "max_turns": 3}
        return {
            "task": {"name": name, "n_eval": 2},
            "env": {**env, "max_episode_tokens": 512},
            "reward": {"function": None},
        }
    env = {  # a user's environment hanging at its second step (FaultyEnv), episodes ended
        "name": "envs_for_tests:FaultyEnv",
        "params": {"fault": "hang", "at": 2, "problems": ["1", "3", "5", "7", "9"]},
        "max_turns": 3,
        "max_episode_tokens": 60,
        "step_timeout_s": 0.5,
        "on_error": "end_episode",
    }
    return {"env": env, "reward": {"function": None}}


@pytest.mark.parametrize(
    "ecosystem",
    [
        "gem",
        "skyrl",
        "openenv",
        "verifiers",  # the recording endpoint and an agent harness inside the worker
        "end_episode",
    ],
)
def test_ecosystem_environments_play_on_a_rollout_worker_as_in_one_process(
    cluster, tmp_path_factory, ecosystem
):
    """Each ecosystem's environment on a Ray rollout worker: the same episodes (tokens,
    rewards, turns, tool counts, evaluation) as one process; and a hanging user environment
    under env.on_error: end_episode ends the same episodes with the same faults there."""
    from contextlib import ExitStack

    rows = []
    with ExitStack() as stack:
        sections = _ecosystem_sections(ecosystem, stack)
        for cfg in (
            local_config(Path("unused"), steps=2, **sections),
            ray_config(Path("unused"), 1, 2, **sections),
        ):
            cfg["logging"]["run_dir"] = str(tmp_path_factory.mktemp(ecosystem) / "run")
            # held-out episodes after step 1, split across workers (the hanging env's would
            # only cost more time limits)
            cfg["eval"]["every"] = 0 if ecosystem == "end_episode" else 1
            train(build_config(cfg))
            rows.append(comparable(step_rows(Path(cfg["logging"]["run_dir"]))))
    local, on_ray = rows
    if ecosystem == "verifiers":  # the endpoint batches calls as they arrive: log-probs of a
        assert set(local) == set(on_ray)  # reply sampled in another batch differ by ~1e-6
        for step, row in local.items():
            assert on_ray[step] == pytest.approx(row, rel=1e-4, abs=1e-5)
    else:
        assert local == on_ray
    assert set(local) == {1, 2}
    if ecosystem == "end_episode":
        assert sum(local[s]["episodes/env_faults"] for s in (1, 2)) > 0
        return
    assert "eval/sampled_accuracy" in local[1]
    if ecosystem in ("openenv", "verifiers"):  # GEM and SkyRL may end at the first reply
        assert local[1]["episodes/turns_mean"] > 1.0


def test_sharded_learners_train_as_one_process_publish_and_checkpoint_shards(
    cluster, tmp_path_factory
):
    """train.sharding: fsdp on 2 Ray learner actors and a rollout worker: each learner holds
    half of the policy and its AdamW moments; the run logs one process's steps (the samples
    exactly, the gradient norms to 1e-6), the publish check passes on every publish (the
    weights are gathered bucket by bucket and broadcast), and every rank writes its shards
    (resumed on other numbers of ranks: tests/test_sharding.py)."""
    from rlvr.distributed import SHARDS

    local = run_once("local", local_config(Path("unused")), tmp_path_factory)
    run_dir = tmp_path_factory.mktemp("sharded") / "run"
    sections = {"train": {"sharding": "fsdp"}, "distributed": {"learners": 2}}
    train(build_config(ray_config(run_dir, 1, **sections)))
    sharded = comparable(step_rows(run_dir))
    assert sorted(sharded) == sorted(local)
    for step, row in local.items():
        assert sharded[step]["reward/mean"] == row["reward/mean"], step
        assert sharded[step]["policy/grad_norm"] == pytest.approx(row["policy/grad_norm"], 1e-6)
    last = run_dir / "checkpoints" / "step_000003"
    assert sorted(p.name for p in (last / SHARDS).glob("*.distcp")) == [
        "__0_0.distcp",
        "__1_0.distcp",
    ]
    assert not (last / "model.safetensors").exists()


def test_a_learner_failure_ends_the_run_and_the_resumed_async_run_equals_one_process(
    cluster, tmp_path_factory, monkeypatch
):
    """An asynchronous Ray run (the learner trains while the worker samples ahead): the
    learner is killed in step 2, so the checkpoint of step 1 holds the batch sampled ahead; the
    run ends naming the resume command, and the resumed run logs one process's steps."""
    from rlvr.errors import WorkerFailed
    from rlvr.trainer.backends import ray as ray_backend

    run_dir = tmp_path_factory.mktemp("resumed") / "run"
    cfg = ray_config(run_dir, 1, rollout={"max_staleness": 1})
    original = ray_backend.RayLearners.start_update

    def kill_in_step_two(self, data):
        if self.version == 1:
            ray.kill(self.ranks[0])
        return original(self, data)

    monkeypatch.setattr(ray_backend.RayLearners, "start_update", kill_in_step_two)
    with pytest.raises(WorkerFailed, match=f"a learner failed.*rlvr train --resume {run_dir}"):
        train(build_config(cfg))
    monkeypatch.setattr(ray_backend.RayLearners, "start_update", original)
    assert sorted(step_rows(run_dir)) == [1]
    assert (run_dir / "checkpoints" / "step_000001" / "pending.pt").is_file()
    train(build_config(cfg), resume=run_dir)
    async_local = local_config(Path("unused"), rollout={"max_staleness": 1})
    assert comparable(step_rows(run_dir)) == run_once("local_async", async_local, tmp_path_factory)


def test_a_run_without_reuse_actors_leaves_no_idle_actor(cluster, tmp_path_factory):
    """distributed.reuse_actors false: the run kills the idle actors (those the resumed run of
    the test before left; run alone, those of a run of its own) and its own at its end."""
    if len(idle()) < 2:
        train(build_config(ray_config(tmp_path_factory.mktemp("kept") / "run", 1)))
    assert len(idle()) >= 2
    cfg = ray_config(tmp_path_factory.mktemp("no-reuse") / "run", 1)
    cfg["distributed"]["reuse_actors"] = False
    train(build_config(cfg))
    assert idle() == set()


def test_an_environment_fault_on_a_worker_is_reported_as_in_one_process(
    cluster, tmp_path_factory, capfd
):
    """A hanging environment on a rollout worker (env.on_error: raise): the user gets the
    one-line message one process gives (not Ray's remote traceback), and the worker is not taken
    for dead and retried (under end_episode the worker runs the same episode loop as one
    process: tests/test_envs_faults.py)."""
    from rlvr.envs.episodes import EnvFault

    env = {
        "name": "envs_for_tests:FaultyEnv",
        "params": {"fault": "hang", "at": 2, "problems": ["1", "3", "5", "7", "9"]},
        "max_turns": 3,
        "max_episode_tokens": 60,
        "step_timeout_s": 0.5,
    }
    env["on_error"] = "raise"
    messages = []
    for cfg in (
        local_config(Path("unused"), 1, env=env, reward={"function": None}),
        ray_config(Path("unused"), 1, 1, env=env, reward={"function": None}),
    ):
        cfg["logging"]["run_dir"] = str(tmp_path_factory.mktemp("raise") / "run")
        with pytest.raises(EnvFault) as caught:
            train(build_config(cfg))
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert "turn 2: step() did not answer within 0.5 s (env.step_timeout_s)" in messages[0]
    err = capfd.readouterr().err
    assert "failed" not in err and "recreated" not in err and "Traceback" not in err, err
