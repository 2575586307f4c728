"""The imitation objective kind: SFT on demonstrations (Ouyang et al. 2022, arXiv:2203.02155)
and rejection-sampling fine-tuning on verified samples (RFT, Yuan et al. 2023,
arXiv:2308.01825).

The policy-gradient objective (:mod:`~rlvr.trainer.learner.policy_gradient`) with its surrogate
(2) replaced by l_{i,t} = -w_i log pi_theta(y_{i,t}) on the samples with w_i > 0 (w the
preset's advantages: 1 for a demonstration or a verified sample), token mean over their trained
tokens (:func:`rlvr.algorithms.nll_loss`); every other term is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from rlvr import algorithms
from rlvr.trainer.learner.kinds import Averages, register_objective_kind
from rlvr.trainer.learner.policy_gradient import PolicyGradient

if TYPE_CHECKING:
    from rlvr.trainer.learner.engine import Learner


@register_objective_kind("imitation")
class Imitation(PolicyGradient):
    """SFT and RFT (:mod:`rlvr.algorithms.imitation`): the surrogate (2) is -w_i log pi_theta
    on the samples with w_i > 0, whose tokens alone the token mean counts."""

    def trained_tokens(self, train_mask: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
        kept = advantages > 0 if advantages.dim() == 1 else (advantages > 0).any(-1)
        return train_mask * kept[:, None]

    def surrogate(
        self,
        learner: Learner,
        logp: torch.Tensor,
        old: torch.Tensor,
        sampler_logp: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        first_row: int,
        proxy_logp: torch.Tensor | None = None,
        entropy: torch.Tensor | None = None,
        ref_logp: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        return algorithms.nll_loss(logp, advantages), {}

    def surrogate_metrics(
        self,
        info: dict[str, Any],
        logp: torch.Tensor,
        action: torch.Tensor,
        mask: torch.Tensor,
        averages: Averages,
    ) -> None:
        nll = algorithms.masked_mean(-logp.detach(), mask).item()
        averages.add("sft/nll", nll, float(mask.sum()))
