"""The pair objective kind: DPO, IPO, REBEL (:mod:`rlvr.algorithms.preference`).

The pairs (chosen y_c, rejected y_r) of each group (:func:`rlvr.algorithms.preference_pairs`)
are shuffled into minibatches instead of samples, and

    J(theta) = -mean_pairs l(log pi(y_c), log pi(y_r), log pi_ref(.), log pi_old(.), r_c - r_r)

with sequence log-probs ``log pi(y | x) = sum_t log pi(y_t | x, y_<t)`` over each completion's
trained tokens, l the objective's registered pair loss. With ``objective.sft_coef`` alpha > 0,
each pair's loss adds the chosen completion's length-normalised NLL (RPO: Pang et al. 2024,
"Iterative Reasoning Preference Optimization", arXiv:2404.19733, eq. 2):

    l_RPO = l + alpha * (-log pi(y_c | x) / |y_c|)

A pair loss whose function names ``tokens`` is also given the pairs' per-token log-probs
(:class:`~rlvr.algorithms.PairTokens`: the policy's, the reference's and, when the objective
``needs_teacher``, ``model.teacher``'s; TGDPO weighs each token by the teacher's token reward).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rlvr import algorithms
from rlvr.policy import Batch
from rlvr.trainer.batch import Samples
from rlvr.trainer.learner.advantage_inputs import padded
from rlvr.trainer.learner.kinds import (
    Averages,
    ObjectiveKind,
    Prepared,
    register_objective_kind,
)

if TYPE_CHECKING:
    from rlvr.trainer.learner.engine import Learner


@dataclass
class Pairs(Prepared):
    """One update's pairs (``units``: their number).

    Attributes:
        batch: the padded batch of the step's samples.
        pairs: [P, 2] (chosen, rejected) rows of ``batch``.
        skipped_groups: groups that gave no pair (equal rewards).
        old_logp: pi_old [N, T] of the paired rows, or None on-policy.
        ref_logp: pi_ref [N, T] of the paired rows, or None without a reference.
        teacher_logp: ``model.teacher``'s [N, T] of the paired rows, or None without one.
        sampler_logp: [N, T] the behaviour policy's log-probs (the rollout engine's as sampled).
        rewards: [N] the samples' rewards.
        samples: N, the step's samples.
    """

    batch: Batch
    pairs: torch.Tensor
    skipped_groups: int
    old_logp: torch.Tensor | None
    ref_logp: torch.Tensor | None
    teacher_logp: torch.Tensor | None
    sampler_logp: torch.Tensor
    rewards: torch.Tensor
    samples: int


@register_objective_kind("pairs")
class PairObjective(ObjectiveKind):
    """A registered pair loss over the pairs of each group (see the module docstring)."""

    def prepare(self, learner: Learner, data: Samples) -> Pairs:
        """The pairs, and the no-grad passes of the paired rows only."""
        objective = learner.algo.objective
        chosen, rejected, skipped = algorithms.preference_pairs(
            data.rewards,
            data.group_ids,
            algorithms.pairing(learner.algo),
            objective.margin,
            objective.min_chosen,
            data.expert,
            objective.student_margin,
        )
        pairs = torch.stack([chosen, rejected], dim=1).reshape(-1, 2)
        batch = learner.batch(data)
        passes = learner.no_grad_passes(batch, pairs.flatten().unique(), not learner.on_policy)
        return Pairs(
            units=len(pairs),
            batch=batch,
            pairs=pairs,
            skipped_groups=skipped,
            old_logp=passes.old_logp,
            ref_logp=passes.ref_logp,
            teacher_logp=passes.teacher_logp,
            sampler_logp=padded(data.sampler_logprobs, batch.action_mask.shape).to(learner.device),
            rewards=data.rewards.to(learner.device),
            samples=len(data),
        )

    def accumulate(
        self,
        learner: Learner,
        prepared: Prepared,
        units: torch.Tensor,
        first_epoch: bool,
        averages: Averages,
    ) -> None:
        """The minibatch's gradient over its pairs (this learner's share), a micro-batch of
        ``micro_batch_size / 2`` pairs at a time (two sequences each)."""
        assert isinstance(prepared, Pairs)
        pairs = prepared.pairs[units]
        mine = pairs[learner.share(torch.arange(len(pairs)))]
        per = max(1, learner.cfg.train.micro_batch_size // 2)
        learner.backward(
            mine,
            per,
            lambda sub, into: self.loss(learner, prepared, sub, float(len(pairs)), into),
            averages,
        )

    def loss(
        self,
        learner: Learner,
        p: Pairs,
        pairs: torch.Tensor,
        total_pairs: float,
        averages: Averages,
    ) -> torch.Tensor:
        """The loss of one micro-batch of ``pairs`` [p, 2], normalised by the minibatch's global
        pair count ``total_pairs``."""
        n = len(pairs)
        rows = torch.cat([pairs[:, 0], pairs[:, 1]])  # chosen rows, then rejected rows
        sub = p.batch.select(rows)
        width = sub.completion_ids.shape[1]
        mask = sub.action_mask.float()
        logp, entropy = learner.forward(learner.trained_model, sub, entropy=True)
        seq = (logp * mask).sum(-1)  # log pi(y | x) [2p]
        old = logp.detach() if p.old_logp is None else p.old_logp[rows, :width]
        old_seq = (old * mask).sum(-1)
        ref_seq = None if p.ref_logp is None else (p.ref_logp[rows, :width] * mask).sum(-1)
        sampler_seq = (p.sampler_logp[rows, :width] * mask).sum(-1)
        rewards = p.rewards[rows]
        logps = algorithms.PairLogps(
            chosen=seq[:n],
            rejected=seq[n:],
            ref_chosen=None if ref_seq is None else ref_seq[:n],
            ref_rejected=None if ref_seq is None else ref_seq[n:],
            old_chosen=old_seq[:n],
            old_rejected=old_seq[n:],
            reward_margin=rewards[:n] - rewards[n:],
            chosen_tokens=mask[:n].sum(-1),
            rejected_tokens=mask[n:].sum(-1),
            sampler_chosen=sampler_seq[:n],
            sampler_rejected=sampler_seq[n:],
        )
        objective = algorithms.OBJECTIVES[learner.algo.objective.name]
        assert objective.fn is not None
        params = dict(learner.algo.objective.params)
        if "tokens" in inspect.signature(objective.fn).parameters:
            params["tokens"] = self.tokens(p, rows, logp, mask, n)
        loss_pairs, info = objective.fn(logps, **params)
        alpha = learner.algo.objective.sft_coef
        if alpha > 0:  # RPO: the chosen completion's NLL per token
            nll = -seq[:n] / mask[:n].sum(-1).clamp_min(1.0)
            loss_pairs = loss_pairs + alpha * nll
            averages.add("preference/chosen_nll", nll.detach().mean().item(), n)
        loss = loss_pairs.sum() / total_pairs
        learner.finite(loss, "loss", "policy/loss")
        averages.add("policy/loss", loss_pairs.mean().item(), n)
        for key, value in info.items():
            averages.add(f"preference/{key}", value.float().mean().item(), n)
        tokens = float(mask.sum())
        averages.add("policy/entropy", algorithms.masked_mean(entropy, mask).item(), tokens)
        return loss

    @staticmethod
    def tokens(
        p: Pairs, rows: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor, n: int
    ) -> algorithms.PairTokens:
        """The per-token log-probs of the micro-batch's ``n`` pairs (``rows``: chosen, then
        rejected; ``logp`` and ``mask`` [2n, T] in that order), 0 outside the trained tokens."""
        width = logp.shape[1]
        if p.ref_logp is None:
            raise ValueError("a pair loss that reads tokens needs a reference (needs_reference)")
        ref = p.ref_logp[rows, :width] * mask
        teacher = None if p.teacher_logp is None else p.teacher_logp[rows, :width] * mask
        policy = logp * mask
        return algorithms.PairTokens(
            chosen=policy[:n],
            rejected=policy[n:],
            ref_chosen=ref[:n],
            ref_rejected=ref[n:],
            teacher_chosen=None if teacher is None else teacher[:n],
            teacher_rejected=None if teacher is None else teacher[n:],
            chosen_mask=mask[:n],
            rejected_mask=mask[n:],
        )

    def summary(self, learner: Learner, prepared: Prepared, metrics: dict[str, float]) -> None:
        assert isinstance(prepared, Pairs)
        pairs = prepared.pairs
        metrics["preference/pairs"] = float(len(pairs))
        metrics["preference/skipped_groups"] = float(prepared.skipped_groups)
        metrics["policy/trained_samples_frac"] = float(len(pairs.unique())) / max(
            1, prepared.samples
        )
