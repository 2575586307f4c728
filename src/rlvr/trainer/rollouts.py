"""Sampling and scoring groups: the one rollout path every run takes (docs/design.md, "One
training step", step 2-3).

A group is ``n`` episodes of one problem. A :class:`Player` plays them on an engine and scores
them, returning :class:`Scored`; the collector, the learner and evaluation never ask which kind
of episode it was. Two players:

* :class:`OneStep`: a plain task is the one-step environment, prompt -> one completion ->
  the reward of the whole group (so group rewards such as TTRL's majority vote see all of a
  problem's completions at once); its episodes are sampled as one batch;
* :class:`MultiTurn`: an agent environment's episodes (:mod:`rlvr.envs.agent`), token-exact
  across turns; the environment's returns are the rewards.

:class:`Rollouts` (``rlvr.trainer.protocols``) runs a player in this process or on Ray workers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from rlvr.data import Problem, Task
from rlvr.envs.agent import Agent, counts, succeeded
from rlvr.envs.episodes import Episode
from rlvr.judging import Judge
from rlvr.judging.accuracy import AccuracyRecords, sample_and_judge
from rlvr.rewards.combined import CombinedReward, RewardBreakdown
from rlvr.rewards.reference_probability import reference_answer_logprobs
from rlvr.rollout import Rollout, RolloutEngine, SamplingParams
from rlvr.rollout.streams import group_keys, stream_key
from rlvr.trainer.batch import concat


@dataclass(kw_only=True)
class Scored:
    """Groups played and scored (plain data: it comes back from rollout workers).

    N = P * n samples of P problems, sample i of problem i // n.

    Attributes:
        prompt_ids: [P] each problem's prompt token ids (a plain task's chat, or the
            environment's first messages, through the chat template).
        completion_ids, logprobs, finished, texts: [N] per sample, as in
            :class:`~rlvr.trainer.batch.Trajectories`.
        breakdown: the reward's unweighted terms and error counts per sample.
        seconds, tokens_per_s: the engine's time and throughput; ``reward_seconds``: scoring.
        action_mask, turn_rewards, anchors, transcripts: [N] per multi-turn episode, else None.
        episode_counts: the episodes' summed counts (:func:`rlvr.envs.agent.counts`) or None.
    """

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    logprobs: list[list[float]]
    finished: list[bool]
    texts: list[str]
    breakdown: RewardBreakdown
    seconds: float
    tokens_per_s: float
    reward_seconds: float
    action_mask: list[list[int]] | None = None
    turn_rewards: list[list[float]] | None = None
    anchors: list[list[Any]] | None = None
    transcripts: list[list[dict[str, Any]]] | None = None
    episode_counts: dict[str, float] | None = None

    @staticmethod
    def merge(parts: list[Scored]) -> Scored:
        """Shards of one draw, in prompt order, as one (throughput: tokens over the slowest
        shard's time, the shards ran side by side)."""
        seconds = max(p.seconds for p in parts)
        tokens = sum(len(c) for p in parts for c in p.completion_ids)
        counted = None
        if parts[0].episode_counts is not None:
            keys = parts[0].episode_counts
            counted = {k: sum(p.episode_counts[k] for p in parts) for k in keys}  # type: ignore[index]
        return concat(
            parts,
            breakdown=RewardBreakdown.concat([p.breakdown for p in parts]),
            seconds=seconds,
            tokens_per_s=tokens / max(seconds, 1e-9),
            reward_seconds=max(p.reward_seconds for p in parts),
            episode_counts=counted,
        )


class Player(Protocol):
    """Plays and scores the episodes of problems on an engine."""

    def play(
        self,
        engine: RolloutEngine,
        problems: list[Problem],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor | None,
    ) -> Scored:
        """``n`` scored episodes of each problem, episode i from the stream ``keys[i]``."""

    def records(
        self,
        engine: RolloutEngine,
        problems: list[Problem],
        sampling: SamplingParams,
        seed: int,
        first: int,
    ) -> AccuracyRecords:
        """One judged episode per held-out problem (``first``: the problems' offset in the whole
        held-out list, which names their streams)."""


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
class OneStep:
    """A plain task as the one-step environment: each problem's prompt (its chat through the
    template, ``encode``), one sampled completion per episode, and the reward of the group
    (:class:`~rlvr.rewards.combined.CombinedReward`; a group reward reads the whole group)."""

    reward: CombinedReward
    reference_scorer: ReferenceScorer | None
    task: Task
    judge: Judge
    encode: Callable[[Problem], list[int]]
    decode: Callable[[list[int]], str]

    def play(
        self,
        engine: RolloutEngine,
        problems: list[Problem],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor | None,
    ) -> Scored:
        prompt_ids = [self.encode(p) for p in problems]
        rollout = engine.generate(prompt_ids, n, sampling, keys)
        texts = [self.decode(c) for c in rollout.completion_ids]
        start = time.perf_counter()
        ids = rollout.group_ids.tolist()
        owners = [problems[i] for i in ids]
        fields: dict[str, list[float]] = {"num_tokens": [len(c) for c in rollout.completion_ids]}
        if rollout.token_entropy:  # mean over each completion's tokens
            fields["token_entropy"] = [sum(e) / max(len(e), 1) for e in rollout.token_entropy]
            fields["self_certainty"] = [sum(c) / max(len(c), 1) for c in rollout.self_certainty]
        if self.reference_scorer is not None:
            fields.update(self.reference_scorer(rollout, texts, owners))
        breakdown = self.reward(texts, owners, group_ids=ids, **fields)
        return Scored(
            prompt_ids=prompt_ids,
            completion_ids=rollout.completion_ids,
            logprobs=rollout.logprobs,
            finished=rollout.finished,
            texts=texts,
            breakdown=breakdown,
            seconds=rollout.stats["rollout/seconds"],
            tokens_per_s=rollout.stats["rollout/tokens_per_s"],
            reward_seconds=time.perf_counter() - start,
        )

    def records(
        self,
        engine: RolloutEngine,
        problems: list[Problem],
        sampling: SamplingParams,
        seed: int,
        first: int,
    ) -> AccuracyRecords:
        return sample_and_judge(
            engine,
            self.task,
            problems,
            self.encode,
            self.decode,
            sampling,
            seed,
            self.judge,
            first,
        )


@dataclass
class MultiTurn:
    """An agent environment's episodes (:meth:`rlvr.envs.agent.Agent.play`); each episode's
    return is its reward (one term, ``env``)."""

    agent: Agent

    def play(
        self,
        engine: RolloutEngine,
        problems: list[Problem],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor | None,
    ) -> Scored:
        start = time.perf_counter()
        prompts, episodes = self.agent.play(engine, problems, n, sampling, keys)
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
            prompt_ids=prompts,
            completion_ids=[e.completion_ids for e in episodes],
            logprobs=[e.logprobs for e in episodes],
            finished=[e.finished for e in episodes],
            texts=[e.last_action for e in episodes],
            breakdown=breakdown,
            seconds=seconds,
            tokens_per_s=sampled / max(seconds, 1e-9),
            reward_seconds=0.0,
            action_mask=[e.action_mask for e in episodes],
            turn_rewards=[e.turn_rewards for e in episodes],
            anchors=[e.anchors for e in episodes],
            transcripts=[e.messages for e in episodes],
            episode_counts=counts(episodes),
        )

    def records(
        self,
        engine: RolloutEngine,
        problems: list[Problem],
        sampling: SamplingParams,
        seed: int,
        first: int,
    ) -> AccuracyRecords:
        keys = group_keys(stream_key(seed), len(problems), 1, first_prompt=first)
        return episode_records(self.agent.play(engine, problems, 1, sampling, keys)[1])


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
