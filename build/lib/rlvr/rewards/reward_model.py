"""The ``reward_model`` reward: a prompt's completions scored by a Bradley-Terry reward model.

The model is a directory written by ``rlvr rm train`` (:mod:`rlvr.reward_models`), loaded once
per process and device; it reads ``problem.prompt`` with the system prompt it was trained with.
Use it inside ``rlvr train``::

    reward:
      terms:
        - {name: reward_model, params: {path: runs/rm, normalize: standard}}
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Literal

import torch

from rlvr.data.base import Problem
from rlvr.reward_models.model import RewardModel, load_reward_model
from rlvr.rewards.registry import register_reward

Normalize = Literal["none", "center", "standard"]

_MODELS: dict[tuple[str, str], RewardModel] = {}
_LOAD_LOCK = threading.Lock()
# One forward at a time in this process: concurrent reward threads would oversubscribe the cores.
_FORWARD_LOCK = threading.Lock()


def cached_reward_model(path: str | os.PathLike, device: str = "cpu") -> RewardModel:
    """The reward model at ``path`` on ``device``, loaded once per process (thread-safe)."""
    key = (str(Path(path).resolve()), str(device))
    with _LOAD_LOCK:
        if key not in _MODELS:
            _MODELS[key] = load_reward_model(path, device)
        return _MODELS[key]


def normalize_rewards(
    rewards: torch.Tensor, stats: dict[str, float], normalize: Normalize
) -> torch.Tensor:
    """``none``: unchanged; ``center``: ``r - mean``; ``standard``: ``(r - mean) / std`` with the
    ``stats`` measured at training time (``std`` floored at 1e-6). ``rewards``: ``[N]``."""
    if normalize == "none":
        return rewards
    if normalize not in ("center", "standard"):
        raise ValueError(f"normalize must be none, center or standard, got {normalize!r}")
    if "mean" not in stats or "std" not in stats:
        raise ValueError("this reward model has no reward statistics; use normalize: none")
    centered = rewards - stats["mean"]
    return centered if normalize == "center" else centered / max(stats["std"], 1e-6)


@register_reward("reward_model", kind="group")
def reward_model(
    completions: list[str],
    problem: Problem,
    path: str,
    normalize: Normalize = "none",
    batch_size: int = 16,
    device: str = "cpu",
) -> list[float]:
    """Scores ``[G]`` of a prompt's completions by the reward model saved at ``path``
    (``rlvr rm train``), read on ``problem.prompt`` with the system prompt it was trained with.

    Args:
        path: directory written by :func:`rlvr.reward_models.train.train_reward_model`.
        normalize: ``none``, ``center`` or ``standard`` (see :func:`normalize_rewards`).
        batch_size: sequences per forward.
        device: where the reward model runs (loaded once per process and device).
    """
    model = cached_reward_model(path, device)
    with _FORWARD_LOCK:
        rewards = model.score([problem.prompt] * len(completions), completions, batch_size)
    return normalize_rewards(rewards, model.stats, normalize).tolist()
