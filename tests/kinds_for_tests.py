"""A user's objective kind, registered from a plug-in with no edit of the learner: reward-weighted
regression (Peters and Schaal 2007, "Reinforcement Learning by Reward-Weighted Regression for
Operational Space Control", ICML), each group's samples imitated with weights
w_i = softmax_group(r_i / tau):

    L = - sum_i w_i * mean_t log pi_theta(y_{i,t}) / sum_i w_i     (over a minibatch's samples)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algorithms import add_objective
from rlvr.policy import Batch
from rlvr.trainer.learner import (
    Averages,
    Learner,
    ObjectiveKind,
    Prepared,
    SkipStep,
    register_objective_kind,
)

TAU = 0.5


@dataclass
class Weighted(Prepared):
    """The step's batch and each sample's weight w_i [N]."""

    batch: Batch
    weights: torch.Tensor


@register_objective_kind("reward_weighted")
class RewardWeighted(ObjectiveKind):
    def prepare(self, learner: Learner, data) -> Weighted:
        weights = torch.zeros(len(data))
        for group in data.group_ids.unique():
            rows = data.group_ids == group
            weights[rows] = torch.softmax(data.rewards[rows].float() / TAU, 0)
        return Weighted(units=len(data), batch=learner.batch(data), weights=weights)

    def accumulate(self, learner, prepared, units, first_epoch, averages: Averages) -> None:
        total = float(prepared.weights[units].sum())
        mine = learner.share(units)
        mb = learner.cfg.train.micro_batch_size
        for lo in range(0, len(mine), mb):
            rows = mine[lo : lo + mb]
            sub = prepared.batch.select(rows)
            logp = learner.forward(learner.trained_model, sub)[0]
            mask = sub.action_mask.float()
            mean_logp = (logp * mask).sum(-1) / mask.sum(-1).clamp(min=1)
            loss = -(prepared.weights[rows].to(logp.device) * mean_logp).sum() / total
            if not torch.isfinite(loss):
                raise SkipStep("loss", "policy/loss", loss.item())
            averages.add("policy/loss", loss.item())
            loss.backward()

    def summary(self, learner, prepared, metrics: dict[str, float]) -> None:
        metrics["rwr/weight_max"] = float(prepared.weights.max())


add_objective(
    "rwr",
    "reward_weighted",
    citation="Peters and Schaal 2007, Reinforcement Learning by Reward-Weighted Regression for "
    "Operational Space Control, ICML",
    summary="each group's samples imitated with weights softmax(r / tau)",
)
