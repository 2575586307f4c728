"""Numerical guards: a step whose rewards, advantages, loss or gradients are NaN/inf does not
update the policy, and too many in a row stop the run (see docs/design.md, "Numerical guards")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch


def first_nonfinite(values: dict[str, torch.Tensor | float]) -> str | None:
    """The name of the first value (a float or a tensor) holding NaN/inf, else None.

    Example: ``first_nonfinite({"rewards": torch.tensor([1.0, nan])}) == "rewards"``.
    """
    for name, value in values.items():
        finite = torch.isfinite(value).all() if torch.is_tensor(value) else math.isfinite(value)
        if not finite:
            return name
    return None


@dataclass
class NonFiniteGuard:
    """Counts consecutive non-finite steps; :attr:`tripped` after ``limit`` in a row.

    ``first`` names the first bad quantity of the current streak and ``first_step`` its step.
    """

    limit: int
    streak: int = 0
    first: str | None = None
    first_step: int | None = None

    def observe(self, step: int, bad: str | None) -> None:
        """Record step ``step``: ``bad`` names its non-finite quantity, or is None."""
        if bad is None:
            self.streak, self.first, self.first_step = 0, None, None
            return
        self.streak += 1
        if self.first is None:
            self.first, self.first_step = bad, step

    @property
    def tripped(self) -> bool:
        return self.streak >= self.limit

    def message(self) -> str:
        return (
            f"training stopped: {self.streak} steps in a row had non-finite values (first: "
            f"non-finite {self.first} at step {self.first_step}); none of them updated the "
            "weights or was checkpointed."
        )


def resume_hint(run_dir: Path, last_good: Path | None, set_aside: list[Path]) -> str:
    """Where a run stopped by :class:`NonFiniteGuard` can go on from, as sentences:
    ``last_good`` is the checkpoint ``--resume`` will load, ``set_aside`` the checkpoints
    written by the updates just before the divergence (renamed, kept for inspection)."""
    aside = ""
    if set_aside:
        names = ", ".join(p.name for p in set_aside)
        aside = (
            f" The checkpoint written by the update just before it may already have diverged "
            f"and was set aside ({names})."
        )
    if last_good is None:
        return aside + (
            " No earlier checkpoint: start the run again with a lower train.lr (or check the "
            "reward)."
        )
    return aside + (
        f" Last good checkpoint: {last_good}. Resume from it with a lower learning rate: "
        f"rlvr train --resume {run_dir} --set train.lr=<lower>"
    )
