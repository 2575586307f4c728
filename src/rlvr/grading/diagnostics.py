"""Per-step training diagnostics: answer diversity within groups, and update sparsity.

Pure functions the trainer calls once per step; they never change the model or any RNG.

* :func:`answer_entropy_within_groups` -- mean over prompts of the entropy
  (:func:`answer_entropy`) of the final answers extracted from the prompt's G completions. A drop towards 0 means the policy answers every
  prompt the same way whatever it samples (diversity collapse); GRPO-style advantages vanish
  for groups whose answers, hence rewards, all agree.
* :func:`update_sparsity` -- the fraction of parameters that differ from the initial model
  (Mukherjee et al. 2025, "Reinforcement Learning Finetunes Small Subnetworks in Large Language
  Models", who find RL updates only 5-30% of the parameters). Needs the initial parameters,
  held by :func:`snapshot_params`.

Holding the initial parameters: an exact comparison needs an exact copy. A bf16 copy of fp32
weights is *not* enough: rounding to bf16 keeps 8 of 24 mantissa bits, so every untouched fp32
weight would compare unequal to its rounded copy, and comparing in bf16 instead hides every
update smaller than about 2^-9 of the weight's magnitude (typical Adam steps at lr 1e-6 are far
smaller), which would make RL updates look sparser than they are. :func:`snapshot_params`
therefore copies each parameter in its own dtype (fp32: 4 bytes per parameter, 540 MB for a
135M model), stores the copy on the CPU by default so that it costs no accelerator memory,
stores tied weights (e.g. embeddings shared with the LM head) once, and skips frozen parameters.
:func:`update_sparsity` compares in chunks, so its temporary memory stays small.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np
import torch

from rlvr.answers import normalize_answer

_CHUNK = 1 << 22  # elements compared at once (16 MB of fp32)


def answer_entropy(answers: Sequence[str | None]) -> float:
    """Entropy in nats of the empirical distribution of normalised answers
    (:func:`~rlvr.answers.normalize_answer`).

    "No answer" counts as one class of its own. 0 for an empty list.
    """
    classes = [normalize_answer(a) for a in answers]
    if not classes:
        return 0.0
    counts = np.array(list(Counter(classes).values()), dtype=np.float64)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def answer_entropy_within_groups(
    answers: Sequence[str | None], group_ids: Sequence[int] | torch.Tensor
) -> float:
    """Mean over groups of the entropy (nats) of the extracted answers within each group.

    Answers are compared after :func:`rlvr.answers.normalize_answer` ("42" and "42.0"
    agree); a sample without an answer (None) counts as one answer class of its own.

    Args:
        answers: N extracted answers, e.g. ``[extract_answer(c) for c in completions]``.
        group_ids: N prompt indices (``rollout.group_ids``: sample i belongs to prompt i // G).
    Returns:
        The mean entropy; 0.0 for no samples. With G samples per group the maximum is log(G).
    """
    ids = group_ids.tolist() if isinstance(group_ids, torch.Tensor) else list(group_ids)
    if len(ids) != len(answers):
        raise ValueError(f"got {len(answers)} answers but {len(ids)} group ids")
    groups: dict[int, list[str | None]] = defaultdict(list)
    for gid, answer in zip(ids, answers, strict=True):
        groups[int(gid)].append(answer)
    if not groups:
        return 0.0
    return sum(answer_entropy(g) for g in groups.values()) / len(groups)


@torch.no_grad()
def snapshot_params(
    model: torch.nn.Module, device: torch.device | str = "cpu"
) -> dict[str, torch.Tensor]:
    """An exact copy of the model's trainable parameters, for :func:`update_sparsity`.

    Each parameter is copied in its own dtype (exact: no rounding) to ``device`` (CPU by default,
    so an accelerator pays nothing); tied parameters are stored once under their first name, and
    parameters with ``requires_grad=False`` are skipped (they cannot change). A sharded
    parameter (a ``DTensor``) is copied as this process's shard.
    """
    out: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters():  # yields a tied tensor once
        if param.requires_grad:
            out[name] = _local(param.detach()).to(device=device, copy=True)
    return out


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This process's shard of a sharded tensor (``DTensor.to_local``), else ``tensor``."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


@torch.no_grad()
def update_sparsity(
    model: torch.nn.Module, initial_params: dict[str, torch.Tensor], atol: float = 0.0
) -> float:
    """Fraction of parameters (elements) that changed since ``initial_params``
    (:func:`changed_elements`, changed / total; 0.0 if there are none)."""
    changed, total = changed_elements(model, initial_params, atol)
    return changed / total if total else 0.0


def changed_elements(
    model: torch.nn.Module, initial_params: dict[str, torch.Tensor], atol: float = 0.0
) -> tuple[int, int]:
    """(changed, total) parameter elements since ``initial_params`` (of this process's shards
    where the parameters are sharded: summed over the ranks, they are the whole model's).

    A parameter element counts as changed when ``|p - p0| > atol`` (``atol = 0``: any bit of
    difference; Mukherjee et al. 2025 use a small tolerance such as 1e-5 to ignore numerical
    noise). Note the direction: this returns the *updated* fraction; the paper's "update
    sparsity" is ``1 - update_sparsity(...)``.

    Args:
        model: the current policy.
        initial_params: from :func:`snapshot_params` (names of ``model.named_parameters()``);
            every entry must exist in the model with the same shape.
        atol: absolute tolerance.
    Returns:
        Changed elements and total elements over the parameters in ``initial_params``.
    """
    params = dict(model.named_parameters())
    changed, total = 0, 0
    for name, initial in initial_params.items():
        if name not in params:
            raise KeyError(f"update_sparsity: parameter {name!r} is not in the model")
        current = _local(params[name].detach())
        if current.shape != initial.shape:
            raise ValueError(
                f"update_sparsity: {name!r} has shape {tuple(current.shape)}, "
                f"initial {tuple(initial.shape)}"
            )
        flat_now, flat_init = current.reshape(-1), initial.reshape(-1)
        for lo in range(0, flat_now.numel(), _CHUNK):
            a = flat_now[lo : lo + _CHUNK]
            b = flat_init[lo : lo + _CHUNK].to(device=a.device, non_blocking=True)
            if atol > 0:
                diff = (a.float() - b.float()).abs() > atol
            else:
                diff = a != b
            changed += int(diff.sum())
        total += flat_now.numel()
    return changed, total
