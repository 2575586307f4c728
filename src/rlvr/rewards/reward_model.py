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
    shaping: str = "none",
) -> list[float]:
    """Scores ``[G]`` of a prompt's completions by the reward model saved at ``path``
    (``rlvr rm train``), read on ``problem.prompt`` with the system prompt it was trained with.

    Args:
        path: directory written by :func:`rlvr.reward_models.train.train_reward_model`.
        normalize: ``none``, ``center`` or ``standard`` (see :func:`normalize_rewards`).
        shaping: ``none``, or ``par``: the rewards shaped by PAR against the problem's reference
            responses (:func:`preference_as_reward`; ``normalize`` then does not apply).
        batch_size: sequences per forward.
        device: where the reward model runs (loaded once per process and device).
    """
    model = cached_reward_model(path, device)
    with _FORWARD_LOCK:
        rewards = model.score([problem.prompt] * len(completions), completions, batch_size)
    if shaping == "par":
        return preference_as_reward(rewards, _reference_scores(model, problem, batch_size)).tolist()
    if shaping != "none":
        raise ValueError(f"reward_model: shaping must be none or par, got {shaping!r}")
    return normalize_rewards(rewards, model.stats, normalize).tolist()


def _reference_scores(model: RewardModel, problem: Problem, batch_size: int) -> torch.Tensor:
    """[M] the reward model's scores of the problem's reference responses (its demonstrations
    with a positive reward); ValueError when it has none."""
    refs = [d.text for d in problem.demonstrations if d.reward > 0 and d.text]
    if not refs:
        raise ValueError(
            f"reward_model shaping par: problem {problem.id} has no reference response (a "
            "demonstration: task.completion_column, or a task with worked solutions)"
        )
    with _FORWARD_LOCK:
        return model.score([problem.prompt] * len(refs), refs, batch_size)


def preference_as_reward(rewards: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """PAR (Fu et al. 2025, "Reward Shaping to Mitigate Reward Hacking in RLHF",
    arXiv:2502.18770, eq. 3): ``r_PAR(x, y) = 1/M sum_m sigmoid(r(x, y) - r(x, y_ref_m))`` [G]
    from the rewards [G] and the M reference responses' [M]: bounded in (0, 1), centred at the
    references (0.5), and flat where a reward far above them would be hacked."""
    return torch.sigmoid(rewards[:, None] - reference[None, :]).mean(-1)


ENSEMBLE_REDUCTIONS = ("mean", "wco", "uwo")


def ensemble_reduce(scores: torch.Tensor, reduce: str, coef: float = 1.0) -> torch.Tensor:
    """Coste et al. 2023 ("Reward Model Ensembles Help Mitigate Overoptimization",
    arXiv:2310.02743, Sec. 3): the rewards [K, G] of K reward models reduced to [G]: ``mean``;
    ``wco``, worst-case optimisation, their minimum; ``uwo``, uncertainty-weighted optimisation,
    ``mean - coef * var`` (the members' variance, population)."""
    if reduce == "mean":
        return scores.mean(0)
    if reduce == "wco":
        return scores.min(0).values
    if reduce == "uwo":
        return scores.mean(0) - coef * scores.var(0, unbiased=False)
    raise ValueError(f"reward_model_ensemble: reduce must be one of {ENSEMBLE_REDUCTIONS}")


@register_reward("reward_model_ensemble", kind="group")
def reward_model_ensemble(
    completions: list[str],
    problem: Problem,
    paths: list[str],
    reduce: str = "mean",
    coef: float = 1.0,
    normalize: Normalize = "standard",
    batch_size: int = 16,
    device: str = "cpu",
) -> list[float]:
    """An ensemble of reward models (``rlvr rm train`` directories ``paths``, each normalised by
    its own training statistics, ``normalize``) reduced by ``reduce`` (:func:`ensemble_reduce`:
    mean, wco or uwo with ``coef``), against over-optimising any one of them."""
    if len(paths) < 2:
        raise ValueError("reward_model_ensemble: give two or more reward models in paths")
    rows = []
    for path in paths:
        model = cached_reward_model(path, device)
        with _FORWARD_LOCK:
            raw = model.score([problem.prompt] * len(completions), completions, batch_size)
        rows.append(normalize_rewards(raw, model.stats, normalize))
    return ensemble_reduce(torch.stack(rows), reduce, coef).tolist()
