"""A replay buffer of past successful samples, added to their prompt's group when it is drawn
again, importance-weighted against the policy that sampled them (Li et al. 2025, "RePO:
Replay-Enhanced Policy Optimization", arXiv:2506.09340).

On-policy GRPO throws every sample away after one step; a prompt the policy solved once and
fails now gives a group of failures, no signal. RePO keeps each prompt's past samples and
replays some of them into its later groups. Here (the stage ``{name: replay, replayed, buffer,
threshold}``): every sample with a reward >= ``threshold`` is stored under its problem's id (its
tokens, the sampler's log-probs, text, reward, reward terms), the newest ``buffer`` per prompt
kept; when the prompt is drawn again, its newest ``replayed`` stored samples join
its group (taken before this draw's samples are stored), so the group's advantages are
normalised over fresh and replayed samples together (RePO's "mixed" mode). A replayed sample's
stored log-probs are its behaviour policy (its row's ``sampler_logprobs``), which corrects for its
age: the truncated importance weight min(pi_theta / pi_behaviour, tis_cap) of
``algorithm.correction.tis_cap``, or a sampler-anchored policy loss (DPPO: ``dppo_tv`` / ``dppo_kl``), whose
ratio pi_theta / pi_behaviour, truncated and masked outside its trust region, is the correction
(one of the two is required: :meth:`rlvr.config.Config._check_replay`).
The buffer is JSON in every checkpoint (``TrainerState.replay``), so a resumed run replays what
the uninterrupted one would; it matters where the stream revisits prompts (datasets over
epochs).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.rewards.combined import RewardBreakdown
from rlvr.trainer.batch import SIGNAL, Samples
from rlvr.trainer.stages.base import DrawState, register_stage

REPLAYED = "sampling/replayed"
STORED = frozenset({*Samples.REQUIRED, "rewards", "given_tokens"})
"""The columns of a replayed sample (the buffer's fields; produced signals are its group's)."""


class ReplayBuffer:
    """Past successful samples by problem id (see the module docstring).

    Args:
        replay: the samples replayed into a group (>= 1).
        per_prompt: the most samples kept per prompt (>= replay).
        threshold: the least reward a sample needs to be stored.
    """

    def __init__(self, replay: int, per_prompt: int, threshold: float = 1.0) -> None:
        if not 1 <= replay <= per_prompt:
            raise ValueError(
                f"replay needs 1 <= replay <= replay_buffer, got {replay}, {per_prompt}"
            )
        self.replay, self.per_prompt, self.threshold = replay, per_prompt, threshold
        self.entries: dict[str, list[dict[str, Any]]] = {}  # oldest first

    def take(self, problem_id: str) -> list[dict[str, Any]]:
        """The newest ``replay`` stored samples of a problem, newest first (they stay stored)."""
        return list(reversed(self.entries.get(problem_id, [])[-self.replay :]))

    def store(self, problem_id: str, sample: dict[str, Any]) -> None:
        """Keep ``sample`` (keys ``completion_ids``, ``logprobs``, ``text``, ``reward``,
        ``finished``, ``terms``) if its reward reaches the threshold."""
        if sample["reward"] < self.threshold:
            return
        kept = self.entries.setdefault(problem_id, [])
        kept.append(sample)
        del kept[: -self.per_prompt]

    def metrics(self) -> dict[str, float]:
        return {"replay/buffer_samples": float(sum(len(v) for v in self.entries.values()))}

    def state_dict(self) -> dict[str, Any]:
        return {"entries": {k: list(v) for k, v in self.entries.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.entries = {str(k): list(v) for k, v in state.get("entries", {}).items()}


@dataclass(frozen=True)
class Replay:
    """Settings of ``{name: replay, replayed, buffer, threshold}``.

    Attributes:
        replayed: the stored samples of a prompt that join its group when it is drawn again.
        buffer: the most samples kept per prompt (>= replayed).
        threshold: the least reward a sample needs to be stored.
    """

    replayed: int
    buffer: int = 16
    threshold: float = 1.0

    def __post_init__(self) -> None:
        if not 1 <= self.replayed <= self.buffer:
            raise ValueError(f"needs 1 <= replayed <= buffer, got {self.replayed}, {self.buffer}")


@register_stage("replay", Replay, after_select=True, counts=(REPLAYED,))
def repo(state: DrawState, settings: Replay) -> None:
    """The kept groups' replayed samples after their own (``state.batch``), taken before this
    draw's successful samples (all of them, kept or not: ``state.table``) are stored; a replayed
    sample's produced signals are its group's."""
    buffer, table, batch = state.collector.replay, state.table, state.batch
    assert buffer is not None and batch is not None
    other = sorted(
        name for name in batch.columns if name not in STORED and not name.startswith(SIGNAL)
    )
    if other:
        raise ValueError(
            f"the replay stage rebuilds a replayed sample from what its buffer stores; this "
            f"run's samples also carry {', '.join(other)}, which it cannot replay: remove the "
            "replay stage"
        )
    problems, ids = batch.problems, table.group_ids
    groups = sorted(set(batch.group_ids.tolist()))
    extra = [(g, s) for g in groups for s in buffer.take(problems[g].id)]
    terms = table.terms
    for i in range(len(table)):
        buffer.store(
            problems[int(ids[i])].id,
            {
                "completion_ids": list(table.completion_ids[i]),
                "logprobs": list(table.sampler_logprobs[i]),
                "text": table.texts[i],
                "reward": float(table.rewards[i]),
                "finished": bool(table.finished[i]),
                "given": int(table.given_tokens[i]) if table.given_tokens is not None else 0,
                "terms": {label: values[i] for label, values in terms.items()},
            },
        )
    state.collector.counts[REPLAYED] += len(extra)
    if not extra:
        return
    group_ids = torch.tensor([g for g, _ in extra], dtype=torch.long)
    rewards = [s["reward"] for _, s in extra]
    labels = list(batch.terms)
    breakdown = RewardBreakdown(
        total=rewards,
        components={label: [s["terms"].get(label, 0.0) for _, s in extra] for label in labels},
        weights=dict(batch.term_weights),
        errors={label: 0 for label in labels},
        reasons={label: [None] * len(extra) for label in labels},
    )
    first = torch.searchsorted(ids, group_ids)  # a group's signals: its first sample's
    columns = {
        "completion_ids": [s["completion_ids"] for _, s in extra],
        "sampler_logprobs": [s["logprobs"] for _, s in extra],  # the behaviour policy's
        "finished": [s["finished"] for _, s in extra],
        "given_tokens": [s.get("given", 0) for _, s in extra],  # a buffer of older runs: none
        "texts": [s["text"] for _, s in extra],
        "group_ids": group_ids,
        "breakdown": breakdown,
        "rewards": torch.tensor(rewards, dtype=batch.rewards.dtype),
        "token_entropies": [[] for _ in extra],  # not recorded for a stored sample
        **{SIGNAL + name: values[first] for name, values in table.signals.items()},
    }
    columns = {k: v for k, v in columns.items() if k in batch.columns}  # the batch's own
    state.batch = batch.add_rows(dataclasses.replace(batch, columns=columns))
