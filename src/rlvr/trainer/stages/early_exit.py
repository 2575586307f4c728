"""S-GRPO's serial groups as a draw stage (Dai et al. 2025, "S-GRPO: Early Exit via
Reinforcement Learning in Reasoning Models", arXiv:2505.07686; the rule as
:mod:`rlvr.algorithms.sgrpo` cites it).

Each problem's group is a serial group of ``rollout.group_size`` = m + 1 samples: one reasoning
path sampled in full, and m early exits cut from it. The exit positions are m distinct token
positions drawn uniformly in 1 .. L - 1 of the path's L tokens (with repeats when the path has
fewer than m + 1 tokens); at each, the path's first tokens and the exit phrase start the reply
(given, ``Problem.response_prefix``) and the policy answers from there, up to
``rollout.max_new_tokens`` more tokens. The group is the exits in position order, then the full
path: the serial order of the decaying reward, which replaces the run's reward once every
sample is scored (a sample is right where the reward's own value reaches ``threshold``).

Every token of an exit is trained with its advantage, the given prefix and phrase included
(their behaviour policy is pi_old), as ``hardbrah/verl``'s reimplementation trains them; the
paper's choice here could not be read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rlvr import algorithms
from rlvr.rollout.streams import group_keys, stream_key
from rlvr.trainer.batch import Samples
from rlvr.trainer.stages.base import DrawState, register_stage

if TYPE_CHECKING:
    from rlvr.data import Problem
    from rlvr.trainer.collect import Collector

EXITED = "sampling/early_exit_right"
"""Metric: the draw's exits whose answer was right (the full paths not counted)."""
STREAMS = 4 * 10**6
"""The draw's exit positions come from the stream (base, STREAMS)."""


@dataclass(frozen=True)
class EarlyExit:
    """Settings of ``{name: early_exit, phrase, threshold}``.

    Attributes:
        phrase: appended to a path cut at an exit position (the paper's).
        threshold: an answer is right where the reward's own value reaches it (1: a
            verifier's right answers).
    """

    phrase: str = algorithms.EXIT_PHRASE
    threshold: float = 1.0

    def __post_init__(self) -> None:
        if not self.phrase:
            raise ValueError("phrase must be a non-empty text (it ends the cut reasoning)")

    def play_draw(
        self, collector: Collector, problems: list[Problem], n: int, base: int
    ) -> Samples:
        """The draw as serial groups: each problem's path from the stream (base, i, n - 1),
        then its n - 1 exits from the streams (base, i, j), in two engine calls; each group's
        exits in position order, then the path."""
        exits = n - 1
        if exits < 1:
            raise ValueError("the early_exit stage needs rollout.group_size >= 2 (m exits + 1)")
        keys = group_keys(base, len(problems), n).view(len(problems), n)
        paths = collector.play(problems, 1, keys[:, -1].contiguous())
        draws = torch.Generator().manual_seed(stream_key(base, STREAMS) % 2**63)
        tokenizer, variants = collector.tokenizer, []
        for problem, path in zip(problems, paths.completion_ids, strict=True):
            for cut in exit_positions(len(path), exits, draws):
                text = tokenizer.decode(path[:cut]) + self.phrase
                variants.append(
                    dataclasses.replace(problem, id=f"{problem.id}#exit{cut}", response_prefix=text)
                )
        exited = collector.play(variants, 1, keys[:, :-1].reshape(-1))
        exited = dataclasses.replace(
            exited,
            problems=paths.problems,
            prompt_ids=paths.prompt_ids,
            columns={
                **exited.columns,
                "group_ids": torch.arange(len(problems)).repeat_interleave(exits),
            },
            group_columns=paths.group_columns,
        )
        table = paths.add_rows(exited)  # rows: the P paths, then the exits of path i at P + i m
        first = len(problems)
        order = [
            row
            for i in range(first)
            for row in (*range(first + i * exits, first + (i + 1) * exits), i)
        ]
        seconds = paths.info["seconds"] + exited.info["seconds"]
        tokens = sum(len(c) for c in table.completion_ids)
        info = {
            "seconds": seconds,
            "tokens_per_s": tokens / max(seconds, 1e-9),
            "reward_seconds": paths.info["reward_seconds"] + exited.info["reward_seconds"],
        }
        return dataclasses.replace(table.select(order), info=info)


def exit_positions(length: int, exits: int, generator: torch.Generator) -> list[int]:
    """``exits`` cut positions of a path of ``length`` tokens, ascending: distinct and uniform
    in 1 .. length - 1 where there are enough, else drawn with repeats (0 for an empty or
    one-token path: the phrase alone starts the reply)."""
    if length < 2:
        return [0] * exits
    if length - 1 >= exits:
        chosen = torch.randperm(length - 1, generator=generator)[:exits] + 1
    else:
        chosen = torch.randint(1, length, (exits,), generator=generator)
    return sorted(chosen.tolist())


@register_stage("early_exit", EarlyExit, counts=(EXITED,))
def sgrpo(state: DrawState, settings: EarlyExit) -> None:
    """Replace the rewards of the serial groups (played by :meth:`EarlyExit.play_draw`) by
    S-GRPO's decaying rewards (:func:`rlvr.algorithms.decaying_rewards`)."""
    table, n = state.table, state.n
    raw = torch.as_tensor(table.breakdown.total, dtype=torch.float)  # the reward's own values
    correct = (raw >= settings.threshold).view(-1, n)  # [P, m + 1] in serial order
    rewards = algorithms.decaying_rewards(correct).view(-1)
    state.collector.counts[EXITED] += int(correct[:, :-1].sum())
    state.table = table.with_columns(rewards=rewards)
