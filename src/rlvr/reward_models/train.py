"""Training a Bradley-Terry reward model on preference pairs (``rlvr rm train``), and its
pairwise evaluation (``rlvr rm eval``).

The model (:mod:`rlvr.reward_models.model`) is trained on pairs ``(x, y_chosen, y_rejected)``
with the Bradley-Terry model of pairwise preferences (Bradley & Terry 1952, "Rank Analysis of
Incomplete Block Designs"), as in InstructGPT (Ouyang et al. 2022, "Training language models to
follow instructions with human feedback", eq. 1): ``P(y_c > y_r | x) = sigmoid(r(x, y_c) -
r(x, y_r))``, maximised by likelihood. :func:`train_reward_model` saves the trained model as a
directory that the ``reward_model`` reward (:mod:`rlvr.rewards.reward_model`) scores with.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr.reward_models.model import (
    DTYPES,
    Precision,
    RewardModel,
    new_reward_model,
    precision_autocast,
    right_pad,
)


def bradley_terry_loss(
    chosen: torch.Tensor, rejected: torch.Tensor, center_coef: float = 0.0
) -> torch.Tensor:
    """Negative log-likelihood of the preferences under the Bradley-Terry model.

    ``loss = mean_i -log sigmoid(r_c,i - r_r,i) + center_coef * mean_i (r_c,i^2 + r_r,i^2) / 2``
    (Bradley & Terry 1952; Ouyang et al. 2022, InstructGPT eq. 1). The optional second term keeps
    rewards near 0, which the likelihood alone leaves free (it sees only differences).

    Args:
        chosen: ``[P]`` rewards of the preferred responses.
        rejected: ``[P]`` rewards of the rejected responses (same prompts, same order).
        center_coef: weight of the reward-centering term (0 disables it).

    Returns:
        A scalar tensor (float32).
    """
    if chosen.shape != rejected.shape or chosen.dim() != 1:
        raise ValueError(
            f"chosen and rejected must both have shape [P], got {tuple(chosen.shape)} and "
            f"{tuple(rejected.shape)}"
        )
    chosen, rejected = chosen.float(), rejected.float()
    loss = -torch.nn.functional.logsigmoid(chosen - rejected).mean()
    if center_coef:
        loss = loss + center_coef * 0.5 * (chosen.square() + rejected.square()).mean()
    return loss


def pairwise_metrics(chosen: torch.Tensor, rejected: torch.Tensor) -> dict[str, float]:
    """``accuracy``: fraction of pairs with ``r_c > r_r`` (ties count as wrong); ``margin``: mean
    ``r_c - r_r``. Inputs are ``[P]`` rewards."""
    diff = chosen.float() - rejected.float()
    return {"accuracy": (diff > 0).float().mean().item(), "margin": diff.mean().item()}


def split_indices(n: int, eval_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Deterministic (train, held-out) row indices, each sorted: the first
    ``round(n * eval_fraction)`` rows (at least 1 when the fraction is positive) of the
    permutation ``numpy.random.default_rng(seed)``; at least one row stays for training."""
    if not 0.0 <= eval_fraction < 1.0:
        raise ValueError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
    n_eval = min(n - 1, max(1, round(n * eval_fraction))) if eval_fraction > 0 else 0
    order = np.random.default_rng(seed).permutation(n).tolist()
    return sorted(order[n_eval:]), sorted(order[:n_eval])


# ------------------------------------------------------------------ data


@dataclass(frozen=True)
class PreferencePair:
    """One preference: the user message ``prompt``, a preferred and a rejected response."""

    prompt: str
    chosen: str
    rejected: str


def load_pairs(
    path: str | os.PathLike,
    prompt_column: str = "prompt",
    chosen_column: str = "chosen",
    rejected_column: str = "rejected",
) -> list[PreferencePair]:
    """Preference pairs from a local .jsonl / .json / .parquet / .csv file.

    Raises ValueError naming the file, and the row and column of a value that is missing, not
    text, or empty (whitespace only). Texts are kept as written (not stripped).
    """
    from rlvr.data.tables import read_columns

    columns = [prompt_column, chosen_column, rejected_column]
    rows = read_columns(str(path), columns)
    texts: dict[str, list[str]] = {}
    for column in columns:
        for row, value in enumerate(rows[column]):
            if not isinstance(value, str):
                raise ValueError(
                    f"{path}: row {row}, column {column!r}: expected text, got "
                    f"{type(value).__name__} {value!r}"
                )
            if not value.strip():
                raise ValueError(f"{path}: row {row}, column {column!r} is empty")
        texts[column] = rows[column]
    return [
        PreferencePair(p, c, r)
        for p, c, r in zip(*(texts[column] for column in columns), strict=True)
    ]


@dataclass(frozen=True)
class RewardModelConfig:
    """Settings of :func:`train_reward_model`.

    Args:
        data: preference file (.jsonl/.json/.parquet/.csv) with prompt/chosen/rejected columns.
        model: backbone spec (alias, HF directory, .gguf file, hub id).
        out: output directory.
        epochs: passes over the training pairs.
        lr: AdamW learning rate (backbone and head).
        weight_decay: AdamW weight decay.
        batch_size: pairs per optimiser step (2x sequences per forward).
        max_length: longest sequence in tokens (EOS included); longer ones are truncated and
            counted.
        eval_fraction: held-out share of the pairs (seeded split).
        seed: seed of the split, the head's init and the shuffling.
        dtype: ``fp32``, or ``bf16`` autocast (fp32 master weights).
        center_coef: weight of the reward-centering term of :func:`bradley_terry_loss`.
        max_grad_norm: gradient clipping norm.
        system_prompt: system message of the chat template, used again when scoring.
        eval_batch_size: sequences per scoring micro-batch.
        threads: torch intra-op threads for the process (None: leave torch's setting).
        prompt_column, chosen_column, rejected_column: column names in ``data``.
    """

    data: str
    model: str
    out: str
    epochs: int = 1
    lr: float = 1e-5
    weight_decay: float = 0.0
    batch_size: int = 8
    max_length: int = 1024
    eval_fraction: float = 0.1
    seed: int = 0
    dtype: Precision = "fp32"
    center_coef: float = 0.0
    max_grad_norm: float = 1.0
    system_prompt: str | None = None
    eval_batch_size: int = 16
    threads: int | None = None
    prompt_column: str = "prompt"
    chosen_column: str = "chosen"
    rejected_column: str = "rejected"

    def __post_init__(self) -> None:
        checks = [
            ("epochs", self.epochs >= 1, "at least 1"),
            ("lr", self.lr > 0, "positive"),
            ("weight_decay", self.weight_decay >= 0, "non-negative"),
            ("batch_size", self.batch_size >= 1, "at least 1"),
            ("max_length", self.max_length >= 2, "at least 2"),
            ("eval_fraction", 0.0 <= self.eval_fraction < 1.0, "in [0, 1)"),
            ("dtype", self.dtype in DTYPES, f"one of {sorted(DTYPES)}"),
            ("center_coef", self.center_coef >= 0, "non-negative"),
            ("max_grad_norm", self.max_grad_norm > 0, "positive"),
            ("eval_batch_size", self.eval_batch_size >= 1, "at least 1"),
            ("threads", self.threads is None or self.threads >= 1, "at least 1 or None"),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"{name} must be {expected}, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class RewardModelReport:
    """What :func:`train_reward_model` did: held-out metrics (``accuracy``, ``margin``) before
    and after training (empty without a held-out split), final training metrics, counts and
    where the model was saved."""

    out: Path
    before: dict[str, float]
    after: dict[str, float]
    train: dict[str, float]
    n_train: int
    n_eval: int
    truncated: int
    steps: int
    wall_seconds: float


def _encode_pairs(
    model: RewardModel, pairs: Sequence[PreferencePair]
) -> tuple[list[tuple[list[int], list[int]]], int]:
    """Encoded (chosen, rejected) sequences of each pair and how many sequences were
    truncated."""
    encoded, truncated = [], 0
    for pair in pairs:
        chosen, cut_c = model.encode(pair.prompt, pair.chosen)
        rejected, cut_r = model.encode(pair.prompt, pair.rejected)
        encoded.append((chosen, rejected))
        truncated += cut_c + cut_r
    return encoded, truncated


def _score_pairs(
    model: RewardModel,
    encoded: Sequence[tuple[list[int], list[int]]],
    batch_size: int,
    dtype: Precision,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(r_chosen [P], r_rejected [P])`` of encoded pairs."""
    flat = [seq for pair in encoded for seq in pair]
    rewards = model.score_ids(flat, batch_size, dtype)
    return rewards[0::2], rewards[1::2]


def evaluate_pairs(
    model: RewardModel,
    pairs: Sequence[PreferencePair],
    batch_size: int = 16,
    dtype: Precision = "fp32",
) -> dict[str, float]:
    """Pairwise ``accuracy`` and mean ``margin`` of ``model`` on ``pairs`` (see
    :func:`pairwise_metrics`)."""
    if not pairs:
        raise ValueError("no preference pairs to evaluate")
    encoded, _ = _encode_pairs(model, pairs)
    return pairwise_metrics(*_score_pairs(model, encoded, batch_size, dtype))


def train_reward_model(
    config: RewardModelConfig, progress: bool = True, console: Any = None
) -> RewardModelReport:
    """Fit a Bradley-Terry reward model on a preference file and save it to ``config.out``.

    AdamW on backbone and head, ``config.epochs`` passes over a seeded shuffle of the training
    pairs, each step one batch of ``batch_size`` pairs (chosen and rejected sequences in one
    forward). Held-out pairwise accuracy and margin are measured before and after training; the
    saved reward statistics (``normalize`` in the ``reward_model`` reward) are the mean and
    standard deviation of the final rewards of the held-out responses (the training responses
    when there is no held-out split).
    """
    from rich import get_console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    start = time.monotonic()
    console = console or get_console()
    plain = progress and not console.is_terminal  # a log file: a line every tenth of the steps
    pairs = load_pairs(
        config.data, config.prompt_column, config.chosen_column, config.rejected_column
    )
    if len(pairs) < 2 and config.eval_fraction > 0:
        raise ValueError(f"{config.data}: a held-out split needs at least 2 pairs")
    train_idx, eval_idx = split_indices(len(pairs), config.eval_fraction, config.seed)
    if config.threads:
        torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    model = new_reward_model(config.model, config.system_prompt, config.max_length, config.seed)
    train_set, n_cut_train = _encode_pairs(model, [pairs[i] for i in train_idx])
    eval_set, n_cut_eval = _encode_pairs(model, [pairs[i] for i in eval_idx])
    pad_id = model.tokenizer.pad_token_id

    def held_out() -> tuple[dict[str, float], torch.Tensor]:
        if not eval_set:
            return {}, torch.empty(0)
        chosen, rejected = _score_pairs(model, eval_set, config.eval_batch_size, config.dtype)
        return pairwise_metrics(chosen, rejected), torch.cat([chosen, rejected])

    before, _ = held_out()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay
    )
    shuffle = np.random.default_rng(config.seed + 1)
    steps_per_epoch = math.ceil(len(train_set) / config.batch_size)
    total = config.epochs * steps_per_epoch
    window: list[tuple[float, float, int]] = []  # (loss sum, correct, pairs) of recent steps
    display = Progress(
        TextColumn("[bold]reward model"),
        MofNCompleteColumn(),
        BarColumn(),
        TextColumn("{task.fields[stats]}"),
        TimeElapsedColumn(),
        console=console,
        disable=not progress or plain,
    )
    model.train()
    with display:
        task = display.add_task("rm", total=total, stats="")
        for _ in range(config.epochs):
            order = shuffle.permutation(len(train_set)).tolist()
            for lo in range(0, len(order), config.batch_size):
                batch = [train_set[i] for i in order[lo : lo + config.batch_size]]
                ids, mask = right_pad([seq for pair in batch for seq in pair], pad_id)
                with precision_autocast(model.device, config.dtype):
                    rewards = model(ids.to(model.device), mask.to(model.device))
                loss = bradley_terry_loss(rewards[0::2], rewards[1::2], config.center_coef)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                optimizer.step()
                correct = (rewards[0::2] > rewards[1::2]).sum().item()
                window = [*window[-19:], (loss.item() * len(batch), correct, len(batch))]
                seen = sum(n for _, _, n in window)
                stats = {
                    "loss": sum(s for s, _, _ in window) / seen,
                    "accuracy": sum(c for _, c, _ in window) / seen,
                }
                text = f"loss {stats['loss']:.4f} · acc {stats['accuracy']:.2f}"
                display.update(task, advance=1, stats=text)
                done = display.tasks[0].completed
                if plain and (done % max(1, total // 10) == 0 or done == total):
                    elapsed = time.monotonic() - start
                    line = f"reward model {int(done)}/{total} steps · {text} · {elapsed:.0f} s"
                    console.print(line, markup=False, highlight=False)
    after, eval_rewards = held_out()
    if eval_rewards.numel() == 0:
        chosen, rejected = _score_pairs(model, train_set, config.eval_batch_size, config.dtype)
        eval_rewards = torch.cat([chosen, rejected])
    model.stats = {
        "mean": eval_rewards.mean().item(),
        "std": eval_rewards.std(unbiased=eval_rewards.numel() > 1).item(),
    }
    model.eval()
    report = RewardModelReport(
        out=Path(config.out),
        before=before,
        after=after,
        train=stats,
        n_train=len(train_set),
        n_eval=len(eval_set),
        truncated=n_cut_train + n_cut_eval,
        steps=total,
        wall_seconds=time.monotonic() - start,
    )
    meta = {
        "backbone": config.model,
        "config": dataclasses.asdict(config),
        "metrics": {
            "before": before,
            "after": after,
            "train": stats,
            "n_train": report.n_train,
            "n_eval": report.n_eval,
            "truncated": report.truncated,
            "steps": total,
            "wall_seconds": report.wall_seconds,
        },
    }
    model.save(config.out, meta)
    return report
