"""The group objective kind: an objective over each question's whole group of samples
(DisCO and DRPO, :mod:`rlvr.algorithms.disco`; GVPO, :mod:`rlvr.algorithms.gvpo`; MPO,
:mod:`rlvr.algorithms.mpo`).

The units the learner shuffles into minibatches are the step's groups; a micro-batch holds
``max(1, micro_batch_size // G)`` whole groups, and the loss of one is

    (-sum_q J_q + g * penalty) / (the minibatch's groups)

with J_q the objective of question q and the penalty computed over the micro-batch's tokens,
as the authors' code does per micro-batch. pi_old's log-probs come from a no-grad pass before
the update (the KL and the L-ratio score read them). An objective whose function names
``max_new_tokens`` is given ``rollout.max_new_tokens`` (DRPO's L_max); one that names
``ref_logp`` is given pi_ref's [g, G, T] log-probs from a no-grad pass (MPO; it is registered
with ``needs_reference``, so the run keeps a reference). Logged: ``policy/loss``
and, under the objective's name, its mean J (``<name>/objective``), its penalty, the share of
groups it could use (``valid_groups_frac``, where it says) and its own scalars (DisCO's ``kl``).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rlvr import algorithms
from rlvr.policy import Batch
from rlvr.trainer.batch import Samples
from rlvr.trainer.learner.kinds import (
    Averages,
    ObjectiveKind,
    Prepared,
    register_objective_kind,
)

if TYPE_CHECKING:
    from rlvr.trainer.learner.engine import Learner


@dataclass
class Groups(Prepared):
    """One update's groups (``units``: their number).

    Attributes:
        batch: the padded batch of the step's samples, in the step's order.
        rows: [P, G] the rows of ``batch`` of each group (groups by id, rows in order).
        old_logp: pi_old [N, T].
        ref_logp: pi_ref [N, T], or None when the run keeps no reference.
        rewards: [N] the samples' rewards.
    """

    batch: Batch
    rows: torch.Tensor
    old_logp: torch.Tensor
    ref_logp: torch.Tensor | None
    rewards: torch.Tensor


@register_objective_kind("groups")
class GroupObjective(ObjectiveKind):
    """A registered group objective over each question's samples (see the module docstring)."""

    def prepare(self, learner: Learner, data: Samples) -> Groups:
        """The groups, each of one size, and pi_old's pass."""
        ids = data.group_ids
        order = torch.argsort(ids, stable=True)
        sizes = torch.bincount(ids)
        sizes = sizes[sizes > 0]
        if len(set(sizes.tolist())) != 1:
            raise ValueError(
                f"objective {learner.algo.objective.name!r} needs groups of one size, got "
                f"{sorted(set(sizes.tolist()))}"
            )
        batch = learner.batch(data)
        passes = learner.no_grad_passes(batch, torch.arange(len(data)), True)
        assert passes.old_logp is not None
        return Groups(
            units=len(sizes),
            batch=batch,
            rows=order.view(len(sizes), int(sizes[0])),
            old_logp=passes.old_logp,
            ref_logp=passes.ref_logp,
            rewards=data.rewards.to(learner.device),
        )

    def accumulate(
        self,
        learner: Learner,
        prepared: Prepared,
        units: torch.Tensor,
        first_epoch: bool,
        averages: Averages,
    ) -> None:
        """The minibatch's gradient over its groups (this learner's share), whole groups per
        micro-batch."""
        assert isinstance(prepared, Groups)
        mine = learner.share(units)
        size = prepared.rows.shape[1]
        per = max(1, learner.cfg.train.micro_batch_size // size)
        learner.backward(
            mine,
            per,
            lambda sub, into: self.loss(learner, prepared, sub, float(len(units)), into),
            averages,
        )

    def loss(
        self,
        learner: Learner,
        p: Groups,
        groups: torch.Tensor,
        total_groups: float,
        averages: Averages,
    ) -> torch.Tensor:
        """The loss of one micro-batch of ``groups``, normalised by the minibatch's group count."""
        g, size = len(groups), p.rows.shape[1]
        rows = p.rows[groups].flatten()
        sub = p.batch.select(rows)
        width = sub.completion_ids.shape[1]
        mask = sub.action_mask.float()
        logp, entropy = learner.forward(learner.trained_model, sub, entropy=True)
        old = p.old_logp[rows, :width]
        shaped = (logp.view(g, size, width), old.view(g, size, width), mask.view(g, size, width))
        objective = algorithms.OBJECTIVES[learner.algo.objective.name]
        assert objective.fn is not None
        params = dict(learner.algo.objective.params)
        named = inspect.signature(objective.fn).parameters
        if "max_new_tokens" in named:
            params["max_new_tokens"] = learner.cfg.rollout.max_new_tokens
        if "ref_logp" in named:
            assert p.ref_logp is not None, "an objective that reads pi_ref needs_reference"
            params["ref_logp"] = p.ref_logp[rows, :width].view(g, size, width)
        terms, penalty, info = objective.fn((*shaped, p.rewards[rows].view(g, size)), **params)
        loss = (-terms.sum() + g * penalty) / total_groups
        learner.finite(loss, "loss", "policy/loss")
        name = learner.algo.objective.name
        averages.add("policy/loss", (-terms.mean() + penalty).item(), g)
        averages.add(f"{name}/objective", terms.detach().mean().item(), g)
        averages.add(f"{name}/penalty", penalty.detach().item(), g)
        for key, value in info.items():  # the objective's own metrics: scalars, valid groups
            if key == "valid":
                averages.add(f"{name}/valid_groups_frac", value.float().mean().item(), g)
            elif value.dim() == 0:
                averages.add(f"{name}/{key}", value.item(), g)
        tokens = float(mask.sum())
        averages.add("policy/entropy", algorithms.masked_mean(entropy, mask).item(), tokens)
        return loss
