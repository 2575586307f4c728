"""Sampling and scoring groups: the one rollout path every run takes (docs/design.md, "One
training step", step 2-3).

A group is ``n`` episodes of one problem. A :class:`Player` plays them on an engine and scores
them, returning a :class:`~rlvr.trainer.batch.Samples` table; the collector, the learner and evaluation never ask which kind
of episode it was. Three players:

* :class:`OneStep`: a plain task is the one-step environment, prompt -> one completion ->
  the reward of the whole group (so group rewards such as TTRL's majority vote see all of a
  problem's completions at once); its episodes are sampled as one batch;
* :class:`MultiTurn`: an agent environment's episodes (:mod:`rlvr.envs.agent`), token-exact
  across turns; the environment's returns are the rewards;
* :class:`Given`: the data's own completions instead of samples (``samples: data``: SFT on
  demonstrations, offline DPO on preference pairs), tokenized token-exactly through the chat
  template; evaluation still samples (:class:`OneStep`).

:class:`Rollouts` (``rlvr.trainer.protocols``) runs a player in this process or on Ray workers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import torch

from rlvr.algorithms.credit import information_gain_rewards
from rlvr.data import Problem, Task
from rlvr.envs.agent import Agent, counts, succeeded
from rlvr.envs.base import plain
from rlvr.envs.chat import encode_demonstration
from rlvr.envs.episodes import Episode
from rlvr.errors import DataError
from rlvr.grading import Grader
from rlvr.grading.accuracy import AccuracyRecords, sample_and_grade
from rlvr.rewards.combined import CombinedReward, RewardBreakdown
from rlvr.rewards.reference_probability import (
    reference_answer_logprobs,
    turn_answer_probabilities,
)
from rlvr.rollout import Rollout, RolloutEngine, SamplingParams
from rlvr.rollout.streams import group_keys, stream_key
from rlvr.rollout.tree import Branching, TreeRollout
from rlvr.trainer.batch import Samples


def merge_shards(parts: list[Samples]) -> Samples:
    """Shards of one draw (groups played apart: Ray workers, groups of other sizes, hinted
    groups), in prompt order, as one table: throughput is the tokens over the slowest shard's
    time (the shards ran side by side), episode counts add up."""
    seconds = max(p.info["seconds"] for p in parts)
    tokens = sum(len(c) for p in parts for c in p.completion_ids)
    info = {
        "seconds": seconds,
        "tokens_per_s": tokens / max(seconds, 1e-9),
        "reward_seconds": max(p.info["reward_seconds"] for p in parts),
    }
    if "episode_counts" in parts[0].info:
        keys = parts[0].info["episode_counts"]
        info["episode_counts"] = {k: sum(p.info["episode_counts"][k] for p in parts) for k in keys}
    return Samples.concat(parts, **info)


def _groups_of(problems: list[Problem], n: int) -> torch.Tensor:
    """[P n] the group of each of ``n`` samples per problem, in problem order."""
    return torch.arange(len(problems)).repeat_interleave(n)


class Player(Protocol):
    """Plays and scores the episodes of problems on an engine."""

    def play(
        self,
        engine: RolloutEngine,
        problems: list[Problem],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor | None,
    ) -> Samples:
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
class InformationGain:
    """IGPO's turn rewards for agent episodes (``algorithm.credit.name: igpo``): the policy's
    probability of each problem's reference answer at the start of every turn
    (:func:`turn_answer_probabilities`), its increase over each turn added to the turn's
    reward (:func:`rlvr.algorithms.credit.information_gain_rewards`)."""

    policy: torch.nn.Module
    tokenizer: Any
    answer_format: str
    micro_batch_size: int
    dtype: torch.dtype

    def __call__(
        self,
        prompts: list[list[int]],
        groups: list[int],
        episodes: list[Episode],
        problems: list[Problem],
    ) -> list[list[float]]:
        """The episodes' turn rewards with their information gains ([N][K_i])."""
        probs = turn_answer_probabilities(
            self.policy,
            self.tokenizer,
            prompts,
            groups,
            [e.completion_ids for e in episodes],
            [e.action_mask for e in episodes],
            [problems[g].answer for g in groups],
            self.answer_format,
            self.micro_batch_size,
            self.dtype,
        )
        return information_gain_rewards([e.turn_rewards for e in episodes], probs)


@dataclass
class OneStep:
    """A plain task as the one-step environment: each problem's prompt (its chat through the
    template, ``encode``), one sampled completion per episode, and the reward of the group
    (:class:`~rlvr.rewards.combined.CombinedReward`; a group reward reads the whole group);
    with ``demonstration`` (:func:`demonstration_tokens` of a problem) each problem's
    demonstration for an SFT term beside the RL loss (``sft_coef``); with ``expert_traces`` > 0
    each group also holds its problem's first ``expert_traces`` demonstrations (``trace``:
    :func:`demonstration_tokens`), after its samples, scored with them (LUFFY's mixed groups,
    :mod:`rlvr.algorithms.expert`; :func:`with_expert_traces`). A problem's
    ``response_prefix`` (G2RPO-A's guidance) is encoded by ``encode_text`` and appended to its
    prompt: the engine continues from it, and each of its completions is the prefix's tokens
    then the sampled ones (sampler log-probs 0 on the prefix, which nothing sampled; the
    ``given_tokens`` column counts them per row: 0 without a prefix and for an expert trace,
    so every table of this player has the column)."""

    reward: CombinedReward
    reference_scorer: ReferenceScorer | None
    task: Task
    judge: Grader
    encode: Callable[[Problem], list[int]]
    decode: Callable[[list[int]], str]
    demonstration: Callable[[Problem], tuple[list[int], list[int], list[int], bool]] | None = None
    branching: Branching | None = None
    expert_traces: int = 0
    trace: Callable[[Problem, int], tuple[list[int], list[int], list[int], bool]] | None = None
    encode_text: Callable[[str], list[int]] | None = None

    def play(
        self,
        engine: RolloutEngine,
        problems: list[Problem],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor | None,
    ) -> Samples:
        prompt_ids = [self.encode(p) for p in problems]
        given = self._prefixes(problems)
        if self.branching is None:
            continued = [p + g for p, g in zip(prompt_ids, given, strict=True)]
            rollout = engine.generate(continued, n, sampling, keys)
        else:  # n trees per problem, their leaves the group (rollout.tree)
            rollout = engine.generate_tree(prompt_ids, n, sampling, self.branching, keys)
        ids = rollout.group_ids.tolist()
        sampled = zip(ids, rollout.completion_ids, rollout.logprobs, strict=True)
        completions, logprobs = [], []
        for g, completion, logprob in sampled:  # a given prefix first: its tokens, log-probs 0
            completions.append(given[g] + completion)
            logprobs.append([0.0] * len(given[g]) + logprob)
        rows = {
            "completion_ids": completions,
            "sampler_logprobs": logprobs,
            "finished": rollout.finished,
        }
        if self.expert_traces:  # LUFFY: each group's worked solutions join its samples
            if rollout.token_entropy or self.reference_scorer is not None:
                raise ValueError(
                    "algorithm.expert.traces: a reward read from the sampler's token "
                    "statistics or the reference answer's probability has no value for a "
                    "worked solution; use a reward on the completion's text"
                )
            assert self.trace is not None
            rows, ids = with_expert_traces(
                rows, ids, problems, prompt_ids, self.expert_traces, self.trace
            )
        fields: dict[str, list[float]] = {}
        if rollout.token_entropy:  # mean over each completion's tokens
            fields["token_entropy"] = [sum(e) / max(len(e), 1) for e in rollout.token_entropy]
            fields["self_certainty"] = [sum(c) / max(len(c), 1) for c in rollout.self_certainty]
        scorer = self.reference_scorer
        start = time.perf_counter()
        columns = self._scored(
            problems, rows, ids, fields, None if scorer is None else partial(scorer, rollout)
        )
        if isinstance(rollout, TreeRollout):
            columns["tree_segments"] = rollout.token_segments
        if rollout.token_entropy:  # each sampled token's (HAPO's adaptive temperatures)
            columns["token_entropies"] = rollout.token_entropy
        expert = rows.get("expert")  # a given prefix's tokens start a guided problem's rows
        columns["given_tokens"] = [
            0 if expert is not None and expert[i] else len(given[g]) for i, g in enumerate(ids)
        ]
        group_columns = {}
        if self.demonstration is not None:  # sft_coef: each problem's demonstration
            demos = [self.demonstration(p) for p in problems]
            group_columns["demonstration_ids"] = [d[1] for d in demos]
            group_columns["demonstration_mask"] = [d[2] for d in demos]
        return Samples(
            problems=problems,
            prompt_ids=prompt_ids,
            columns=columns,
            group_columns=group_columns,
            info={
                "seconds": rollout.stats["rollout/seconds"],
                "tokens_per_s": rollout.stats["rollout/tokens_per_s"],
                "reward_seconds": time.perf_counter() - start,
            },
        )

    def _scored(
        self,
        problems: list[Problem],
        rows: dict[str, Any],
        ids: list[int],
        fields: dict[str, list[float]],
        reference: Callable[[list[str], list[Problem]], dict[str, list[float]]] | None = None,
    ) -> dict[str, Any]:
        """``rows`` (their ``completion_ids`` answering ``problems[ids[i]]``) with their texts,
        groups and the reward's breakdown (``fields`` and ``num_tokens`` the reward's per-sample
        inputs; ``reference``: the reference answer's probability fields of the texts), and each
        reasoning step's reward on its last token under a process reward."""
        completions = rows["completion_ids"]
        texts = [self.decode(c) for c in completions]
        owners = [problems[i] for i in ids]
        fields = {"num_tokens": [len(c) for c in completions], **fields}
        if reference is not None:
            fields.update(reference(texts, owners))
        breakdown = self.reward(texts, owners, group_ids=ids, **fields)
        columns = {
            **rows,
            "texts": texts,
            "group_ids": torch.tensor(ids, dtype=torch.long),
            "breakdown": breakdown,
        }
        steps = breakdown.step_rewards()
        if steps is not None:  # a process reward: each step's reward at its last token
            columns["step_rewards"] = [
                step_tokens(self.decode, ids, s) for ids, s in zip(completions, steps, strict=True)
            ]
        return columns

    def score(
        self, problems: list[Problem], completions: list[list[int]], group_ids: list[int]
    ) -> Samples:
        """Given completions (row i answers ``problems[group_ids[i]]``; none of their tokens
        sampled: sampler log-probs 0, ``given_tokens`` all of them, finished) scored like
        sampled ones; the prompts are the problems' own. EDGE-GRPO's corrections written from
        the reference answer or solution."""
        if self.reference_scorer is not None:
            raise ValueError(
                "a reward read from the reference answer's probability scores sampled replies"
            )
        rows = {
            "completion_ids": [list(c) for c in completions],
            "sampler_logprobs": [[0.0] * len(c) for c in completions],
            "finished": [True] * len(completions),
        }
        start = time.perf_counter()
        columns = self._scored(problems, rows, list(group_ids), {})
        columns["given_tokens"] = [len(c) for c in completions]
        return Samples(
            problems=problems,
            prompt_ids=[self.encode(p) for p in problems],
            columns=columns,
            info={
                "seconds": 0.0,
                "tokens_per_s": 0.0,
                "reward_seconds": time.perf_counter() - start,
            },
        )

    def _prefixes(self, problems: list[Problem]) -> list[list[int]]:
        """Each problem's ``response_prefix`` as tokens ([] for none)."""
        if not any(p.response_prefix for p in problems):
            return [[] for _ in problems]
        if self.branching is not None or self.encode_text is None:
            raise ValueError(
                "a response prefix (the guidance stage's) starts a one-step completion: not "
                "with tree rollouts"
            )
        return [self.encode_text(p.response_prefix) if p.response_prefix else [] for p in problems]

    def records(
        self,
        engine: RolloutEngine,
        problems: list[Problem],
        sampling: SamplingParams,
        seed: int,
        first: int,
    ) -> AccuracyRecords:
        return sample_and_grade(
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


def step_tokens(
    decode: Callable[[list[int]], str], ids: list[int], steps: list[tuple[int, float]]
) -> list[tuple[int, float]]:
    """Step rewards ``[(end, value)]`` keyed by character offsets in ``decode(ids)`` (ends in
    order) as ``[(token, value)]``: each step's reward on the first token whose decoded prefix
    reaches the step's end (a step ending inside a token is that token's; past the text, the
    last token's). The prefix length only grows with k (but across a multi-byte character split
    between tokens, where any of its tokens may be found), so each step is a binary search from
    the previous step's token: O(steps x log T) decodes, not T."""
    if not ids:
        return []
    reach: dict[int, int] = {}

    def reached(k: int) -> int:  # the length of the decoded prefix ids[: k + 1]
        if k not in reach:
            reach[k] = len(decode(ids[: k + 1]))
        return reach[k]

    out, low = [], 0
    for end, value in steps:
        high = len(ids) - 1  # the last token takes a step that ends past the text
        while low < high:
            middle = (low + high) // 2
            if reached(middle) < end:
                low = middle + 1
            else:
                high = middle
        out.append((low, value))
    return out


def with_expert_traces(
    rows: dict[str, list[Any]],
    group_ids: list[int],
    problems: list[Problem],
    prompt_ids: list[list[int]],
    traces: int,
    trace: Callable[[Problem, int], tuple[list[int], list[int], list[int], bool]],
) -> tuple[dict[str, Any], list[int]]:
    """Sampled rows (``completion_ids``, ``sampler_logprobs``, ``finished`` [N], groups
    contiguous) with each problem's first ``traces`` demonstrations after its group's samples
    (LUFFY, Yan et al. 2025, arXiv:2504.14945): their tokens as the chat template writes them,
    sampler log-probs 0 (pi_phi = 1, the paper's convention for an expert whose probabilities
    are unknown), the ``action_mask`` (all ones for a sample) and the ``expert`` flag [N'].
    Returns the rows and their group ids [N'] (N' = N + P * traces). A DataError names a problem
    with fewer demonstrations; a ValueError, one whose demonstration's prompt is not the prompt
    its samples had (``prompt_ids`` [P])."""
    out: dict[str, list[Any]] = {name: [] for name in (*rows, "action_mask", "expert")}
    ids: list[int] = []
    by_group: dict[int, list[int]] = {}
    for i, g in enumerate(group_ids):
        by_group.setdefault(g, []).append(i)
    for g, problem in enumerate(problems):
        for i in by_group.get(g, []):
            for name, column in rows.items():
                out[name].append(column[i])
            out["action_mask"].append([1] * len(rows["completion_ids"][i]))
            out["expert"].append(False)
            ids.append(g)
        for k in range(traces):
            prompt, completion, mask, fits = trace(problem, k)
            if prompt != prompt_ids[g]:
                raise ValueError(
                    f"problem {problem.id}: its demonstration's prompt tokens differ from the "
                    "prompt its samples had, so it cannot join their group"
                )
            out["completion_ids"].append(completion)
            out["sampler_logprobs"].append([0.0] * len(completion))
            out["finished"].append(fits)
            out["action_mask"].append(mask)
            out["expert"].append(True)
            ids.append(g)
    columns: dict[str, Any] = dict(out)
    columns["expert"] = torch.tensor(out["expert"], dtype=torch.bool)
    return columns, ids


def demonstration_tokens(
    tokenizer: Any,
    system_prompt: str | None,
    stop_token_ids: tuple[int, ...],
    max_tokens: int,
    problem: Problem,
    which: int = 0,
) -> tuple[list[int], list[int], list[int], bool]:
    """Demonstration ``which`` of ``problem`` as tokens (:func:`encode_demonstration`): prompt
    ids, completion ids and loss mask cut at ``max_tokens``, and whether it fit; a DataError
    when the problem gives none."""
    if len(problem.demonstrations) <= which:
        raise DataError(
            f"problem {problem.id} gives no completion to train on: set task.completion_column, "
            "or task.chosen_column and task.rejected_column, or give chats that end with "
            "assistant turns"
        )
    chat = problem.messages(system_prompt)
    turns = problem.demonstrations[which].turns()
    prompt, ids, mask = encode_demonstration(tokenizer, chat, turns, stop_token_ids)
    return prompt, ids[:max_tokens], mask[:max_tokens], len(ids) <= max_tokens


@dataclass
class Given:
    """The data's completions as the groups (``samples: data``): each problem's demonstrations
    (a demonstration for SFT, a chosen and a rejected completion for offline DPO) with the
    data's rewards (1, and 0 for a rejected one), tokenized through the chat template with the
    loss mask on the assistant tokens (:func:`rlvr.envs.chat.encode_demonstration`), cut at
    ``max_tokens``. Nothing is sampled; the sampler log-probs are 0 (there is no behaviour
    policy). With ``score`` the completions are scored by the run's reward instead of the
    data's labels (an offline policy gradient's R(x, y): A-LoL). Held-out problems are still
    sampled and judged by ``sampled`` (the run's :class:`OneStep`)."""

    sampled: OneStep
    tokenizer: Any
    system_prompt: str | None
    stop_token_ids: tuple[int, ...]
    max_tokens: int
    score: bool = False

    def _cut_text(self, ids: list[int]) -> str:
        """The assistant text of a demonstration cut at ``max_tokens`` (its tokens as trained)."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def play(
        self,
        engine: RolloutEngine,
        problems: list[Problem],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor | None,
    ) -> Samples:
        start = time.perf_counter()
        prompts, completions, masks, rewards, owners, finished, texts = [], [], [], [], [], [], []
        for i, problem in enumerate(problems):
            for k in range(max(1, len(problem.demonstrations))):  # none: a DataError
                prompt, ids, mask, fits = demonstration_tokens(
                    self.tokenizer,
                    self.system_prompt,
                    self.stop_token_ids,
                    self.max_tokens,
                    problem,
                    k,
                )
                demo = problem.demonstrations[k]
                completions.append(ids)
                masks.append(mask)
                finished.append(fits)
                rewards.append(demo.reward)
                owners.append(i)
                # scored by the run's reward: the text as trained (cut at max_tokens)
                texts.append(demo.text if fits or not self.score else self._cut_text(ids))
            prompts.append(prompt)
        scoring = time.perf_counter()
        if self.score:  # R(x, y) of each given completion by the run's reward
            owned = [problems[i] for i in owners]
            lengths = {"num_tokens": [len(c) for c in completions]}
            breakdown = self.sampled.reward(texts, owned, group_ids=owners, **lengths)
        else:
            breakdown = RewardBreakdown.single("data", rewards)
        columns = {
            "completion_ids": completions,
            "sampler_logprobs": [[0.0] * len(c) for c in completions],
            "finished": finished,
            "texts": texts,
            "group_ids": torch.tensor(owners, dtype=torch.long),
            "breakdown": breakdown,
            "action_mask": masks,
        }
        info = {
            "seconds": scoring - start,
            "tokens_per_s": 0.0,
            "reward_seconds": time.perf_counter() - scoring,
        }
        return Samples(problems=problems, prompt_ids=prompts, columns=columns, info=info)

    def records(
        self,
        engine: RolloutEngine,
        problems: list[Problem],
        sampling: SamplingParams,
        seed: int,
        first: int,
    ) -> AccuracyRecords:
        return self.sampled.records(engine, problems, sampling, seed, first)


@dataclass
class MultiTurn:
    """An agent environment's episodes (:meth:`rlvr.envs.agent.Agent.play`); each episode's
    return is its reward (one term, ``env``). With ``gain`` (IGPO), each turn's reward also
    holds its information gain (the episode's reward stays the environment's return)."""

    agent: Agent
    gain: InformationGain | None = None

    def play(
        self,
        engine: RolloutEngine,
        problems: list[Problem],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor | None,
    ) -> Samples:
        start = time.perf_counter()
        prompts, episodes = self.agent.play(engine, problems, n, sampling, keys)
        seconds = time.perf_counter() - start
        returns = [e.reward for e in episodes]
        breakdown = RewardBreakdown.single("env", returns)
        sampled = sum(sum(e.action_mask) for e in episodes)
        trees = self.agent.branching is not None  # turn-level trees: groups of leaves
        groups = torch.tensor([e.group for e in episodes]) if trees else _groups_of(problems, n)
        turn_rewards = [e.turn_rewards for e in episodes]
        if self.gain is not None:
            turn_rewards = self.gain(prompts, groups.tolist(), episodes, problems)
        columns = {
            "completion_ids": [e.completion_ids for e in episodes],
            "sampler_logprobs": [e.logprobs for e in episodes],
            "finished": [e.finished for e in episodes],
            "texts": [e.last_action for e in episodes],
            "group_ids": groups,
            "breakdown": breakdown,
            "action_mask": [e.action_mask for e in episodes],
            "turn_rewards": turn_rewards,
            "anchors": [e.anchors for e in episodes],
            "transcripts": [e.messages for e in episodes],
            "infos": [[plain(info) for info in e.infos] for e in episodes],
            "faults": [e.fault for e in episodes],
        }
        if trees:
            columns["tree_segments"] = [e.segments for e in episodes]
        info = {
            "seconds": seconds,
            "tokens_per_s": sampled / max(seconds, 1e-9),
            "reward_seconds": 0.0,
            "episode_counts": counts(episodes),
        }
        return Samples(problems=problems, prompt_ids=prompts, columns=columns, info=info)

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
