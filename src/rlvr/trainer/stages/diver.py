"""DIVER's diversity-incentivised reward shaping as a draw stage (Hu et al. 2025,
arXiv:2509.26209; :func:`rlvr.algorithms.diver_rewards`): each correct sample's reward gains
lambda times its clipped diversity against the rest of its group, before the advantages. The
prompt sampler and the logged reward terms (``reward/<term>/mean``) see the unshaped rewards;
``reward/mean``, the group selector and the advantages see the shaped ones."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr import algorithms
from rlvr.trainer.stages.base import DrawState, register_stage


@dataclass(frozen=True)
class DiversityBonus:
    """Settings of ``{name: diver, measure, lam, sigma, correct_at, chars, until_step}``.

    Attributes:
        measure: ``textual`` (1 - mean symmetric BLEU to the group) or ``equation`` (the share
            of a response's formulas no other response of its group writes).
        lam: the bonus's weight (1 in the authors' runs).
        sigma: its clip (0.68 in the authors' ``equ`` runs).
        correct_at: a sample is correct when its reward reaches this (1: a verifier's).
        chars: the characters of each response the measure reads (1000).
        until_step: the shaping stops after this step (the authors' code: 100); None: never.
    """

    measure: str = "textual"
    lam: float = 1.0
    sigma: float = 0.68
    correct_at: float = 1.0
    chars: int = 1000
    until_step: int | None = None

    def __post_init__(self) -> None:
        if self.measure not in algorithms.DIVER_MEASURES:
            raise ValueError(
                f"measure must be one of {', '.join(algorithms.DIVER_MEASURES)}; got "
                f"{self.measure!r}"
            )
        if self.lam < 0 or self.sigma <= 0 or self.chars <= 0:
            raise ValueError(
                f"lam must be >= 0, sigma and chars > 0; got {self.lam}, {self.sigma}, {self.chars}"
            )
        if self.until_step is not None and self.until_step < 1:
            raise ValueError(f"until_step must be >= 1 or null, got {self.until_step}")


@register_stage("diver", DiversityBonus)
def diver(state: DrawState, settings: DiversityBonus) -> None:
    """Replace the draw's rewards by DIVER's (until ``until_step``): ``r + lam clip(d, 0,
    sigma)`` on the correct samples, ``d`` the sample's diversity in its group."""
    if settings.until_step is not None and state.step > settings.until_step:
        return
    table = state.table
    shaped = algorithms.diver_rewards(
        table.rewards,
        table.group_ids,
        list(table.texts),
        settings.measure,
        settings.lam,
        settings.sigma,
        settings.correct_at,
        settings.chars,
    )
    state.table = table.with_columns(rewards=shaped.to(table.rewards.dtype))
