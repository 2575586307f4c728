"""Objectives: what the learner minimises on a batch, by name (``algorithm.objective.name``).

Three kinds, each a registered :class:`Objective`:

- ``policy_gradient``: the preset's advantages, policy loss, KL and entropy terms
  (:mod:`rlvr.trainer.learner.policy_gradient`; GRPO and its relatives, on-policy
  distillation);
- ``imitation``: a weighted negative log-likelihood of completion tokens,
  ``l_{i,t} = -w_i log pi_theta(y_{i,t} | x, y_{i,<t})`` with w_i the preset's advantages
  (1 for a demonstration or a verified sample, 0 for a dropped one), averaged over the tokens
  of the samples with w_i > 0: SFT on demonstrations, rejection-sampling fine-tuning on the
  verified samples (:mod:`rlvr.algorithms.imitation`);
- ``pairs``: a loss on pairs (chosen y_c, rejected y_r) of completions of one prompt, from
  sequence log-probs ``log pi(y | x) = sum_t log pi(y_t | x, y_<t)`` of the policy, the
  reference and the policy that sampled them: DPO, IPO, REBEL
  (:mod:`rlvr.algorithms.preference`); the pairs come from each group by
  :func:`rlvr.algorithms.preference.preference_pairs`.

A user's objective is registered the same way (``@register_objective``) and selected by name;
a user's kind (its own preparation and loss) is a strategy registered with
:func:`rlvr.trainer.learner.register_objective_kind` and an objective of that kind
(:func:`add_objective`): the learner needs no edit (docs/objectives.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.registry import Registry


@dataclass(frozen=True)
class PairLogps:
    """Sequence log-probs of P pairs (chosen, rejected) of completions of the same prompts.

    Each is ``log pi(y | x) = sum_t log pi(y_t | x, y_<t)`` over the completion's trained tokens.

    Attributes:
        chosen, rejected: [P] under the policy being trained (with gradient).
        ref_chosen, ref_rejected: [P] under the reference policy (no gradient), or None when
            the objective has no reference.
        old_chosen, old_rejected: [P] under the policy before this update (no gradient): the
            one that sampled them in an on-policy step.
        reward_margin: [P] r(x, y_c) - r(x, y_r) (>= 0: the chosen one is the better).
        chosen_tokens, rejected_tokens: [P] the completions' trained tokens |y| (the
            length-normalised objectives'), or None.
        sampler_chosen, sampler_rejected: [P] under the behaviour policy, the snapshot the
            rollout engine sampled them from (its log-probs as sampled; 0 for a data row), or
            None.
    """

    chosen: torch.Tensor
    rejected: torch.Tensor
    ref_chosen: torch.Tensor | None
    ref_rejected: torch.Tensor | None
    old_chosen: torch.Tensor
    old_rejected: torch.Tensor
    reward_margin: torch.Tensor
    chosen_tokens: torch.Tensor | None = None
    rejected_tokens: torch.Tensor | None = None
    sampler_chosen: torch.Tensor | None = None
    sampler_rejected: torch.Tensor | None = None

    def reference_margin(self, objective: str) -> torch.Tensor:
        """h = [log pi(y_c) - log pi_ref(y_c)] - [log pi(y_r) - log pi_ref(y_r)] [P]: the
        implicit reward margin of DPO and IPO (over beta); ValueError without a reference."""
        if self.ref_chosen is None or self.ref_rejected is None:
            raise ValueError(f"objective {objective!r} needs the reference's log-probs")
        return (self.chosen - self.ref_chosen) - (self.rejected - self.ref_rejected)


@dataclass(frozen=True)
class PairTokens:
    """Per-token log-probs of the same P pairs, for a pair loss that weighs tokens (TGDPO).

    Attributes:
        chosen, rejected: [P, T] log pi of each completion token (with gradient), 0 outside
            the completion's trained tokens.
        ref_chosen, ref_rejected: [P, T] the reference's (no gradient).
        teacher_chosen, teacher_rejected: [P, T] ``model.teacher``'s (no gradient; TGDPO's
            token-level reward model), or None without a teacher.
        chosen_mask, rejected_mask: [P, T] 1 on the trained tokens.
    """

    chosen: torch.Tensor
    rejected: torch.Tensor
    ref_chosen: torch.Tensor
    ref_rejected: torch.Tensor
    teacher_chosen: torch.Tensor | None
    teacher_rejected: torch.Tensor | None
    chosen_mask: torch.Tensor
    rejected_mask: torch.Tensor


PairLossFn = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]
"""``fn(pairs: PairLogps, **params) -> (loss [P], info {name: [P] tensor})``; a function that
names ``tokens`` is also given the pairs' :class:`PairTokens`."""


@dataclass(frozen=True)
class Objective:
    """A registered objective.

    Attributes:
        name: key in :data:`OBJECTIVES`.
        kind: ``policy_gradient``, ``imitation``, ``pairs`` (see the module docstring) or a
            user's kind: the learner's strategy of that name
            (:data:`rlvr.trainer.learner.OBJECTIVE_KINDS`, checked when the learner is built).
        fn: the pair loss (``pairs``), else None (the learner's own loss of that kind).
        needs_reference: the loss reads the reference policy's log-probs (DPO, IPO): the run
            keeps a reference even with ``beta`` = 0.
        pairing: how pairs are formed from a group by default (``pairs`` only):
            ``best_worst`` or ``adjacent`` (:func:`rlvr.algorithms.preference.preference_pairs`).
        needs_sampler: the loss reads the log-probs its pairs were sampled with
            (``PairLogps.sampler_chosen``: INPO's pi_t), so it trains on the policy's own samples
            only (a data row was sampled by no policy).
        needs_teacher: the loss reads ``model.teacher``'s token log-probs (TGDPO's token-level
            reward model): the run loads the teacher.
        citation: the paper.
        summary: one line.
    """

    name: str
    kind: str
    fn: PairLossFn | None
    needs_reference: bool
    pairing: str | None
    citation: str
    summary: str
    needs_sampler: bool = False
    needs_teacher: bool = False

    def params(self) -> tuple[str, ...]:
        """The keyword arguments ``algorithm.objective`` may set beside its name."""
        import inspect

        if self.fn is None:
            return ()
        return tuple(inspect.signature(self.fn).parameters)[1:]


OBJECTIVES: Registry[Objective] = Registry("objective")


def register_objective(
    name: str,
    *,
    kind: str = "pairs",
    needs_reference: bool = False,
    pairing: str | None = None,
    citation: str = "",
    summary: str = "",
    needs_sampler: bool = False,
    needs_teacher: bool = False,
) -> Callable[[Any], Any]:
    """Decorator: add a pair loss ``fn(pairs: PairLogps, **params) -> (loss [P], info)`` (kind
    ``pairs``) to :data:`OBJECTIVES`; :func:`add_objective` adds the other kinds."""
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"an objective's kind is a non-empty name, got {kind!r}")

    def decorator(fn: PairLossFn) -> PairLossFn:
        OBJECTIVES.add(
            name,
            Objective(
                name,
                kind,
                fn,
                needs_reference,
                pairing or "best_worst",
                citation,
                summary,
                needs_sampler,
                needs_teacher,
            ),
        )
        return fn

    return decorator


def add_objective(name: str, kind: str, citation: str, summary: str) -> Objective:
    """Register an objective whose loss its kind's strategy computes (``policy_gradient``,
    ``imitation``, or a user's kind registered with
    :func:`rlvr.trainer.learner.register_objective_kind`)."""
    if kind == "pairs":
        raise ValueError("a pair objective is registered with its loss: @register_objective")
    return OBJECTIVES.add(name, Objective(name, kind, None, False, None, citation, summary))


add_objective(
    "policy_gradient",
    "policy_gradient",
    citation="Williams 1992; Schulman et al. 2017 (PPO); Shao et al. 2024 (GRPO)",
    summary="the preset's advantages, clipped (or plain) policy loss, KL and entropy terms",
)
