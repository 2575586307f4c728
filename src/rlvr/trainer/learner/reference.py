"""The reference policy pi_ref of the KL term and of DPO / IPO (:class:`Reference`): a frozen
copy of the initial weights, or for a LoRA policy the policy itself with its adapter switched
(no second copy of the weights); reset to the policy every so often (ProRL) or trailing it
(TR-DPO)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from rlvr import adapters, algorithms


@dataclass
class Reference:
    """pi_ref, one of three forms.

    Attributes:
        policy: the trained policy (the adapter forms switch its adapter).
        copy: a frozen copy of the initial full weights, or None for an adapter form.
        adapter: ``"base"`` (the policy with its adapters disabled: the base model) or
            :data:`rlvr.adapters.REFERENCE` (a frozen copy of the adapter: one that existed
            before the run, or ProRL's reset), or None for a full copy.
        reset_every: ProRL (Liu et al. 2025, arXiv:2505.24864): the reference becomes the
            current policy every ``reset_every`` steps (0: never).
        mix: with a full copy, TR-DPO's soft update (Gorbatovski et al. 2024,
            arXiv:2404.09656) pi_ref <- mix pi_theta + (1 - mix) pi_ref at a reset instead of
            a copy (1: a copy).
    """

    policy: torch.nn.Module
    copy: torch.nn.Module | None = None
    adapter: str | None = None
    reset_every: int = 0
    mix: float = 1.0

    @contextlib.contextmanager
    def model(self) -> Iterator[torch.nn.Module]:
        """The reference policy for the block."""
        if self.copy is not None:
            yield self.copy
        elif self.adapter == "base":
            with adapters.disabled(self.policy):
                yield self.policy
        else:
            assert self.adapter is not None, "a reference is a copy or an adapter"
            with adapters.active(self.policy, self.adapter):
                yield self.policy

    def reset_if_due(self, step: int) -> None:
        """ProRL: copy the policy into the reference after ``step`` when it is due (a LoRA
        policy: its adapter into the frozen reference adapter); with ``mix`` < 1, TR-DPO's soft
        update instead (full weights)."""
        if not algorithms.should_reset_reference(step, self.reset_every):
            return
        if self.copy is not None and self.mix < 1:  # TR-DPO: the reference trails the policy
            algorithms.soft_update(
                list(self.copy.parameters()), list(self.policy.parameters()), self.mix
            )
        elif self.copy is not None:
            self.copy.load_state_dict(self.policy.state_dict())
        else:
            assert self.adapter == adapters.REFERENCE  # reference_mix 1 (config.py)
            adapters.copy_adapter(self.policy, adapters.TRAINED, adapters.REFERENCE)

    def stored(self) -> torch.nn.Module | None:
        """What a checkpoint keeps of the reference: the reset one (else it is the initial model,
        rebuilt on resume), or None."""
        if not self.reset_every:
            return None
        if self.copy is not None:
            return self.copy
        if self.adapter == adapters.REFERENCE:
            return adapters.AdapterView(self.policy, adapters.REFERENCE)
        return None
