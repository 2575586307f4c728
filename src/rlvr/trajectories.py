"""What the collector hands the learner: one step's samples as plain tensors and lists.

The seam between the rollout side and the learning side of a run (docs/design.md, "The parts
of a run"): everything here is plain data (token ids, floats, problems), cheap to pickle, so a
batch can cross a process boundary (Ray workers, a vLLM engine, an environment server).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.data import Problem


@dataclass
class Trajectories:
    """The samples one step trains on (after dynamic sampling and group filtering).

    P groups (one per drawn problem) of N samples in all; ``group_ids`` [N] index ``problems``
    and ``prompt_ids`` (one entry per group).

    Attributes:
        problems: [P] the drawn problems.
        prompt_ids: [P] each prompt's token ids (chat template applied).
        completion_ids: [N] each sample's token ids, exactly as sampled.
        sampler_logprobs: [N] the sampler's log-prob of each sampled token (temperature-scaled,
            before top-k/top-p truncation): the behaviour policy.
        finished: [N] ended with a stop token or string (False: cut at ``max_new_tokens``).
        texts: [N] decoded completions (what the rewards read).
        rewards: [N] float rewards (with DAPO's overlong penalty when the preset has one).
        group_ids: [N] long, the group (problem) of each sample.
        greedy_rewards: [N] reward of the group's greedy completion (ReMax's baseline) or None.
        tokens_per_s: the rollout engine's throughput over the step's draws.
        terms: each reward term's unweighted value [N].
        policy_version: the number of optimizer updates of the policy that sampled them.
        action_mask: [N] per completion token, 1 on the ids the policy sampled and 0 on an
            agent episode's observation tokens (None: every completion token was sampled).
        turn_rewards: [N] an episode's reward of each turn (None: single completions).
        anchors: [N] an episode's anchor state of each turn (GiGPO's step groups), or None.
        transcripts: [N] an episode's whole chat (messages), for the logs, or None.
    """

    problems: list[Problem]
    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    sampler_logprobs: list[list[float]]
    finished: list[bool]
    texts: list[str]
    rewards: torch.Tensor
    group_ids: torch.Tensor
    greedy_rewards: torch.Tensor | None
    tokens_per_s: float
    terms: dict[str, list[float]]
    policy_version: int = 0
    action_mask: list[list[int]] | None = None
    turn_rewards: list[list[float]] | None = None
    anchors: list[list[Hashable | None]] | None = None
    transcripts: list[list[dict[str, Any]]] | None = None

    def __len__(self) -> int:
        return len(self.completion_ids)


def merge(parts: list[Trajectories]) -> Trajectories:
    """Concatenate draws of one step; group ids are offset so they index the merged problem
    list."""
    offsets = [0]
    for part in parts[:-1]:
        offsets.append(offsets[-1] + len(part.problems))
    greedy = [p.greedy_rewards for p in parts]
    return Trajectories(
        problems=[x for p in parts for x in p.problems],
        prompt_ids=[x for p in parts for x in p.prompt_ids],
        completion_ids=[x for p in parts for x in p.completion_ids],
        sampler_logprobs=[x for p in parts for x in p.sampler_logprobs],
        finished=[x for p in parts for x in p.finished],
        texts=[x for p in parts for x in p.texts],
        rewards=torch.cat([p.rewards for p in parts]),
        group_ids=torch.cat([p.group_ids + o for p, o in zip(parts, offsets, strict=True)]),
        greedy_rewards=None if greedy[0] is None else torch.cat(greedy),
        tokens_per_s=sum(p.tokens_per_s for p in parts) / len(parts),
        terms={label: [x for p in parts for x in p.terms[label]] for label in parts[0].terms},
        policy_version=min(p.policy_version for p in parts),
        action_mask=joined([p.action_mask for p in parts]),
        turn_rewards=joined([p.turn_rewards for p in parts]),
        anchors=joined([p.anchors for p in parts]),
        transcripts=joined([p.transcripts for p in parts]),
    )


def joined(lists: list[list | None]) -> list | None:
    """Per-sample lists of a step's draws concatenated (None when the draws have none)."""
    return None if lists[0] is None else [x for part in lists for x in part]
