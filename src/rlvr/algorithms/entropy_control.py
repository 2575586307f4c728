"""Adaptive entropy control: an entropy bonus switched on, and its weight raised, only while
the policy's entropy is below a target (He et al. 2025, "Skywork Open Reasoner 1 Technical
Report", arXiv:2505.22312, Sec. 3.2.4).

A fixed entropy bonus either does too little or blows the entropy up; the report keeps the
entropy in a band around a target H_tgt instead. Step k's loss is

    L = L_pg - c_k 1[active_k] H_bar                  (H_bar: the tokens' mean entropy)

and after the step, from that step's mean entropy H_k:

    c_{k+1} = clip(c_k + delta, 0, c_max)   if H_k < H_tgt
              clip(c_k - delta, 0, c_max)   otherwise,
    active_{k+1} = H_k < H_tgt.

The report's values: H_tgt = 0.2, delta = 1e-4, c_max = 0.005, c_0 = 0. Set
``algorithm.entropy.target`` (``coef_step``, ``coef_max``); the coefficient and the
switch are checkpointed (:class:`EntropyController`), so a resumed run continues them.
"""

from __future__ import annotations

import torch


def adapt_entropy_coef(
    coef: float, entropy: float, target: float, step: float, max_coef: float
) -> tuple[float, bool]:
    """(c_{k+1}, active_{k+1}) from c_k and the step's mean entropy (see the module docstring)."""
    below = entropy < target
    new = coef + step if below else coef - step
    return min(max(new, 0.0), max_coef), below


class EntropyController(torch.nn.Module):
    """The state of adaptive entropy control, as buffers (a checkpoint stores them).

    Attributes:
        target, step, max_coef: H_tgt, delta and c_max.
        coef: [] float64 buffer, c_k; active: [] bool buffer, the switch of step k.
    """

    def __init__(self, target: float, step: float = 1e-4, max_coef: float = 0.005) -> None:
        super().__init__()
        if not (step > 0 and max_coef >= 0):
            raise ValueError(
                f"entropy control needs step > 0, max_coef >= 0; got {step}, {max_coef}"
            )
        self.target, self.step, self.max_coef = target, step, max_coef
        self.register_buffer("coef", torch.zeros((), dtype=torch.float64))
        self.register_buffer("active", torch.zeros((), dtype=torch.bool))

    @property
    def bonus(self) -> float:
        """The weight of this step's entropy bonus: c_k 1[active_k]."""
        return float(self.coef) if bool(self.active) else 0.0

    def update(self, entropy: float) -> None:
        """After a step whose mean token entropy was ``entropy``: c and the switch of the next."""
        coef, active = adapt_entropy_coef(
            float(self.coef), entropy, self.target, self.step, self.max_coef
        )
        self.coef.fill_(coef)
        self.active.fill_(active)
