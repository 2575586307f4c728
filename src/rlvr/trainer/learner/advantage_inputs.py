"""What the policy-gradient kind hands the preset's advantage estimator: the batch's rewards and
signals as an :class:`rlvr.algorithms.AdvantageInputs`, per-turn credit of agent episodes, and
the advantages' statistics."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rlvr import algorithms
from rlvr.algorithms.credit import assign_credit, token_advantages
from rlvr.trainer.batch import Samples

if TYPE_CHECKING:
    from rlvr.trainer.learner.engine import NoGradPasses


def padded(
    values: list[list[float]],
    shape: torch.Size,
    fill: float = 0.0,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Per-token values of each sample right-padded with ``fill`` to ``shape`` [N, T]."""
    out = torch.full(shape, fill, dtype=dtype or torch.get_default_dtype())
    for i, row in enumerate(values):
        out[i, : len(row)] = torch.tensor(row, dtype=out.dtype)
    return out


def _reward_terms(
    data: Samples, device: torch.device
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The batch's reward terms [N, K] and their weights [K] (GDPO's inputs), or (None, None)
    where the reward is one function (no terms with weights)."""
    weights = data.term_weights
    if not weights or not data.terms or set(data.terms) != set(weights):
        return None, None
    labels = sorted(weights)
    terms = torch.tensor([data.terms[label] for label in labels], dtype=torch.float32).T
    return terms.to(device), torch.tensor([weights[label] for label in labels], device=device)


def advantage_inputs(
    data: Samples,
    mask: torch.Tensor,
    sampler_logp: torch.Tensor,
    passes: NoGradPasses,
    token_kl: torch.Tensor | None,
) -> algorithms.AdvantageInputs:
    """The estimator's inputs of ``data`` on ``mask``'s device: rewards, groups, the produced
    signals by name (each a column of the :class:`~rlvr.algorithms.AdvantageInputs`), the
    sampler's log-probs [N, T] (the student's, in distillation), the reward terms, and from
    the learner's no-grad ``passes`` the values, the entropies and the teacher's log-probs
    [N, T], with the per-token KL to the reference ``token_kl`` (each None when not computed)."""
    device = mask.device
    terms, term_weights = _reward_terms(data, device)
    signals = {k: v.to(device) for k, v in data.signals.items()}
    trees = data.columns.get("tree_segments")  # tree rollouts: each token's segment
    if trees is not None:
        signals["tree_segments"] = padded(trees, mask.shape, -1, torch.long).to(device)
    steps = data.columns.get("step_rewards")  # a process reward: each step's on its last token
    if steps is not None:
        placed = [(i, t, v) for i, row in enumerate(steps) for t, v in row if t < mask.shape[1]]
        dense = torch.full(mask.shape, float("nan"))
        if placed:
            rows, tokens, values = zip(*placed, strict=True)
            dense[list(rows), list(tokens)] = torch.tensor(values, dtype=dense.dtype)
        signals["step_rewards"] = dense.to(device)
    return algorithms.AdvantageInputs(
        rewards=data.rewards.to(device),
        group_ids=data.group_ids.to(device),
        mask=mask,
        token_kl=token_kl,
        values=passes.values,
        **signals,
        student_logp=sampler_logp,
        teacher_logp=passes.teacher_logp,
        token_entropy=passes.entropy,
        reward_terms=terms,
        term_weights=term_weights,
    )


def turn_credit(algo: algorithms.Algorithm, data: Samples, mask: torch.Tensor) -> torch.Tensor:
    """Per-token advantages [N, T] of agent episodes under ``algorithm.credit.name``
    (:mod:`rlvr.algorithms.credit`): per-turn advantages with the preset's estimator as the
    group baseline, spread over each turn's sampled tokens (``mask`` [N, T])."""

    def estimator(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
        inputs = algorithms.AdvantageInputs(rewards=rewards.float(), group_ids=group_ids)
        return algorithms.preset_advantages(algo, inputs).advantages

    per_turn = assign_credit(
        algo.credit.name,
        data.turn_rewards,
        data.anchors,
        data.group_ids.cpu(),
        estimator,
        gamma=algo.credit.gamma,
        weight=algo.credit.gigpo_weight,
        gate=algo.credit.gate,
    )
    return token_advantages(per_turn, mask.cpu()).to(mask.device)


def advantage_stats(advantages: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """``advantages/mean``, ``std``, ``abs_mean``, ``min``, ``max`` over the trained tokens
    (``mask`` [N, T]; per-sample advantages [N] count once per token, as the loss sees them;
    as verl logs them)."""
    per_token = advantages if advantages.dim() == 2 else advantages[:, None].expand(mask.shape)
    values = per_token[mask > 0].detach().float()
    if values.numel() == 0:
        return {}
    return {
        "advantages/mean": values.mean().item(),
        "advantages/std": values.std().item() if values.numel() > 1 else 0.0,
        "advantages/abs_mean": values.abs().mean().item(),
        "advantages/min": values.min().item(),
        "advantages/max": values.max().item(),
    }
