"""Process supervision: rewards per reasoning step, and the credit they give each token.

A completion's steps are its non-empty lines (PRM800K's and Math-Shepherd's unit of a step:
Lightman et al. 2023, "Let's Verify Step by Step", arXiv:2305.20050; Wang et al. 2024,
"Math-Shepherd", arXiv:2312.08935); a process reward scores each step
(:mod:`rlvr.rewards.process`: a judge's per-step verdict, a trained process reward model) and is
carried per token as ``step_rewards`` [N, T]: the step's reward on its last token, NaN on every
other token.

:func:`process_grpo` is GRPO with process supervision (Shao et al. 2024, "DeepSeekMath",
arXiv:2402.03300, Sec. 4.1.3): the step rewards of a group's G outputs,
R = {r_1^{index(1)}, ..., r_G^{index(K_G)}}, are normalised together,
``r~_i^{index(j)} = (r_i^{index(j)} - mean(R)) / std(R)``, and each token's advantage is the sum
of the normalised rewards of the steps that end at or after it,
``A_{i,t} = sum_{index(j) >= t} r~_i^{index(j)}``: a token is credited with what the steps it
leads to were worth. ``outcome_weight`` w > 0 adds w times the outcome GRPO advantage of the
completion to every token (process and outcome supervision together, as PRIME's combined
advantage, Cui et al. 2025, arXiv:2502.01456). ``transform`` applies Gao et al.'s Clip or Delta
mechanism to the step rewards first (:func:`transform_steps`).
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    _group_std,
    _group_sums,
    _need,
    grpo,
    register_advantage,
)


def step_spans(text: str) -> list[tuple[int, int]]:
    """The steps of ``text``: the ``(start, end)`` character span of each non-empty line (end
    exclusive, without its newline), in order."""
    spans, start = [], 0
    for line in text.split("\n"):
        if line.strip():
            spans.append((start, start + len(line)))
        start += len(line) + 1
    return spans


def process_grpo(
    step_rewards: torch.Tensor,
    group_ids: torch.Tensor,
    mask: torch.Tensor,
    eps: float = 1e-6,
) -> torch.Tensor:
    """DeepSeekMath's process-supervised GRPO advantages (module docstring).

    Args:
        step_rewards: [N, T] float, each step's reward on its last token, NaN elsewhere.
        group_ids: [N] the group of each completion.
        mask: [N, T] the completion tokens (advantages are 0 outside).
        eps: added to the group's std of step rewards.
    Returns:
        [N, T] advantages A_{i,t} = sum of r~ over the steps of completion i ending at t or later.
    """
    if step_rewards.shape != mask.shape or group_ids.shape != (step_rewards.shape[0],):
        raise ValueError(
            f"process_grpo: step_rewards {tuple(step_rewards.shape)} and mask "
            f"{tuple(mask.shape)} must be [N, T], group_ids [N]"
        )
    ends = ~torch.isnan(step_rewards) & mask.bool()
    rows, _ = ends.nonzero(as_tuple=True)
    # R per group: every step reward of the group's outputs, normalised together; a group with
    # one step reward gets 0 (scale 1), a group with none gets nothing
    r, inverse, count, total = _group_sums(step_rewards[ends], group_ids[rows])
    std = torch.where(count > 1, _group_std(r, inverse, count, total), torch.ones_like(count))
    normalised = torch.zeros_like(step_rewards)
    normalised[ends] = (r - (total / count)[inverse]) / (std[inverse] + eps)
    # A_{i,t} = sum_{index(j) >= t} r~: a reversed cumulative sum over the positions
    advantages = normalised.flip(-1).cumsum(-1).flip(-1)
    return advantages * mask


STEP_TRANSFORMS = ("none", "clip", "delta")


def transform_steps(step_rewards: torch.Tensor, transform: str, eta: float = 0.0) -> torch.Tensor:
    """Gao et al. 2024 ("On Designing Effective RL Reward at Training Time for LLM Reasoning",
    arXiv:2410.15115, Sec. 4) against a policy that games a PRM with many or few steps:

    * ``clip``: ``r_k <- min(r_k - eta, 0)``, so no step earns a positive reward and writing more
      steps never pays;
    * ``delta``: ``r_k <- r_k - r_{k+1}`` for every step but the last (``r_K`` kept), so a
      completion's step rewards sum to its first step's score whatever their number;
    * ``none``: unchanged.

    ``step_rewards`` [N, T]: each step's reward on its last token, NaN elsewhere (kept NaN).
    """
    if transform not in STEP_TRANSFORMS:
        raise ValueError(f"step transform must be one of {STEP_TRANSFORMS}, got {transform!r}")
    if transform == "none":
        return step_rewards
    if transform == "clip":
        return torch.clamp(step_rewards - eta, max=0.0)  # NaN stays NaN
    ends = ~torch.isnan(step_rewards)
    rows, cols = ends.nonzero(as_tuple=True)  # row-major: a row's steps in order, then the next
    values = step_rewards[rows, cols]
    following = rows[1:] == rows[:-1]  # step k has a step k + 1 in the same completion
    out = step_rewards.clone()
    out[rows[:-1][following], cols[:-1][following]] = values[:-1][following] - values[1:][following]
    return out


@register_advantage(
    "process_grpo",
    requires=("step_rewards",),
    token_level=True,
    paper='Shao et al. 2024, "DeepSeekMath" (Sec. 4.1.3, process supervision), arXiv:2402.03300',
    group_relative=True,
)
def _process_grpo_estimator(
    inputs: AdvantageInputs,
    eps: float = 1e-6,
    outcome_weight: float = 0.0,
    transform: str = "none",
    eta: float = 0.0,
) -> AdvantageOutput:
    mask = _need("process_grpo", inputs, "mask")
    steps = transform_steps(_need("process_grpo", inputs, "step_rewards"), transform, eta)
    advantages = process_grpo(steps, inputs.group_ids, mask, eps)
    if outcome_weight:
        outcome = grpo(inputs.rewards, inputs.group_ids, eps)
        advantages = advantages + outcome_weight * outcome[:, None] * mask
    return AdvantageOutput(advantages)
