"""Episodes of several turns in a rollout engine: token ids in, token ids out, history kept.

A :class:`TurnSession` holds a batch of episodes (``n`` per prompt, as ``generate``'s groups).
Each turn the session samples one action per live episode (:meth:`TurnSession.sample`), then the
caller appends each episode's observation tokens and drops the episodes that ended
(:meth:`TurnSession.extend`). The session never sees text: the sampled ids stay exactly as
sampled, and the next turn continues from prompt + action + observation + ... token for token.

Two implementations:

* the torch engine's :class:`rlvr.rollout.torch_engine.KVSession` keeps each episode's
  key/value cache across turns, so a turn prefills only its new tokens (the last sampled token
  and the observation);
* :class:`ReprefillSession` works with any engine's ``generate``: each turn prompts the engine
  with the episode's whole history (vLLM reuses it through its prefix cache; rlvr's transformers
  fallback decoder prefills it again).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Protocol

import torch

from rlvr.rollout.base import RolloutEngine, SamplingParams


@dataclass
class TurnSample:
    """One turn's actions of the live episodes (R of them, in the session's row order).

    Attributes:
        completion_ids: [R] sampled ids of each action (the stop token included when hit).
        logprobs: [R] the sampler's log-prob of each sampled id.
        finished: [R] ended at a stop token or string (False: cut at its token budget).
        seconds: wall time of the turn's sampling.
    """

    completion_ids: list[list[int]]
    logprobs: list[list[float]]
    finished: list[bool]
    seconds: float


class TurnSession(Protocol):
    """A batch of episodes whose histories the engine keeps between turns."""

    def sample(
        self, sampling: SamplingParams, keys: torch.Tensor, budgets: list[int]
    ) -> TurnSample:
        """Sample one action for each live episode: row r from stream ``keys[r]`` ([R] int64),
        at most ``budgets[r]`` tokens (``sampling.max_new_tokens`` is ignored)."""

    def extend(self, keep: list[int], observations: list[list[int]]) -> None:
        """Keep rows ``keep`` (current row indices, in that order: the new rows), each followed
        by its observation tokens ``observations`` (none: the next turn goes on with the
        episode's action, as a turn cut at its budget would have)."""

    def close(self) -> None:
        """Free what the engine holds for these episodes (their caches)."""


def cut_to_budget(
    ids: list[int], logprobs: list[float], finished: bool, budget: int
) -> tuple[list[int], list[float], bool]:
    """A sample cut to ``budget`` tokens: exactly what sampling with that budget gives (the
    stream's uniform at position k does not depend on the budget)."""
    if len(ids) <= budget:
        return ids, logprobs, finished
    return ids[:budget], logprobs[:budget], False


class ReprefillSession:
    """A :class:`TurnSession` over any :class:`RolloutEngine`: the histories are token lists,
    and each turn calls ``generate`` on them (one sample each, with the largest budget, each
    sample then cut to its own; see :func:`cut_to_budget`)."""

    def __init__(self, engine: RolloutEngine, prompts: list[list[int]], n: int) -> None:
        self.engine = engine
        self.histories = [list(prompts[i // n]) for i in range(len(prompts) * n)]
        self.last: list[list[int]] = [[] for _ in self.histories]

    def sample(
        self, sampling: SamplingParams, keys: torch.Tensor, budgets: list[int]
    ) -> TurnSample:
        start = time.perf_counter()
        wide = dataclasses.replace(sampling, max_new_tokens=max(budgets))
        out = self.engine.generate(self.histories, 1, wide, keys)
        rows = [
            cut_to_budget(c, lp, f, b)
            for c, lp, f, b in zip(
                out.completion_ids, out.logprobs, out.finished, budgets, strict=True
            )
        ]
        self.last = [r[0] for r in rows]
        return TurnSample(
            [r[0] for r in rows],
            [r[1] for r in rows],
            [r[2] for r in rows],
            time.perf_counter() - start,
        )

    def extend(self, keep: list[int], observations: list[list[int]]) -> None:
        self.histories = [
            self.histories[r] + self.last[r] + obs
            for r, obs in zip(keep, observations, strict=True)
        ]
        self.last = [[] for _ in keep]

    def close(self) -> None:
        self.histories, self.last = [], []
