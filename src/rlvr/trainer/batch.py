"""What the collector hands the learner: one step's samples as plain tensors and lists
(:class:`Trajectories`), and the one concatenation every per-sample record of the spine uses
(:func:`concat`).

The seam between the rollout side and the learning side of a run (docs/design.md, "One
training step"): everything here is plain data (token ids, floats, problems), cheap to pickle,
so a batch crosses process boundaries (Ray workers, a vLLM engine, an environment server).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from rlvr.data import Problem

R = TypeVar("R")


def concat(parts: Sequence[R], **merged: Any) -> R:
    """Records of one dataclass type (per-sample fields in order) joined into one: lists are
    chained, tensors concatenated, fields None in the first part stay None; the fields given
    in ``merged`` take that value instead (sums, offsets, timings: what a plain join gets
    wrong). A field of another type not in ``merged`` is an error, so a new field cannot be
    dropped silently."""
    first = parts[0]
    values: dict[str, Any] = {}
    for field in dataclasses.fields(first):  # type: ignore[arg-type]
        if field.name in merged:
            values[field.name] = merged[field.name]
            continue
        items = [getattr(part, field.name) for part in parts]
        if items[0] is None:
            values[field.name] = None
        elif isinstance(items[0], torch.Tensor):
            values[field.name] = torch.cat(items)
        elif isinstance(items[0], list):
            values[field.name] = [x for item in items for x in item]
        else:
            raise TypeError(f"{type(first).__name__}.{field.name}: give concat() its merged value")
    return type(first)(**values)


@dataclass(kw_only=True)
class Trajectories:
    """The samples one step trains on (after dynamic sampling and group filtering).

    P groups (one per drawn problem) of N samples in all; ``group_ids`` [N] index ``problems``
    and ``prompt_ids`` (one entry per group). A plain task's sample is a one-step episode: its
    completion is one action, ``action_mask``/``turn_rewards``/``anchors``/``transcripts`` are
    None; a multi-turn episode's completion holds its actions and the observations between them.

    Attributes:
        problems: [P] the drawn problems.
        prompt_ids: [P] each prompt's token ids (chat template applied).
        completion_ids: [N] each sample's token ids, exactly as sampled.
        sampler_logprobs: [N] the sampler's log-prob of each sampled token (temperature-scaled,
            before top-k/top-p truncation): the behaviour policy.
        finished: [N] ended with a stop token or string (False: cut at the token budget).
        texts: [N] decoded completions (what the rewards read; an episode's last action).
        rewards: [N] float rewards (with DAPO's overlong penalty when the preset has one).
        group_ids: [N] long, the group (problem) of each sample.
        signals: the inputs produced on demand for the estimator, by name, each [N]
            (:mod:`rlvr.trainer.signals`: ``baselines``, ``greedy_rewards``,
            ``reference_rewards``); empty when it needs none.
        tokens_per_s: the rollout engine's throughput over the step's draws.
        terms: each reward term's unweighted value [N].
        term_weights: each reward term's weight in the reward (GDPO normalises the terms one by
            one, then sums them with these weights).
        reasons: [N] per sample, the reason each reward term gave (a judge's reply, a failed
            test), by term label; terms that gave none are left out.
        policy_version: the number of optimizer updates of the policy that sampled them.
        action_mask: [N] per completion token, 1 on the ids the policy sampled and 0 on an
            episode's observation tokens, or, for the data's completions, 1 on the assistant
            tokens (None: every completion token was sampled).
        turn_rewards: [N] an episode's reward of each turn (None: one-step episodes).
        anchors: [N] an episode's anchor state of each turn (GiGPO's step groups), or None.
        transcripts: [N] an episode's whole chat (messages), for the logs, or None.
        infos: [N] an episode's step infos as JSON data (one per step), for the logs, or None.
        teacher_logprobs: [N] a teacher's log-prob of each completion token (on-policy
            distillation), or None.
        demonstration_ids, demonstration_mask: [P] each problem's demonstration (token ids
            after its prompt) and its loss mask (``sft_coef``), or None.
    """

    problems: list[Problem]
    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    sampler_logprobs: list[list[float]]
    finished: list[bool]
    texts: list[str]
    rewards: torch.Tensor
    group_ids: torch.Tensor
    tokens_per_s: float
    terms: dict[str, list[float]]
    term_weights: dict[str, float] | None = None
    policy_version: int = 0
    action_mask: list[list[int]] | None = None
    turn_rewards: list[list[float]] | None = None
    anchors: list[list[Hashable | None]] | None = None
    transcripts: list[list[dict[str, Any]]] | None = None
    infos: list[list[dict[str, Any]]] | None = None
    teacher_logprobs: list[list[float]] | None = None
    demonstration_ids: list[list[int]] | None = None
    demonstration_mask: list[list[int]] | None = None
    reasons: list[dict[str, str]] | None = None
    signals: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.completion_ids)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle, also a batch pickled before the produced signals were carried by name (a
        checkpoint's pending batch, ``rollout.max_staleness``): its ``greedy_rewards``,
        ``baselines`` and ``reference_rewards`` fields become its ``signals``."""
        signals = state.setdefault("signals", {})
        for name in ("greedy_rewards", "baselines", "reference_rewards"):
            value = state.pop(name, None)
            if value is not None:
                signals[name] = value
        self.__dict__.update(state)

    @staticmethod
    def merge(parts: list[Trajectories]) -> Trajectories:
        """Draws of one step as one batch: group ids offset so they index the merged problem
        list, throughput averaged, the oldest policy version kept."""
        offsets = [0]
        for part in parts[:-1]:
            offsets.append(offsets[-1] + len(part.problems))
        return concat(
            parts,
            group_ids=torch.cat([p.group_ids + o for p, o in zip(parts, offsets, strict=True)]),
            tokens_per_s=sum(p.tokens_per_s for p in parts) / len(parts),
            terms={label: [x for p in parts for x in p.terms[label]] for label in parts[0].terms},
            signals={
                name: torch.cat([p.signals[name] for p in parts]) for name in parts[0].signals
            },
            term_weights=parts[0].term_weights,
            policy_version=min(p.policy_version for p in parts),
        )


Sampled = tuple[int, Trajectories, dict[str, float]]
"""A batch sampled ahead of its step (``rollout.max_staleness``): (step, batch, its sampling
metrics); a checkpoint stores the pending ones."""
