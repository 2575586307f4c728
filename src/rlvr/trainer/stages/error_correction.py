"""EDGE-GRPO's Guided Error Correction, GEC, as a draw stage (Zhang et al. 2025, "EDGE-GRPO:
Entropy-Driven GRPO with Guided Error Correction for Advantage Diversity", arXiv:2507.21848;
as the authors' code does it, ``ZhangXJ199/EDGE-GRPO``, ``GRPOAhaTrainer``
``_generate_and_score_completions``).

Every response that scored below ``threshold`` is replaced, before the advantages, by one of
three corrections drawn at random (the code's ``random.choice`` twice: 1/2, 1/4, 1/4):

- **reflect**: the response, then " Wait! Something is wrong here.", and the policy continues
  from there (``Problem.response_prefix``; up to ``rollout.max_new_tokens`` more tokens);
- **answer**: the response, then "\\nWait! Something is wrong here. After verification, the
  correct answer is \\boxed{<answer>}." (written, not sampled);
- **solution**: the problem's reference solution (its first demonstration that solves it)
  instead of the response; a problem without one gets the answer's correction.

Each correction is scored by the run's reward and trained like a sample, every token of it
(the written ones included: their behaviour policy is pi_old, no sampler correction; like the
code's re-tokenised text, a written one ends without a stop token), and the
group's advantages are over the corrected group (GRPO; the ``edge_grpo`` estimator adds the
paper's entropy-driven advantage). The prompt sampler heard the uncorrected rewards. The code
corrects only prompts shorter than 256 tokens; here every one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from rlvr.data import hints
from rlvr.rollout.streams import group_keys, stream_key
from rlvr.trainer.stages.base import DrawState, register_stage

CORRECTED = "sampling/corrected"
REFLECT = " Wait! Something is wrong here."
ANSWER = "\nWait! Something is wrong here. After verification, the correct answer is \\boxed{{{}}}."
STREAMS = 3 * 10**6
"""The reflection continuing row i of a draw comes from the stream (base, STREAMS + i, 0); the
draw's choice of corrections from the stream (base, STREAMS - 1)."""


@dataclass(frozen=True)
class ErrorCorrection:
    """Settings of ``{name: error_correction, threshold, shares}``.

    Attributes:
        threshold: a response scoring below it is corrected (1: a verifier's wrong answers).
        shares: the chances of reflect, answer and solution (the code's 1/2, 1/4, 1/4).
    """

    threshold: float = 1.0
    shares: tuple[float, float, float] = (0.5, 0.25, 0.25)

    def __post_init__(self) -> None:
        shares = tuple(float(x) for x in self.shares)
        if len(shares) != 3 or min(shares) < 0 or sum(shares) <= 0:
            raise ValueError(
                f"shares are the non-negative chances of reflect, answer and solution; got "
                f"{list(self.shares)}"
            )
        object.__setattr__(self, "shares", shares)


@register_stage("error_correction", ErrorCorrection, counts=(CORRECTED,))
def gec(state: DrawState, settings: ErrorCorrection) -> None:
    """Replace each response below ``threshold`` by its correction (see the module docstring),
    in its place in its group."""
    collector, table = state.collector, state.table
    if collector.algo.objective.samples != "policy":
        raise ValueError("the error_correction stage corrects the policy's own samples")
    raw = table.breakdown.total  # the reward's own values (before DAPO's or a stage's shaping)
    wrong = [i for i in range(len(table)) if float(raw[i]) < settings.threshold]
    if not wrong:
        return
    draws = torch.Generator().manual_seed(stream_key(state.base, STREAMS - 1) % 2**63)
    chosen = torch.multinomial(torch.tensor(settings.shares), len(wrong), True, generator=draws)
    groups, problems, texts = table.group_ids.tolist(), table.problems, table.texts
    reflect: list[int] = []
    written: list[tuple[int, str]] = []
    for i, kind in zip(wrong, chosen.tolist(), strict=True):
        problem = problems[groups[i]]
        solution = hints.reference_solution(problem) if kind == 2 else None
        if kind == 0:
            reflect.append(i)
        elif solution is not None:
            written.append((i, solution))
        else:
            written.append((i, texts[i] + ANSWER.format(problem.answer)))
    parts = []
    if reflect:
        prefixed = [
            dataclasses.replace(problems[groups[i]], response_prefix=texts[i] + REFLECT)
            for i in reflect
        ]
        keys = torch.cat([group_keys(state.base, 1, 1, first_prompt=STREAMS + i) for i in reflect])
        played = collector.play(prefixed, 1, keys)
        parts.append((reflect, played.with_columns(rewards=collector.rewards(played))))
    if written:
        tokenizer = collector.tokenizer
        ids = [tokenizer(t, add_special_tokens=False).input_ids for _, t in written]
        scored = collector.rollouts.score(problems, ids, [groups[i] for i, _ in written])
        parts.append(
            ([i for i, _ in written], scored.with_columns(rewards=collector.rewards(scored)))
        )
    own, order = table, list(range(len(table)))
    for rows_of, part in parts:
        more = dataclasses.replace(
            part,
            problems=own.problems,
            columns={**part.columns, "group_ids": torch.tensor([groups[i] for i in rows_of])},
        )
        for k, i in enumerate(rows_of):
            order[i] = len(own) + k
        own = own.add_rows(more)
    collector.counts[CORRECTED] += len(wrong)
    state.table = own.select(order)
