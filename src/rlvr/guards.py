"""Numerical guards: a step whose rewards, advantages, loss or gradients are NaN/inf does not
update the policy, and too many in a row stop the run (see DESIGN.md, "A run never lies")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from rlvr.errors import NonFiniteError


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
    """Counts consecutive non-finite steps; :meth:`observe` raises after ``limit`` in a row.

    ``first`` names the first bad quantity of the current streak ("loss at step 12").
    """

    limit: int
    streak: int = 0
    first: str | None = None

    def observe(self, step: int, bad: str | None, resume_hint: str) -> None:
        """Record step ``step`` (``bad``: the non-finite quantity, or None); ``resume_hint``
        (the last good checkpoint and how to go on from it) ends the message."""
        if bad is None:
            self.streak, self.first = 0, None
            return
        self.streak += 1
        self.first = self.first or f"{bad} at step {step}"
        if self.streak >= self.limit:
            raise NonFiniteError(
                f"training stopped: {self.streak} steps in a row had non-finite values (first: "
                f"non-finite {self.first}); none of them was checkpointed. {resume_hint}"
            )


def resume_hint(run_dir: Path, last_good: Path | None) -> str:
    """Where a run stopped by :class:`NonFiniteGuard` can go on from, as a sentence."""
    if last_good is None:
        return (
            "No checkpoint was written before; start the run again with a lower train.lr "
            "(or check the reward)."
        )
    return (
        f"Last good checkpoint: {last_good}. Resume from it with a lower learning rate: "
        f"rlvr train --resume {run_dir} --set train.lr=<lower>"
    )
