"""``distributed.backend: local``: every part of the run in this process. The engine samples
from the policy module the learner trains (``publish`` hands it the updated weights in memory);
with ``sync_every`` > 1 (semi-online) from its own copy, which a publish updates.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from rlvr.algorithms import plays_reference
from rlvr.config import Config
from rlvr.data import Problem, limit_task_prompts
from rlvr.engines import build_engine, close_engine
from rlvr.grading.accuracy import AccuracyRecords, accuracy_metrics
from rlvr.guards import vocabulary_size
from rlvr.models import load_tokenizer
from rlvr.progress import startup
from rlvr.rollout import RolloutEngine, SamplingParams
from rlvr.trainer.batch import Samples
from rlvr.trainer.build import (
    Dtypes,
    Front,
    RunParts,
    build_front,
    build_learner,
    build_player,
    build_sampler,
    decode_tokens,
    load_policy,
    sampling_params,
)
from rlvr.trainer.collect import Collector
from rlvr.trainer.publish_check import EngineProbe
from rlvr.trainer.rollouts import Given, OneStep, Player


@dataclass
class LocalRollouts:
    """Episodes played and scored in this process (:class:`~rlvr.trainer.protocols.Rollouts`),
    with the run's engine and player."""

    engine: RolloutEngine
    player: Player
    judge_name: str
    reference: RolloutEngine | None = None

    def run(
        self, problems: list[Problem], n: int, sampling: SamplingParams, keys: torch.Tensor | None
    ) -> Samples:
        return self.player.play(self.engine, problems, n, sampling, keys)

    def run_reference(
        self, problems: list[Problem], n: int, sampling: SamplingParams, keys: torch.Tensor | None
    ) -> Samples:
        if self.reference is None:
            raise RuntimeError(
                "this run keeps no reference engine (advantages aapo, pvpo and alol keep one)"
            )
        # the reference samples even where the run trains on the data's completions
        player = self.player.sampled if isinstance(self.player, Given) else self.player
        return player.play(self.reference, problems, n, sampling, keys)

    def score(
        self, problems: list[Problem], completions: list[list[int]], group_ids: list[int]
    ) -> Samples:
        if not isinstance(self.player, OneStep):
            raise ValueError("given completions are scored as one-step replies to a plain task")
        return self.player.score(problems, completions, group_ids)

    def publish(self, weights: torch.nn.Module, version: int) -> dict[str, float]:
        self.engine.update_weights(weights)
        return {}

    def probe(
        self, prompt: list[int], sampling: SamplingParams, keys: torch.Tensor, where: str = ""
    ) -> list[EngineProbe]:
        out = self.engine.generate([prompt], len(keys), sampling, keys)
        name = f"{self.engine.name} engine{where}"
        return [
            EngineProbe(name, self.engine.dtype, ids, logprobs)
            for ids, logprobs in zip(out.completion_ids, out.logprobs, strict=True)
        ]

    def records(
        self, problems: list[Problem], sampling: SamplingParams, seed: int, first: int = 0
    ) -> AccuracyRecords:
        """One judged episode per problem (``first``: the problems' offset in the whole
        held-out list, which names their streams)."""
        return self.player.records(self.engine, problems, sampling, seed, first)

    def evaluate(
        self, problems: list[Problem], sampling: SamplingParams, seed: int
    ) -> dict[str, float]:
        return accuracy_metrics(self.records(problems, sampling, seed), problems, self.judge_name)

    def worker_stats(self) -> dict[str, float]:
        return {}


def local_rollouts(
    cfg: Config,
    front: Front,
    tokenizer: object,
    policy: torch.nn.Module,
    dtypes: Dtypes,
    cleanup: contextlib.ExitStack | None,
) -> LocalRollouts:
    """Playing and scoring over ``policy`` in this process: the engine (closed by ``cleanup``)
    and the run's player. Ray's rollout workers build theirs with it too."""
    decode = partial(decode_tokens, tokenizer)
    served = policy
    if (
        front.algo.objective.sync_every > 1
    ):  # semi-online: the engine keeps its snapshot between syncs
        served = copy.deepcopy(policy).requires_grad_(False)
        for name, param in served.named_parameters():  # update_weights copies these
            param.requires_grad_(dict(policy.named_parameters())[name].requires_grad)
    engine = build_engine(cfg, served, tokenizer, dtypes.rollout, decode)
    if cleanup is not None:
        cleanup.callback(close_engine, engine)
    reference = None
    if plays_reference(front.algo.advantage.name):  # AAPO, A-LoL
        frozen = copy.deepcopy(policy).requires_grad_(False)  # the initial policy, before any step
        reference = build_engine(cfg, frozen, tokenizer, dtypes.rollout, decode)
        if cleanup is not None:
            cleanup.callback(close_engine, reference)
    player = build_player(cfg, front, tokenizer, policy, dtypes)
    return LocalRollouts(engine, player, front.judge.name, reference)


def build(
    cfg: Config,
    user_reward: Callable[..., float] | None,
    cleanup: contextlib.ExitStack,
) -> RunParts:
    """The run's parts in this process: the task and reward first (bad data or a broken reward
    fail before any model loads), then the policy, learner, prompt sampler and rollouts. What
    must be closed (the reward's workers, the engine) is registered on ``cleanup``."""
    front = build_front(cfg, user_reward, cleanup)
    tokenizer = load_tokenizer(cfg.model.name)
    with startup(f"loading the policy {cfg.model.name}"):
        policy = load_policy(cfg)
    task, _ = limit_task_prompts(front.task, tokenizer, policy, cfg)
    front.task = task
    sampling, greedy = sampling_params(cfg, tokenizer, front.token_stats)
    generator = torch.Generator().manual_seed(cfg.train.seed)
    with startup("choosing the precision"):  # rollout.dtype / train.autocast auto: measured
        dtypes = Dtypes.of(cfg, policy)  # once: the learner's, the engine's, the scorers'
    with startup("building the learner"):
        learner = build_learner(cfg, front.algo, policy, tokenizer.pad_token_id, generator, dtypes)
    sampler = build_sampler(cfg, task, front.algo)
    with startup("building the rollout engine"):
        rollouts = local_rollouts(cfg, front, tokenizer, policy, dtypes, cleanup)
    collector = Collector(rollouts, sampler, front.algo, cfg, sampling, greedy, tokenizer=tokenizer)
    return front.parts(tokenizer, learner, collector, vocabulary_size(policy, tokenizer))
