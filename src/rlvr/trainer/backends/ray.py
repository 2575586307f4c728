"""``distributed.backend: ray``: the run's parts as Ray actors, driven by the same loop
(:mod:`rlvr.trainer.loop`) as one process (docs/design.md, "The parts of a run"; docs/scaling.md).

* The driver (the process running ``rlvr train``) keeps the prompt sampler, the filters and the
  loop; it never holds the model.
* :class:`RayRollouts`: ``distributed.rollout_workers`` actors (:class:`RolloutWorker`); a draw's
  groups are split into contiguous shards, one per worker, whole groups each, sampled from
  their named streams (:mod:`rlvr.rollout.streams`) and scored in the worker; the shards come
  back in prompt order, so the batch does not depend on the number of workers.
* :class:`RayLearners`: ``distributed.learners`` actors (:class:`LearnerWorker`) forming one
  data-parallel group; rank 0 writes checkpoints and publishes weights to the workers.

Faults: every wait has a timeout (``distributed.start_timeout_s`` for the actors' start,
``distributed.timeout_s`` for every call after it; a worker playing environment
episodes is given one ``env.step_timeout_s`` more per episode, the most its hanging
environments can cost it under ``env.on_error: end_episode``). A rollout worker that dies or
stops answering (its process killed, its node gone) is replaced, given the weights it served
(the policy version of the batch being sampled) and its shard is sent again: no group is lost
or sampled twice, and the step's metrics equal an undisturbed run's. At most
``distributed.max_restarts`` replacements per run. An error the worker's task raises (an
environment fault under ``env.on_error: raise``, a reward failing) is not a worker fault: it is
raised here as one process raises it, never retried (environment calls have their own time
limit, ``env.step_timeout_s``, inside the worker). A learner failure ends the run (the trainer
adds the ``--resume`` command); resources the cluster cannot have fail at start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import torch

from rlvr import algorithms
from rlvr.config import Config, ConfigError
from rlvr.data import Problem, limit_task_prompts
from rlvr.devices import resolve_device
from rlvr.errors import RlvrError, WorkerFailed
from rlvr.grading.accuracy import AccuracyRecords, accuracy_metrics
from rlvr.models import load_tokenizer, resolve
from rlvr.rollout import SamplingParams
from rlvr.trainer.backends.ranks import LearnerRanks, Ranks
from rlvr.trainer.backends.ray_actors import LearnerWorker, RolloutWorker
from rlvr.trainer.backends.ray_pool import ActorPool, Key
from rlvr.trainer.batch import Samples
from rlvr.trainer.build import (
    RunParts,
    build_front,
    build_sampler,
    sampling_params,
)
from rlvr.trainer.collect import Collector
from rlvr.trainer.rollouts import merge_shards


class RayUnavailable(RlvrError, ValueError):
    """``distributed.backend: ray`` without Ray installed."""


class InfeasibleResources(RlvrError, ValueError):
    """The actors ask for more CPUs or GPUs than the Ray cluster has."""


class _DropTokenAuthNotice(logging.Filter):
    """Ray (2.60) warns at every ``ray.init`` that starts a local instance that it enabled token
    authentication: its default, which rlvr keeps (the token is in ``~/.ray/auth_token``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled for this")


_TOKEN_AUTH_NOTICE = _DropTokenAuthNotice()


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable(
            "distributed.backend: ray needs Ray: pip install 'rlvr[ray]' (or use "
            "distributed.backend: local)"
        ) from None
    return ray


def _fault_types(ray: Any) -> tuple[type[BaseException], ...]:
    """Exceptions that mean the actor (its process or its node) is gone or not answering."""
    ex = ray.exceptions
    names = ("RayActorError", "GetTimeoutError", "ObjectLostError", "WorkerCrashedError")
    return tuple(getattr(ex, n) for n in (*names, "NodeDiedError") if hasattr(ex, n))


def connect(cfg: Config) -> bool:
    """Join the cluster ``distributed.address`` names (null: start one here); returns whether
    this call started Ray (and should shut it down). Workers find the driver's modules (user
    rewards and tasks given as ``module:name``) through its working directory.

    An instance started here runs its workers at the driver's priority: Ray's default worker
    niceness, 15, is for workers that must not slow the node's own programs, but rlvr's actors
    are the run itself, and at 15 any other busy process starves them: tests/test_ray.py's
    killed-worker run, 34 s alone on a 2-core Intel Xeon, took 345 s (and failed) beside three
    busy loops at nice 0 and 123 s beside three at nice 10; with its workers at niceness 0, 72 s
    beside three at nice 0. A cluster started with ``ray start`` keeps its own setting
    (``RAY_worker_niceness=0 ray start ...``)."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    path = os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)
    if cfg.distributed.address is None:  # Ray's notice of its default for an instance of ours
        setup = "ray._private.authentication.authentication_token_setup"
        logging.getLogger(setup).addFilter(_TOKEN_AUTH_NOTICE)
    ray.init(
        address=cfg.distributed.address or "local",  # null: a new instance, never another's
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
        logging_level="WARNING",
        **({} if cfg.distributed.address else {"_system_config": {"worker_niceness": 0}}),
    )
    return True


RESOURCE_UNITS = 10_000
"""Ray counts resources in whole units of 1/10000 (a CPU share is a multiple of 0.0001)."""


def fitting_share(node_cpus: Sequence[float], actors: int) -> float:
    """The most CPUs each of ``actors`` actors can reserve so that all of them fit on nodes of
    these CPU counts (a node holds floor(its CPUs / share) of them), a multiple of Ray's unit;
    0 without CPUs. E.g. 3 actors on one 2-CPU node: 0.6666 each; on two: 1 each."""
    units = [round(n * RESOURCE_UNITS) for n in node_cpus if n > 0]
    shares = sorted({u // k for u in units for k in range(1, actors + 1)}, reverse=True)
    for share in shares:
        if share > 0 and sum(u // share for u in units) >= actors:
            return share / RESOURCE_UNITS
    return 0.0


def cpus_per_worker(cfg: Config) -> float:
    """The CPUs each actor reserves: ``distributed.cpus_per_worker``, or (null) the
    :func:`fitting_share` of the actors on the cluster's live nodes."""
    d = cfg.distributed
    if d.cpus_per_worker is not None:
        return d.cpus_per_worker
    nodes = import_ray().nodes()
    cpus = [n["Resources"].get("CPU", 0.0) for n in nodes if n.get("Alive")]
    return fitting_share(cpus, d.rollout_workers + d.learners)


def with_cpus(cfg: Config) -> Config:
    """``cfg`` with ``distributed.cpus_per_worker`` set (:func:`cpus_per_worker`), as the
    actors read it: what they reserve, their torch threads."""
    d = cfg.distributed
    if d.cpus_per_worker is not None:
        return cfg
    chosen = d.model_copy(update={"cpus_per_worker": cpus_per_worker(cfg)})
    return cfg.model_copy(update={"distributed": chosen})


def check_resources(cfg: Config) -> None:
    """Fail at once, naming the resource, when the actors ask for more than the cluster has
    (Ray would wait for it forever)."""
    ray = import_ray()
    d = cfg.distributed
    actors = d.rollout_workers + d.learners
    have = ray.cluster_resources()
    reserved = (("CPU", cpus_per_worker(cfg), "cpus"), ("GPU", d.gpus_per_worker, "gpus"))
    for name, each, key in reserved:
        need = each * actors
        if need > have.get(name, 0.0) + 1e-9:
            raise InfeasibleResources(
                f"distributed: {d.rollout_workers} rollout worker(s) and {d.learners} learner(s) "
                f"reserve {need:g} {name} ({each:g} each, distributed.{key}_per_worker) but the Ray "
                f"cluster has {have.get(name, 0.0):g} {name}: lower distributed.{key}_per_worker or "
                "the number of workers, or add nodes"
            )
    if resolve_device(cfg.train.device).type == "cuda" and not d.gpus_per_worker:
        raise ConfigError(
            "train.device is cuda but distributed.gpus_per_worker is 0: Ray hides the GPUs from "
            "actors that reserve none; set distributed.gpus_per_worker (e.g. 1, or 0.5 to share)"
        )


def _options(cfg: Config) -> dict[str, Any]:
    d = cfg.distributed
    return {"num_cpus": cpus_per_worker(cfg), "num_gpus": d.gpus_per_worker, "max_restarts": 0}


POOL = ActorPool()
"""This driver's idle actors (:mod:`.ray_pool`)."""


def _key(role: type, cfg: Config, node: str | None = None) -> Key:
    """The pool key of an actor of ``role`` for ``cfg`` (``node``: its required placement)."""
    return (role.__name__, cpus_per_worker(cfg), cfg.distributed.gpus_per_worker, node)


def _actor(ray: Any, role: type, key: Key, options: dict[str, Any], *args: Any) -> Any:
    """An actor of ``role`` started with ``args``: an idle one of ``key`` from :data:`POOL` (its
    run started in place), else a new one."""
    actor = POOL.take(ray, key)
    if actor is None:
        return ray.remote(role).options(**options).remote(*args)
    actor.rerun.remote(*args)  # the actor's next calls wait for it; a failure ends the actor
    return actor


class RayLearners(LearnerRanks):
    """The learners' group seen from the driver (:class:`~rlvr.trainer.protocols.Learners`):
    each rank an actor, called through Ray."""

    def __init__(self, cfg: Config, algo: algorithms.Algorithm) -> None:
        ray = import_ray()
        cfg = with_cpus(cfg)
        self.cfg, self._ray, self.version = cfg, ray, 0
        self.algo = algo
        self.device = resolve_device(cfg.train.device)
        self.sharded = cfg.train.sharding == "fsdp"
        data, world = cfg.model_dump(mode="json"), cfg.distributed.learners
        # rank 0 writes checkpoints: on this machine when it can, beside the run directory
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = ray.get_runtime_context().get_node_id()
        here = NodeAffinitySchedulingStrategy(node, soft=True)
        self.keys = [_key(LearnerWorker, cfg, node if rank == 0 else None) for rank in range(world)]
        self.ranks = [
            _actor(
                ray,
                LearnerWorker,
                self.keys[rank],
                {**_options(cfg), "scheduling_strategy": here if rank == 0 else "DEFAULT"},
                data,
                rank,
                world,
            )
            for rank in range(world)
        ]
        self._address = self.ranks[0].address.remote()  # answered once rank 0 has started

    def started(self) -> None:
        """Wait for the actors created by ``__init__`` (they load the model meanwhile, beside
        the rollout workers), then form their process group."""
        start = self.cfg.distributed.start_timeout_s
        address = self._get([self._address], "start", start)[0]
        infos = self._get(
            [r.setup.remote(address, self.cfg.distributed.timeout_s) for r in self.ranks],
            "start",
            start,
        )
        self.where = infos
        self.lr = infos[0]["lr"]
        self.precision = infos[0]["precision"]
        self.publish_bytes = infos[0]["publish_bytes"]  # the trained tensors: a LoRA adapter's

    def _get(self, refs: list[Any], what: str, timeout: float | None = None) -> list[Any]:
        """The results of ``refs``, waited for ``timeout`` s (``distributed.timeout_s``)."""
        try:
            return self._ray.get(refs, timeout=timeout or self.cfg.distributed.timeout_s)
        except _fault_types(self._ray) as err:
            raise WorkerFailed(
                f"a learner failed during {what} ({type(err).__name__}: "
                f"{str(err).splitlines()[0][:300] if str(err) else ''})"
            ) from None

    def start_update(self, data: Samples) -> list[Any]:
        """Send ``data`` to every learner and start their update; the calls' references."""
        ref = self._ray.put(data)
        return [r.update.remote(ref) for r in self.ranks]

    def update(
        self, data: Samples, meanwhile: Callable[[], None] = lambda: None
    ) -> tuple[dict[str, float], str | None]:
        """The learners' update; ``meanwhile`` runs while they train (the rollout workers
        sample the batches ahead)."""
        refs = self.start_update(data)
        meanwhile()
        metrics, bad, self.lr = self._get(refs, "update")[0]
        if bad is None:
            self.version += 1
        return metrics, bad

    def collective(self) -> list[Any]:
        """The ranks a call on the whole policy goes to (:data:`~.ranks.Ranks`' ``whole``)."""
        return self.ranks if self.sharded else self.ranks[:1]

    def call(self, ranks: Ranks, what: str, name: str, *args: Any) -> list[Any]:
        targets = self.ranks if ranks == "all" else self.collective()
        return self._get([getattr(r, name).remote(*args) for r in targets], what)

    def published_state(self, fresh: bool = False) -> Any:
        """An object reference to the policy's parameters as last published by rank 0
        (``fresh``: publish the current ones first)."""
        return self.call("whole", "publishing weights", "state", fresh)[0]

    def close(self, reuse: bool = False) -> None:
        """Stop the learners (``reuse``: keep them idle for this driver's next run)."""
        if reuse:
            POOL.give(self._ray, list(zip(self.keys, self.ranks, strict=True)), 30)
            return
        for actor in self.ranks:
            with contextlib.suppress(Exception):
                self._ray.kill(actor)


def shards(n_prompts: int, workers: int) -> list[tuple[int, int]]:
    """Contiguous prompt ranges [lo, hi), one per worker that gets any (sizes differ by one at
    most): whole groups go to one worker."""
    bounds = torch.arange(n_prompts).tensor_split(min(workers, max(n_prompts, 1)))
    return [(int(b[0]), int(b[-1]) + 1) for b in bounds if len(b)]


class RayRollouts:
    """Rollout workers seen from the collector (:class:`~rlvr.trainer.protocols.Rollouts`)."""

    def __init__(
        self,
        cfg: Config,
        user_reward: Any,
        learners: RayLearners,
        judge_name: str = "task",
        note: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True),
    ) -> None:
        ray = import_ray()
        cfg = with_cpus(cfg)
        self.cfg, self._ray, self.learners, self.note = cfg, ray, learners, note
        self.user_reward, self.judge_name = user_reward, judge_name
        self.options = {**_options(cfg), "scheduling_strategy": "SPREAD"}
        self.key = _key(RolloutWorker, cfg)
        self.data = cfg.model_dump(mode="json")
        self.workers = [self._start(i) for i in range(cfg.distributed.rollout_workers)]
        self.where = self._get_all(
            [w.ready.remote() for w in self.workers], "start", cfg.distributed.start_timeout_s
        )
        self.restarts, self.version, self.grouped = 0, 0, False
        self._stats: dict[str, float] = {}
        self.before_get: Callable[[RayRollouts, int], None] | None = None  # fault injection (tests)

    def _start(self, index: int) -> Any:
        return _actor(
            self._ray, RolloutWorker, self.key, self.options, self.data, self.user_reward, index
        )

    def _get_all(self, refs: list[Any], what: str, timeout: float | None = None) -> list[Any]:
        """The results of ``refs``, waited for ``timeout`` s (``distributed.timeout_s``)."""
        try:
            return self._ray.get(refs, timeout=timeout or self.cfg.distributed.timeout_s)
        except _fault_types(self._ray) as err:
            raise WorkerFailed(f"a rollout worker failed during {what} ({_brief(err)})") from None

    def _replace(self, index: int, err: BaseException) -> None:
        """Recreate worker ``index`` with the weights of the version it served."""
        self.restarts += 1
        limit = self.cfg.distributed.max_restarts
        if self.restarts > limit:
            raise WorkerFailed(
                f"rollout worker {index} failed ({_brief(err)}) after {limit} worker(s) were "
                "already recreated in this run (distributed.max_restarts)"
            )
        with contextlib.suppress(Exception):
            self._ray.kill(self.workers[index])
        worker = self._start(index)
        self.workers[index] = worker
        info = self._get_all(
            [worker.ready.remote()], "restart", self.cfg.distributed.start_timeout_s
        )[0]
        state = self.learners.published_state()
        self._get_all([worker.load_state.remote(state, self.version)], "restart")
        self.where[index] = info
        self.grouped = False  # the broadcast group is formed again with the new worker
        self.note(
            f"warning: rollout worker {index} failed ({_brief(err)}); recreated on node "
            f"{info['node'][:12]} (pid {info['pid']}) with policy version {self.version}, its "
            f"work sent again ({self.restarts}/{limit} restarts)"
        )

    def _wait_s(self, episodes: int) -> float:
        """How long a worker playing ``episodes`` episodes may take before it counts as dead:
        ``distributed.timeout_s``, plus one ``env.step_timeout_s`` per episode under
        ``env.on_error: end_episode`` (each episode may hang once before it is ended): a worker
        whose environments hang is never taken for a dead one and retried."""
        env = self.cfg.env
        hangs = episodes if env.name is not None and env.on_error == "end_episode" else 0
        return self.cfg.distributed.timeout_s + hangs * env.step_timeout_s

    def _call(
        self, method: str, args: dict[int, tuple], episodes: dict[int, int] | None = None
    ) -> dict[int, Any]:
        """``worker.method(*args[i])`` on the workers ``args`` names, side by side (worker i
        plays ``episodes[i]`` episodes, none when not given); a worker that fails is replaced
        and its call made again."""
        refs = {i: getattr(self.workers[i], method).remote(*a) for i, a in args.items()}
        out: dict[int, Any] = {}
        for i in list(refs):
            if self.before_get is not None:
                self.before_get(self, i)
            while i not in out:
                try:
                    out[i] = self._ray.get(
                        refs[i], timeout=self._wait_s((episodes or {}).get(i, 0))
                    )
                except _fault_types(self._ray) as err:
                    self._replace(i, err)
                    refs[i] = getattr(self.workers[i], method).remote(*args[i])
                except self._ray.exceptions.RayTaskError as err:
                    raise _user_error(err) from None
        return out

    def run(
        self, problems: list[Problem], n: int, sampling: SamplingParams, keys: torch.Tensor | None
    ) -> Samples:
        return self._run("run", problems, n, sampling, keys)

    def score(
        self, problems: list[Problem], completions: list[list[int]], group_ids: list[int]
    ) -> Samples:
        """Scored on the first worker (no sampling: the decoding of the texts and the reward's
        time only)."""
        return self._call("score", {0: (problems, completions, group_ids)})[0]

    def run_reference(
        self, problems: list[Problem], n: int, sampling: SamplingParams, keys: torch.Tensor | None
    ) -> Samples:
        """The reference's groups, on each worker's engine over its initial policy."""
        return self._run("run_reference", problems, n, sampling, keys)

    def _run(
        self,
        method: str,
        problems: list[Problem],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor | None,
    ) -> Samples:
        parts = shards(len(problems), len(self.workers))
        args = {
            i: (problems[lo:hi], n, sampling, None if keys is None else keys[lo * n : hi * n])
            for i, (lo, hi) in enumerate(parts)
        }
        results = self._call(method, args, {i: (hi - lo) * n for i, (lo, hi) in enumerate(parts)})
        scored = [results[i] for i in range(len(parts))]
        self._stats = {
            f"rollout/worker{i}/tokens_per_s": s.tokens_per_s for i, s in enumerate(scored)
        }
        return merge_shards(scored)

    def evaluate(
        self, problems: list[Problem], sampling: SamplingParams, seed: int
    ) -> dict[str, float]:
        """Held-out accuracy, the problems split across the workers (each problem's stream is
        named by its place in the whole list: the same samples as one process)."""
        parts = shards(len(problems), len(self.workers))
        args = {i: (problems[lo:hi], sampling, seed, lo) for i, (lo, hi) in enumerate(parts)}
        results = self._call("records", args, {i: hi - lo for i, (lo, hi) in enumerate(parts)})
        records = AccuracyRecords.concat([results[i] for i in range(len(parts))])
        return accuracy_metrics(records, problems, self.judge_name)

    def worker_stats(self) -> dict[str, float]:
        return dict(self._stats)

    def probe(self, prompt: list[int], sampling: SamplingParams, keys: torch.Tensor) -> list[Any]:
        """Every worker's publish-check completion (:mod:`rlvr.trainer.publish_check`)."""
        results = self._call(
            "probe", {i: (prompt, sampling, keys) for i in range(len(self.workers))}
        )
        return [p for i in range(len(self.workers)) for p in results[i]]

    def publish(self, learners: Any, version: int) -> dict[str, float]:
        """Give every worker the learners' current weights as ``version``: the trained tensors
        only (a LoRA policy's adapter; the frozen base never changes). Returns their size,
        ``rollout/publish_bytes`` (what each worker receives)."""
        if self.cfg.distributed.weight_sync == "object_store":
            state = self.learners.published_state(fresh=True)
            self._call("load_state", {i: (state, version) for i in range(len(self.workers))})
        else:
            self._broadcast(version)
        self.version = version
        return {"rollout/publish_bytes": float(self.learners.publish_bytes)}

    def _broadcast(self, version: int) -> None:
        """Learner rank 0 broadcasts to the workers (the group formed first when needed); a
        worker lost on the way is replaced (given the new weights) and the group formed again."""
        for _ in range(self.cfg.distributed.max_restarts + 1):
            try:
                if not self.grouped:
                    self._form_group()
                refs = [rank.broadcast.remote() for rank in self.learners.collective()]
                refs += [w.receive.remote(version) for w in self.workers]
                self._ray.get(refs, timeout=self.cfg.distributed.timeout_s)
                return
            except _fault_types(self._ray) + (self._ray.exceptions.RayTaskError,):
                self.grouped = False  # replaced workers are sent the new weights again
                self._call("ready", {i: () for i in range(len(self.workers))})  # replace the dead
        raise WorkerFailed(f"could not publish policy version {version} to the rollout workers")

    def _form_group(self) -> None:
        timeout = self.cfg.distributed.timeout_s
        rank0 = self.learners.ranks[0]
        address = self._get_all([rank0.address.remote()], "forming the weight group")[0]
        host, port = address.rsplit(":", 1)
        size = len(self.workers) + 1
        refs = [rank0.join_group.remote(host, int(port), size, timeout)]
        refs += [
            w.join_group.remote(host, int(port), i + 1, size, timeout)
            for i, w in enumerate(self.workers)
        ]
        self._ray.get(refs, timeout=timeout)
        self.grouped = True

    def close(self, reuse: bool = False) -> None:
        """Stop the workers (``reuse``: keep them idle for this driver's next run)."""
        if reuse:
            POOL.give(self._ray, [(self.key, w) for w in self.workers], 30)
            return
        for worker in self.workers:
            with contextlib.suppress(Exception):
                self._ray.get(worker.close.remote(), timeout=30)
            with contextlib.suppress(Exception):
                self._ray.kill(worker)


def _user_error(err: BaseException) -> BaseException:
    """What a worker's task raised, as the user sees it in one process: rlvr's own error (an
    environment fault, a reward failing) without Ray's remote traceback; anything else as
    Ray gives it (a bug: the traceback is the point). Neither is a worker fault: the same
    call would fail again on a fresh worker."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, RlvrError) else err


def _brief(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200]}" if text else type(err).__name__


def build(
    cfg: Config,
    user_reward: Callable[..., float] | None,
    cleanup: contextlib.ExitStack,
) -> RunParts:
    """The run's parts on Ray (see the module docstring): the task, reward and prompt sampler
    here, the learners and rollout workers as actors (stopped by ``cleanup``)."""
    front = build_front(cfg, user_reward, cleanup)  # bad data or rewards fail before Ray starts
    started = connect(cfg)
    ray = import_ray()
    if started:
        cleanup.callback(ray.shutdown)
    cfg = with_cpus(cfg)  # the actors' share of the cluster, once
    check_resources(cfg)
    node = ray.get_runtime_context().get_node_id()
    keys = {_key(RolloutWorker, cfg), _key(LearnerWorker, cfg), _key(LearnerWorker, cfg, node)}
    POOL.keep_only(ray, keys if cfg.distributed.reuse_actors else set())
    tokenizer = load_tokenizer(cfg.model.name)
    from transformers import AutoConfig

    shape = SimpleNamespace(config=AutoConfig.from_pretrained(str(resolve(cfg.model.name))))
    front.task, _ = limit_task_prompts(front.task, tokenizer, shape, cfg)
    sampling, greedy = sampling_params(cfg, tokenizer, front.token_stats)
    sampler = build_sampler(cfg, front.task, front.algo)
    start = time.perf_counter()
    keep = cfg.distributed.reuse_actors and not started  # an instance of ours ends with the run

    def close(parts: Any) -> Callable[..., None]:
        return lambda failed, *_: parts.close(reuse=keep and failed is None)

    learners = RayLearners(cfg, front.algo)  # its actors start while the workers do
    cleanup.push(close(learners))
    rollouts = RayRollouts(cfg, user_reward, learners, front.judge.name)
    cleanup.push(close(rollouts))
    learners.started()
    print(
        f"ray: {len(rollouts.workers)} rollout worker(s), {len(learners.ranks)} learner(s) on "
        f"{len({w['node'] for w in [*rollouts.where, *learners.where]})} node(s), "
        f"{cpus_per_worker(cfg):g} CPU each, started in {time.perf_counter() - start:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    collector = Collector(rollouts, sampler, front.algo, cfg, sampling, greedy, tokenizer=tokenizer)
    return front.parts(tokenizer, learners, collector, int(shape.config.vocab_size))
