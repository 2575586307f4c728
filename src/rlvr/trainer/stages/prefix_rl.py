"""PrefixRL's prefixed problems as a draw stage (Setlur et al. 2026, "Reuse your FLOPs",
arXiv:2601.18795; the rule as :mod:`rlvr.algorithms.prefix_rl` cites it).

Each drawn problem is played as one of the union D + D_pre: itself (when ``original``), or one
of its ``variants`` prefixed problems, chosen uniformly per draw (the paper's 1K original and 3K
prefixed problems: uniform over the four). A prefixed variant's reply starts with the first h
tokens of the problem's off-policy trace (given, ``Problem.response_prefix``: its reference
solution, the first demonstration that solves it, e.g. a worked solution or a correct
rejection-sampled trace of a data row) and the policy samples the rest; every sample of a group
shares its variant. The cuts are fixed per problem and run (the stream of the run's seed and the
problem's id): variant v of a problem is cut at the same h whenever it is drawn.

The reward scores the whole reply (the answer is in the sampled part). The prefix is context:
its tokens are not actions (``action_mask`` 0), so the loss takes no gradient on them and they
count in no normaliser, as the paper masks them. The table keeps the drawn problems (their ids
unchanged: a curriculum sees the problem, prefixed or not); the logged replies show the prefix.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from rlvr import algorithms
from rlvr.data import hints
from rlvr.rollout.streams import group_keys, stream_key
from rlvr.trainer.batch import Samples
from rlvr.trainer.stages.base import DrawState, register_stage

if TYPE_CHECKING:
    from rlvr.data import Problem
    from rlvr.trainer.collect import Collector

PREFIXED = "sampling/prefixed_groups"
"""Metric: the draw's groups played from a prefix of their trace."""
STREAMS = 5 * 10**6
"""The draw's choices of variant come from the stream (base, STREAMS); the cuts of a problem's
variants from (seed, STREAMS, the problem's id hash)."""


@dataclass(frozen=True)
class PrefixRL:
    """Settings of ``{name: prefix_rl, variants, low, high, original}``.

    Attributes:
        variants: prefixed variants of each problem (3 in the paper).
        low: the smallest cut, as a fraction of the trace's tokens (0.4 in the paper).
        high: the largest cut (0.8 in the paper).
        original: the problem without a prefix is one of the draw's choices (the paper trains
            on both; False: prefixed problems only, where a problem has a trace).
    """

    variants: int = 3
    low: float = 0.4
    high: float = 0.8
    original: bool = True

    def __post_init__(self) -> None:
        if self.variants < 1:
            raise ValueError(f"variants must be >= 1, got {self.variants}")
        if not 0.0 < self.low <= self.high < 1.0:
            raise ValueError(f"the cuts need 0 < low <= high < 1, got {self.low} and {self.high}")

    def variant(self, problem: Problem, v: int, seed: int, tokenizer: Any) -> Problem | None:
        """Prefixed variant ``v`` (0-based) of ``problem``: its reply starts with the first h_v
        tokens of its trace (h_v of :func:`rlvr.algorithms.cut_points` at the fixed fraction
        u_v of the problem); None where it has no trace or one under 2 tokens."""
        trace = hints.reference_solution(problem)
        if trace is None:
            return None
        ids = tokenizer(trace, add_special_tokens=False).input_ids
        key = stream_key(seed, STREAMS, problem_key(problem))
        fraction = algorithms.cut_fractions(key, self.variants, self.low, self.high)[v]
        (h,) = algorithms.cut_points(len(ids), [fraction])
        if h == 0:
            return None
        prefix = hints.token_prefix(tokenizer, ids[:h])
        return dataclasses.replace(problem, response_prefix=prefix) if prefix else None

    def play_draw(
        self, collector: Collector, problems: list[Problem], n: int, base: int
    ) -> Samples:
        """The draw's groups, each problem as itself or one of its variants (chosen from the
        stream (base, STREAMS)), sampled in one engine call from the draw's own streams; the
        given prefixes' tokens get ``action_mask`` 0."""
        choices = self.variants + int(self.original)
        draws = torch.Generator().manual_seed(stream_key(base, STREAMS) % 2**63)
        picks = torch.randint(choices, (len(problems),), generator=draws).tolist()
        seed = collector.cfg.train.seed
        played_as = []
        for problem, pick in zip(problems, picks, strict=True):
            v = pick - int(self.original)
            prefixed = None if v < 0 else self.variant(problem, v, seed, collector.tokenizer)
            played_as.append(prefixed or problem)
        table = collector.play(played_as, n, group_keys(base, len(problems), n))
        given = table.given_tokens or [0] * len(table)
        masks = [
            [0] * g + [1] * (len(c) - g) for c, g in zip(table.completion_ids, given, strict=True)
        ]
        return dataclasses.replace(table.with_columns(action_mask=masks), problems=problems)


def problem_key(problem: Problem) -> int:
    """63 bits of a hash of ``problem``'s id: the stream of its cuts, whichever draw it is in."""
    digest = hashlib.sha256(problem.id.encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@register_stage("prefix_rl", PrefixRL, counts=(PREFIXED,))
def prefix_rl(state: DrawState, settings: PrefixRL) -> None:
    """Count the draw's prefixed groups (played by :meth:`PrefixRL.play_draw`)."""
    given = state.table.given_tokens or [0] * len(state.table)
    prefixed = {g for g, k in zip(state.table.group_ids.tolist(), given, strict=True) if k}
    state.collector.counts[PREFIXED] += len(prefixed)
