"""The rollout side of a run: prompts from the sampler -> G completions each -> rewards -> one
:class:`~rlvr.trajectories.Trajectories` batch (docs/design.md, "The parts of a run").

A :class:`Collector` draws the prompts, names each sample's random stream (seed, step, draw,
prompt, sample: :mod:`rlvr.rollout.streams`), hands the groups to its :class:`Rollouts` (the
engine and the reward: in this process, :class:`LocalRollouts`, or spread over Ray rollout
workers, :mod:`rlvr.distributed`), and turns the scored groups into the step's batch (filters,
dynamic sampling, the sampler's statistics). It never touches the optimizer: the learner trains
on what it returns and publishes new weights back (:meth:`Collector.publish`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from rlvr import algorithms
from rlvr.config import Config
from rlvr.curriculum.base import PromptSampler
from rlvr.data import Problem, Task
from rlvr.envs.agent import Agent, counts, episode_metrics, succeeded
from rlvr.envs.episodes import Episode
from rlvr.evaluation import Judge
from rlvr.evaluation.accuracy import AccuracyRecords, accuracy_metrics, sample_and_judge
from rlvr.rewards.reference_probability import reference_answer_logprobs
from rlvr.rewards.registry import CombinedReward, RewardBreakdown
from rlvr.rollout import Rollout, RolloutEngine, SamplingParams
from rlvr.rollout.streams import group_keys, stream_key
from rlvr.trajectories import Trajectories, joined, merge


@dataclass
class ReferenceScorer:
    """The policy's log-probs of each problem's reference answer written after a completion,
    the fields of RLPR / VeriFree rewards (:func:`reference_answer_logprobs`)."""

    policy: torch.nn.Module
    tokenizer: Any
    answer_format: str
    micro_batch_size: int
    dtype: torch.dtype

    def __call__(
        self, rollout: Rollout, texts: list[str], owners: list[Problem]
    ) -> dict[str, list[float]]:
        return reference_answer_logprobs(
            self.policy,
            self.tokenizer,
            rollout.prompt_ids,
            rollout.group_ids.tolist(),
            texts,
            [p.answer for p in owners],
            self.answer_format,
            self.micro_batch_size,
            self.dtype,
        )


@dataclass
class Scored:
    """Groups sampled and scored (plain data: it comes back from rollout workers).

    N = P * n samples of P prompts, sample i of prompt i // n. ``breakdown`` holds the reward's
    unweighted terms and error counts per sample; ``tokens_per_s``: the engine's throughput.
    Agent episodes (:mod:`rlvr.envs`) also carry their prompts (the environment's first
    messages), the per-sample fields of :class:`~rlvr.trajectories.Trajectories` they fill
    (action masks, turn rewards, anchors, transcripts) and their summed counts
    (:func:`rlvr.envs.agent.counts`).
    """

    completion_ids: list[list[int]]
    logprobs: list[list[float]]
    finished: list[bool]
    texts: list[str]
    breakdown: RewardBreakdown
    seconds: float
    tokens_per_s: float
    reward_seconds: float
    prompt_ids: list[list[int]] | None = None
    action_mask: list[list[int]] | None = None
    turn_rewards: list[list[float]] | None = None
    anchors: list[list[Any]] | None = None
    transcripts: list[list[dict[str, Any]]] | None = None
    episode_counts: dict[str, float] | None = None


def concat_scored(parts: list[Scored]) -> Scored:
    """Shards of one draw, in prompt order, as one :class:`Scored` (throughput: tokens over the
    slowest shard's time, the shards ran side by side)."""
    seconds = max(p.seconds for p in parts)
    tokens = sum(len(c) for p in parts for c in p.completion_ids)
    counts = None
    if parts[0].episode_counts is not None:
        counts = {k: sum(p.episode_counts[k] for p in parts) for k in parts[0].episode_counts}
    return Scored(
        [c for p in parts for c in p.completion_ids],
        [x for p in parts for x in p.logprobs],
        [x for p in parts for x in p.finished],
        [x for p in parts for x in p.texts],
        RewardBreakdown.concat([p.breakdown for p in parts]),
        seconds,
        tokens / max(seconds, 1e-9),
        max(p.reward_seconds for p in parts),
        joined([p.prompt_ids for p in parts]),
        joined([p.action_mask for p in parts]),
        joined([p.turn_rewards for p in parts]),
        joined([p.anchors for p in parts]),
        joined([p.transcripts for p in parts]),
        counts,
    )


def sample_and_score(
    engine: RolloutEngine,
    reward: CombinedReward,
    reference_scorer: ReferenceScorer | None,
    decode: Callable[[list[int]], str],
    problems: list[Problem],
    prompt_ids: list[list[int]],
    n: int,
    sampling: SamplingParams,
    keys: torch.Tensor | None,
) -> Scored:
    """Sample ``n`` completions of each prompt (sample i from stream ``keys[i]``) and score them
    with ``reward`` (each prompt's samples are one group); the work of a rollout worker."""
    rollout = engine.generate(prompt_ids, n, sampling, keys)
    texts = [decode(c) for c in rollout.completion_ids]
    start = time.perf_counter()
    ids = rollout.group_ids.tolist()
    owners = [problems[i] for i in ids]
    fields: dict[str, list[float]] = {"num_tokens": [len(c) for c in rollout.completion_ids]}
    if rollout.token_entropy:  # mean over each completion's tokens
        fields["token_entropy"] = [sum(e) / max(len(e), 1) for e in rollout.token_entropy]
        fields["self_certainty"] = [sum(c) / max(len(c), 1) for c in rollout.self_certainty]
    if reference_scorer is not None:
        fields.update(reference_scorer(rollout, texts, owners))
    breakdown = reward(texts, owners, group_ids=ids, **fields)
    return Scored(
        rollout.completion_ids,
        rollout.logprobs,
        rollout.finished,
        texts,
        breakdown,
        rollout.stats["rollout/seconds"],
        rollout.stats["rollout/tokens_per_s"],
        time.perf_counter() - start,
    )


def play_and_score(
    engine: RolloutEngine,
    agent: Agent,
    problems: list[Problem],
    n: int,
    sampling: SamplingParams,
    keys: torch.Tensor | None,
) -> Scored:
    """Play ``n`` episodes of each problem (:meth:`rlvr.envs.agent.Agent.play`); the
    environment's rewards are the scores (one term, ``env``: each episode's return)."""
    start = time.perf_counter()
    prompts, episodes = agent.play(engine, problems, n, sampling, keys)
    seconds = time.perf_counter() - start
    returns = [e.reward for e in episodes]
    breakdown = RewardBreakdown(
        total=returns,
        components={"env": returns},
        weights={"env": 1.0},
        errors={"env": 0},
        reasons={"env": [None] * len(episodes)},
    )
    sampled = sum(sum(e.action_mask) for e in episodes)
    return Scored(
        [e.completion_ids for e in episodes],
        [e.logprobs for e in episodes],
        [e.finished for e in episodes],
        [e.last_action for e in episodes],
        breakdown,
        seconds,
        sampled / max(seconds, 1e-9),
        0.0,
        prompts,
        [e.action_mask for e in episodes],
        [e.turn_rewards for e in episodes],
        [e.anchors for e in episodes],
        [e.messages for e in episodes],
        counts(episodes),
    )


def _kept(values: list | None, rows: list[int]) -> list | None:
    return None if values is None else [values[i] for i in rows]


def episode_records(episodes: list[Episode]) -> AccuracyRecords:
    """Held-out records of one episode per problem: success, return, tokens after the prompt,
    not truncated, and the agent extras (turns, tool calls and errors, invalid actions)."""
    return AccuracyRecords(
        [succeeded(e) for e in episodes],
        [e.reward for e in episodes],
        [len(e.completion_ids) for e in episodes],
        [not e.truncated for e in episodes],
        {
            "turns": [float(e.num_turns) for e in episodes],
            "tool_calls": [float(e.tool_calls) for e in episodes],
            "tool_errors": [float(e.tool_errors) for e in episodes],
            "invalid_actions": [float(e.invalid_actions) for e in episodes],
        },
    )


class Rollouts(Protocol):
    """Where groups are sampled and scored: in this process (:class:`LocalRollouts`) or on Ray
    rollout workers (:class:`rlvr.distributed.ray_backend.RayRollouts`); the same results either way."""

    def run(
        self,
        problems: list[Problem],
        prompt_ids: list[list[int]],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor | None,
    ) -> Scored:
        """Sample and score ``n`` completions of each prompt (:func:`sample_and_score`)."""

    def publish(self, policy: Any, version: int) -> None:
        """Serve ``policy``'s weights (a module, or a learner's handle) as ``version``."""

    def evaluate(
        self, problems: list[Problem], sampling: SamplingParams, seed: int
    ) -> dict[str, float]:
        """Held-out accuracy of the served policy (:func:`rlvr.evaluation.evaluate_accuracy`)."""

    def worker_stats(self) -> dict[str, float]:
        """Per-worker metrics of the last draws (empty in one process)."""


@dataclass
class LocalRollouts:
    """Sampling and scoring in this process, with the run's engine and reward."""

    engine: RolloutEngine
    reward: CombinedReward
    reference_scorer: ReferenceScorer | None
    task: Task
    judge: Judge
    encode: Callable[[Problem], list[int]]
    decode: Callable[[list[int]], str]
    agent: Agent | None = None

    def run(
        self,
        problems: list[Problem],
        prompt_ids: list[list[int]],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor | None,
    ) -> Scored:
        if self.agent is not None:  # episodes: the prompts are the environments' first messages
            return play_and_score(self.engine, self.agent, problems, n, sampling, keys)
        return sample_and_score(
            self.engine,
            self.reward,
            self.reference_scorer,
            self.decode,
            problems,
            prompt_ids,
            n,
            sampling,
            keys,
        )

    def publish(self, policy: Any, version: int) -> None:
        self.engine.update_weights(policy)

    def records(
        self, problems: list[Problem], sampling: SamplingParams, seed: int, first: int = 0
    ) -> AccuracyRecords:
        """One judged completion per problem (``first``: the problems' offset in the whole
        held-out list, which names their streams)."""
        if self.agent is not None:
            keys = group_keys(stream_key(seed), len(problems), 1, first_prompt=first)
            return episode_records(self.agent.play(self.engine, problems, 1, sampling, keys)[1])
        return sample_and_judge(
            self.engine,
            self.task,
            problems,
            self.encode,
            self.decode,
            sampling,
            seed,
            self.judge,
            first,
        )

    def evaluate(
        self, problems: list[Problem], sampling: SamplingParams, seed: int
    ) -> dict[str, float]:
        return accuracy_metrics(self.records(problems, sampling, seed), problems, self.judge.name)

    def worker_stats(self) -> dict[str, float]:
        return {}


@dataclass
class Collector:
    """Samples and scores one step's batch (see the module docstring).

    Attributes:
        rollouts: where groups are sampled and scored (:class:`Rollouts`).
        sampler: the prompt sampler (the task's stream, or a curriculum).
        algo: the resolved preset (group size filters, dynamic sampling, ReMax, DAPO).
        cfg: the run's config (``rollout`` section, ``train.seed``).
        encode: a problem -> its prompt's token ids.
        sampling: sampling parameters; ``greedy``: the same at temperature 0 (ReMax, eval).
        phase: told "sampling" as the step moves (the progress display).
        version: the policy version the rollouts serve (see :meth:`publish`).
    """

    rollouts: Rollouts
    sampler: PromptSampler
    algo: algorithms.Preset
    cfg: Config
    encode: Callable[[Problem], list[int]]
    sampling: SamplingParams
    greedy: SamplingParams
    phase: Callable[[str], None] = lambda name: None
    version: int = 0
    _reward_metrics: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    _reward_seconds: float = 0.0
    _episode_counts: dict[str, float] = dataclasses.field(default_factory=dict)

    def publish(self, policy: Any, version: int) -> None:
        """Serve ``policy``'s weights from now on, as policy ``version``."""
        self.rollouts.publish(policy, version)
        self.version = version

    def rewards(self, scored: Scored, record: bool = True) -> torch.Tensor:
        """Rewards [N] of scored completions, with DAPO's overlong penalty when the preset has
        one; ``record``: count them in the step's reward metrics (not ReMax's greedy
        baseline completions)."""
        breakdown = scored.breakdown
        rewards = torch.tensor(breakdown.total, dtype=torch.float)
        for key, value in breakdown.metrics().items() if record else ():
            self._reward_metrics.setdefault(key, []).append(value)
        if self.algo.overlong_buffer_frac is not None:
            lengths = torch.tensor([len(c) for c in scored.completion_ids])
            budget = self.cfg.max_completion_tokens
            cache_len = max(1, round(self.algo.overlong_buffer_frac * budget))
            rewards = rewards + algorithms.overlong_penalty(lengths, budget, cache_len)
        self._reward_seconds += scored.reward_seconds
        return rewards

    def _draw(
        self, step: int, draw: int, n: int, draws: algorithms.GroupAccumulator
    ) -> Trajectories:
        """Draw ``draw`` of step ``step``: P prompts, n samples each (sample j of prompt i from
        the stream (seed, step, draw, i, j)), scored; the samples the filters keep."""
        algo, P, G = self.algo, self.cfg.rollout.prompts_per_step, self.cfg.rollout.group_size
        self.phase("sampling")
        problems = self.sampler.draw(P)  # its checkpointed state makes every draw resumable
        agent = self.cfg.env.name is not None  # the environments' first messages are the prompts
        prompt_ids = [] if agent else [self.encode(p) for p in problems]
        keys = group_keys(stream_key(self.cfg.train.seed, step, draw), len(problems), n)
        scored = self.rollouts.run(problems, prompt_ids, n, self.sampling, keys)
        if scored.prompt_ids is not None:
            prompt_ids = scored.prompt_ids
        if scored.episode_counts is not None:
            for key, value in scored.episode_counts.items():
                self._episode_counts[key] = self._episode_counts.get(key, 0.0) + value
        ids = torch.arange(len(problems)).repeat_interleave(n)
        rewards = self.rewards(scored)
        self.sampler.update(problems, rewards, ids)  # every group, before any filtering
        keep = torch.arange(len(scored.texts))
        if algo.group_filter:  # GFPO: keep G of the n samples of each group
            lengths = torch.tensor([len(c) for c in scored.completion_ids])
            keep = algorithms.group_filter(rewards, ids, lengths, G, algo.group_filter)
        keep = keep[draws.add(rewards[keep], ids[keep])]
        greedy_rewards = None
        if algo.advantage == "remax":  # ReMax baseline: reward of the greedy completion
            greedy = self.rollouts.run(problems, prompt_ids, 1, self.greedy, None)
            greedy_rewards = self.rewards(greedy, record=False)[ids[keep]]
        k = keep.tolist()
        return Trajectories(
            problems,
            prompt_ids,
            [scored.completion_ids[i] for i in k],
            [scored.logprobs[i] for i in k],
            [scored.finished[i] for i in k],
            [scored.texts[i] for i in k],
            rewards[keep],
            ids[keep],
            greedy_rewards,
            scored.tokens_per_s,
            {
                label: [values[i] for i in k]
                for label, values in scored.breakdown.components.items()
            },
            self.version,
            _kept(scored.action_mask, k),
            _kept(scored.turn_rewards, k),
            _kept(scored.anchors, k),
            _kept(scored.transcripts, k),
        )

    def collect(self, step: int) -> tuple[Trajectories, dict[str, float]]:
        """The batch of step ``step`` (1-based): draw prompts, sample, score, tell the sampler;
        refill until the batch is full (dynamic sampling). Returns the batch and the step's
        sampling and reward metrics."""
        algo, G, P = self.algo, self.cfg.rollout.group_size, self.cfg.rollout.prompts_per_step
        n = G * (algo.group_filter_oversample or 1) if algo.group_filter else G
        draws = algorithms.GroupAccumulator(
            P, algo.max_draws if algo.dynamic_sampling else 1, algo.dynamic_sampling
        )
        parts = []
        while not draws.done:
            parts.append(self._draw(step, len(parts), n, draws))
        metrics = {f"sampling/{k}": v for k, v in draws.metrics().items()}
        # per draw: error counts add up, means are averaged over the step's draws
        metrics.update(
            {
                k: sum(v) / (1 if k.endswith("errors") else len(v))
                for k, v in self._reward_metrics.items()
            }
        )
        metrics.update(self.sampler.metrics())
        if self._episode_counts:
            metrics.update(episode_metrics(self._episode_counts))
            self._episode_counts.clear()
        metrics.update(self.rollouts.worker_stats())
        metrics["time/reward"] = self._reward_seconds
        self._reward_metrics.clear()
        self._reward_seconds = 0.0
        return merge(parts), metrics

    def evaluate(self, problems: list[Problem]) -> dict[str, float]:
        """Held-out accuracy of the served policy: greedy, and sampled with the run's sampling
        settings when ``eval.sampled`` (``eval/greedy_*``, ``eval/sampled_*``)."""
        seed = 1234  # the evaluation's own streams: every evaluation samples alike
        greedy = self.rollouts.evaluate(problems, self.greedy, seed)
        out = {f"eval/greedy_{k}": v for k, v in greedy.items()}
        if self.cfg.eval.sampled:
            sampled = dataclasses.replace(
                self.greedy,
                temperature=self.sampling.temperature,
                top_p=self.sampling.top_p,
                top_k=self.sampling.top_k,
                min_p=self.sampling.min_p,
            )
            acc = self.rollouts.evaluate(problems, sampled, seed)
            kept = ("accuracy", "reward_mean")
            out.update({f"eval/sampled_{k}": v for k, v in acc.items() if k.startswith(kept)})
        return out
