"""On-policy distillation: a teacher scores the student's own samples token by token, and the
per-token reverse KL is the (negative) advantage (Agarwal et al. 2024, GKD, arXiv:2306.13649;
Gu et al. 2024, MiniLLM, arXiv:2306.08543; Lu & Thinking Machines Lab 2025, "On-Policy
Distillation").

For a sampled completion y ~ pi_s, each token's reverse-KL estimate is
``log pi_s(y_t | x, y_<t) - log pi_T(y_t | x, y_<t)``, and minimising the sequence's reverse KL
KL(pi_s || pi_T) by the policy gradient gives the per-token advantage
``A_{i,t} = -coef * (log pi_s(y_{i,t}) - log pi_T(y_{i,t}))`` (no discounting: each token's own
term, as Thinking Machines' recipe), plus ``task_weight`` x the group-normalised task reward
when the task's reward is mixed in. The student's log-probs are the sampler's (the policy that
produced the samples).
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import AdvantageInputs, AdvantageOutput, grpo, register_advantage


def reverse_kl_advantages(
    student_logp: torch.Tensor,
    teacher_logp: torch.Tensor,
    mask: torch.Tensor,
    coef: float = 1.0,
) -> torch.Tensor:
    """``A_{i,t} = -coef * (log pi_s(y_{i,t}) - log pi_T(y_{i,t})) * m_{i,t}`` [N, T].

    Args:
        student_logp: [N, T] the student's (sampler's) log-probs of its sampled tokens.
        teacher_logp: [N, T] the teacher's log-probs of the same tokens.
        mask: [N, T] 1 on the tokens the loss sees.
        coef: the reverse KL's weight.
    Returns:
        [N, T] advantages; 0 where the teacher agrees with the student and on masked tokens.
    """
    if not student_logp.shape == teacher_logp.shape == mask.shape:
        raise ValueError(
            f"student_logp, teacher_logp and mask must have one shape, got "
            f"{tuple(student_logp.shape)}, {tuple(teacher_logp.shape)}, {tuple(mask.shape)}"
        )
    return -coef * (student_logp - teacher_logp) * mask


@register_advantage(
    "reverse_kl",
    paper='Agarwal et al. 2024, "On-Policy Distillation of Language Models", arXiv:2306.13649',
    requires=("mask", "student_logp", "teacher_logp"),
    token_level=True,
)
def _reverse_kl_estimator(
    inputs: AdvantageInputs, coef: float = 1.0, task_weight: float = 0.0
) -> AdvantageOutput:
    assert inputs.mask is not None and inputs.student_logp is not None
    assert inputs.teacher_logp is not None
    mask = inputs.mask.float()
    advantages = reverse_kl_advantages(inputs.student_logp, inputs.teacher_logp, mask, coef)
    if task_weight:  # the task reward mixed in: GRPO's outcome advantage on every token
        advantages = (
            advantages + task_weight * grpo(inputs.rewards, inputs.group_ids)[:, None] * mask
        )
    return AdvantageOutput(advantages)
