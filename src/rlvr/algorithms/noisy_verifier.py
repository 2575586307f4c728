"""Advantages that stay unbiased under a noisy verifier with known error rates (Cai et al. 2025,
"Reinforcement Learning with Verifiable yet Noisy Rewards under Imperfect Verifiers",
arXiv:2510.00915).

A rule-based verifier errs both ways: it rejects right answers written in an unexpected form
(false negatives, rate rho1 = P(R~ = 0 | R* = 1)) and accepts some wrong ones (false positives,
rho0 = P(R~ = 1 | R* = 0)). With rho0 + rho1 < 1 the paper gives two corrections of the
observed binary reward R~:

    backward:  R^ = (R~ - rho0) / (1 - rho0 - rho1)      E[R^ | R*] = R*, an unbiased reward;
    forward:   w(R~ = 1) = rho1,  w(R~ = 0) = rho1 - 1   the score-function weight, whose
               expected update is (1 - rho0 - rho1) times the clean one (needs rho1 only).

``noisy_verifier`` with ``correction: backward`` centres R^ in its group (Dr. GRPO's baseline,
which keeps the estimate unbiased: GRPO's std division would cancel the correction's scale);
``correction: forward`` uses w as the advantage. Rewards must be binary (0 or 1). Select with
``algorithm.advantage: {name: noisy_verifier, false_negative_rate: ...,
false_positive_rate: ...}``; both rates 0 give Dr. GRPO (backward) or r - 1 (forward).
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    dr_grpo,
    register_advantage,
)


def _check(rewards: torch.Tensor, rho0: float, rho1: float) -> None:
    if not (0 <= rho0 < 1 and 0 <= rho1 < 1 and rho0 + rho1 < 1):
        raise ValueError(
            f"noisy_verifier needs 0 <= false_positive_rate, false_negative_rate and their sum "
            f"< 1, got {rho0} and {rho1}"
        )
    if not bool(((rewards == 0) | (rewards == 1)).all()):
        raise ValueError("noisy_verifier corrects binary verifier rewards: every reward 0 or 1")


def backward_corrected(rewards: torch.Tensor, rho0: float, rho1: float) -> torch.Tensor:
    """R^ = (R~ - rho0) / (1 - rho0 - rho1) [N]: unbiased for the clean reward."""
    _check(rewards, rho0, rho1)
    r = rewards if rewards.is_floating_point() else rewards.float()
    return (r - rho0) / (1 - rho0 - rho1)


def forward_weights(rewards: torch.Tensor, rho1: float) -> torch.Tensor:
    """w(R~) [N]: rho1 where R~ = 1, rho1 - 1 where R~ = 0."""
    _check(rewards, 0.0, rho1)
    r = rewards if rewards.is_floating_point() else rewards.float()
    return torch.where(r > 0, torch.full_like(r, rho1), torch.full_like(r, rho1 - 1))


@register_advantage(
    "noisy_verifier",
    paper='Cai et al. 2025, "RL with Verifiable yet Noisy Rewards", arXiv:2510.00915',
    group_relative=True,
)
def _noisy_verifier_estimator(
    inputs: AdvantageInputs,
    false_negative_rate: float = 0.0,
    false_positive_rate: float = 0.0,
    correction: str = "backward",
) -> AdvantageOutput:
    if correction == "backward":
        corrected = backward_corrected(inputs.rewards, false_positive_rate, false_negative_rate)
        return AdvantageOutput(dr_grpo(corrected, inputs.group_ids))
    if correction == "forward":
        return AdvantageOutput(forward_weights(inputs.rewards, false_negative_rate))
    raise ValueError(
        f"noisy_verifier: correction must be 'backward' or 'forward', got {correction!r}"
    )
