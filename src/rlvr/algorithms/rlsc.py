"""RLSC, reinforcement learning via self-confidence ("Confidence Is All You Need: Few-Shot RL
Fine-Tuning of Language Models", 2025, arXiv:2506.06395; its sections 2.1-2.3 and Algorithm 1).

No reward: the policy sharpens its own answer distribution. The objective is the probability
that two of its samples agree,

    F(p_theta) = E_{y ~ p_theta(.|x)} [p_theta(y|x)] = sum_y p_theta(y|x)^2,

whose gradient, with samples from a frozen copy p_old, is E_{y ~ p_old}[p_old(y|x) grad log
p_theta(y|x)]. The paper's loss, smoothed by alpha > 0 so that unlikely samples still count,

    L = - sum_y (p_old(y|x) + alpha) log p_theta(y|x)                              (L2)

is REINFORCE with the advantage A_y = p_old(y|x) + alpha on the sequence log-probability: in
Algorithm 1, ``-(exp(log_p).detach() + alpha) * log_p``, log_p the sum of the completion
tokens' log-probs at the sampling temperature. Here p_old(y|x) is the sampler's probability of
the whole completion, exp of the sum of its tokens' log-probs (temperature-scaled, as the
engine reports them), and the preset ``rlsc`` trains -A log pi summed over each completion's
tokens (``none`` policy loss, ``seq-mean-token-sum``). The paper samples 16 completions per
question at temperature 0.5 and uses alpha = 0.1. A long completion's probability is tiny, so
there A is about alpha: the loss is then alpha times the samples' NLL.
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import AdvantageInputs, AdvantageOutput, register_advantage


def rlsc_advantages(
    sampler_logp: torch.Tensor, mask: torch.Tensor, alpha: float = 0.1
) -> torch.Tensor:
    """A_y = p_old(y|x) + alpha [N]: each completion's probability under the sampler (exp of
    the sum of its tokens' log-probs ``sampler_logp`` [N, T] where ``mask`` [N, T]) plus
    ``alpha``."""
    if alpha < 0:
        raise ValueError(f"rlsc: alpha must be >= 0, got {alpha}")
    sequence = (sampler_logp.to(torch.float64) * mask).sum(-1)
    return (sequence.exp() + alpha).to(torch.float32)


@register_advantage(
    "rlsc",
    requires=("student_logp",),
    paper='"Confidence Is All You Need: Few-Shot RL Fine-Tuning of Language Models", 2025, '
    "arXiv:2506.06395",
)
def _rlsc_estimator(inputs: AdvantageInputs, alpha: float = 0.1) -> AdvantageOutput:
    return AdvantageOutput(rlsc_advantages(inputs.student_logp, inputs.mask, alpha))
