"""Bradley-Terry reward models: train one on preference pairs, and use it as a reward.

A reward model is a causal LM backbone (any spec :func:`rlvr.models.load_model` accepts) with a
scalar linear head on the final hidden state of the last real token of
``chat_template(prompt) + response + EOS``: the prompt side is :func:`rlvr.models.encode_prompt`
(the same text the policy is sampled from), so the model scores completions exactly as the
policy writes them.

It is trained on pairs ``(x, y_chosen, y_rejected)`` with the Bradley-Terry model of pairwise
preferences (Bradley & Terry 1952, "Rank Analysis of Incomplete Block Designs"), as in
InstructGPT (Ouyang et al. 2022, "Training language models to follow instructions with human
feedback", eq. 1): ``P(y_c > y_r | x) = sigmoid(r(x, y_c) - r(x, y_r))``, maximised by
likelihood.

A trained model is a directory: the backbone (``save_pretrained``, safetensors) and its
tokenizer, ``value_head.safetensors`` and ``reward_model.json`` (backbone spec, system prompt,
max length, reward statistics, metrics and training config). The ``reward_model`` group reward
scores a prompt's completions with it inside ``rlvr train``::

    reward:
      terms:
        - {name: reward_model, params: {path: runs/rm, normalize: standard}}
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.data.base import Problem
from rlvr.models import encode_prompt, load_model, load_tokenizer
from rlvr.rewards.registry import register_reward

METADATA_FILE = "reward_model.json"
HEAD_FILE = "value_head.safetensors"
FORMAT_VERSION = 1

Precision = Literal["fp32", "bf16"]
Normalize = Literal["none", "center", "standard"]
_DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}


# ------------------------------------------------------------------ pure functions


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


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position of each row's last real token in ``attention_mask`` ``[B, T]`` (1 = token), for
    left or right padding: ``[B]`` long. Every row must hold at least one token."""
    if not bool(attention_mask.any(dim=-1).all()):
        raise ValueError("every row of attention_mask must hold at least one token")
    t = attention_mask.shape[-1]
    return t - 1 - attention_mask.flip(-1).long().argmax(dim=-1)


def right_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids [B, T], attention_mask [B, T])`` of token lists padded on the right."""
    t = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), t), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), t), dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(list(s), dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


def join_tokens(
    prompt_ids: Sequence[int], response_ids: Sequence[int], eos_id: int, max_length: int
) -> tuple[list[int], bool]:
    """``prompt + response + [eos]``, keeping the first ``max_length - 1`` tokens of
    ``prompt + response`` when longer; the EOS (the token the head reads) always ends the
    sequence. Returns ``(ids, truncated)``."""
    if max_length < 2:
        raise ValueError(f"max_length must be at least 2, got {max_length}")
    body = [*prompt_ids, *response_ids]
    truncated = len(body) > max_length - 1
    return body[: max_length - 1] + [eos_id], truncated


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


# ------------------------------------------------------------------ the model


class RewardModel(nn.Module):
    """A causal LM backbone and a linear head ``[H] -> []`` on the last real token's final
    hidden state.

    Args:
        backbone: a causal LM (its ``base_model`` gives the final, normalised hidden states).
        tokenizer: its tokenizer, with a chat template.
        head: ``nn.Linear(H, 1)``.
        system_prompt: system message of the chat template (None: none), as at training.
        max_length: longest scored sequence (tokens, EOS included); longer ones are truncated
            by :func:`join_tokens`.
        stats: ``{"mean": m, "std": s}`` of the rewards measured at training time
            (``normalize``), or empty.
    """

    def __init__(
        self,
        backbone: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        head: nn.Linear,
        system_prompt: str | None = None,
        max_length: int = 1024,
        stats: dict[str, float] | None = None,
    ) -> None:
        super().__init__()
        if tokenizer.eos_token_id is None or tokenizer.pad_token_id is None:
            raise ValueError("the reward model's tokenizer needs an EOS and a pad token")
        self.backbone = backbone
        self.head = head
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        self.max_length = max_length
        self.stats = dict(stats or {})

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    def encode(self, prompt: str, response: str) -> tuple[list[int], bool]:
        """Token ids of ``chat_template(prompt) + response + EOS`` and whether they were
        truncated to ``max_length``."""
        prompt_ids = encode_prompt(self.tokenizer, prompt, self.system_prompt)
        response_ids = self.tokenizer(response, add_special_tokens=False)["input_ids"]
        return join_tokens(prompt_ids, response_ids, self.tokenizer.eos_token_id, self.max_length)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Rewards ``[B]`` (float32) of token rows ``[B, T]``, padded on either side: positions
        count real tokens only, so a padded row scores as it would alone."""
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        hidden = self.backbone.base_model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
        ).last_hidden_state
        last = last_token_index(attention_mask)
        picked = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        return self.head(picked.to(self.head.weight.dtype)).squeeze(-1).float()

    @torch.no_grad()
    def score_ids(
        self,
        sequences: Sequence[Sequence[int]],
        batch_size: int = 16,
        dtype: Precision = "fp32",
    ) -> torch.Tensor:
        """Rewards ``[N]`` of encoded sequences, in micro-batches of similar length (fewer pads);
        the order of ``sequences`` is kept."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        was_training = self.training
        self.eval()
        out = torch.empty(len(sequences), dtype=torch.float32)
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
        try:
            for lo in range(0, len(order), batch_size):
                rows = order[lo : lo + batch_size]
                ids, mask = right_pad([sequences[i] for i in rows], self.tokenizer.pad_token_id)
                with _autocast(self.device, dtype):
                    out[rows] = self(ids.to(self.device), mask.to(self.device)).cpu()
        finally:
            self.train(was_training)
        return out

    def score(
        self,
        prompts: Sequence[str],
        responses: Sequence[str],
        batch_size: int = 16,
        dtype: Precision = "fp32",
    ) -> torch.Tensor:
        """Rewards ``[N]`` of N (user message, response) pairs (no gradient)."""
        if len(prompts) != len(responses):
            raise ValueError(f"got {len(prompts)} prompts for {len(responses)} responses")
        if not responses:
            return torch.empty(0)
        encoded = [self.encode(p, r)[0] for p, r in zip(prompts, responses, strict=True)]
        return self.score_ids(encoded, batch_size, dtype)

    def save(self, path: str | os.PathLike, metadata: dict[str, Any]) -> Path:
        """Write the model to ``path`` (a temporary directory renamed into place; an existing
        reward-model directory there is replaced, any other non-empty directory is refused).
        ``metadata`` is stored in ``reward_model.json`` with the fields :func:`load_reward_model`
        needs."""
        out = Path(path)
        if out.exists() and any(out.iterdir()) and not (out / METADATA_FILE).is_file():
            raise ValueError(f"{out} exists and is not a reward-model directory; not overwriting")
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        self.backbone.save_pretrained(tmp)
        self.tokenizer.save_pretrained(tmp)
        save_file(
            {k: v.detach().float().contiguous().cpu() for k, v in self.head.state_dict().items()},
            tmp / HEAD_FILE,
        )
        meta = {
            **metadata,
            "format": FORMAT_VERSION,
            "hidden_size": self.head.in_features,
            "system_prompt": self.system_prompt,
            "max_length": self.max_length,
            "reward_stats": self.stats,
        }
        (tmp / METADATA_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.replace(out)
        return out


def _autocast(device: torch.device, dtype: Precision) -> torch.autocast:
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16")


def new_reward_model(
    spec: str,
    system_prompt: str | None = None,
    max_length: int = 1024,
    seed: int = 0,
) -> RewardModel:
    """A reward model on the backbone ``spec`` (fp32) with a fresh head: weights
    ``N(0, 1/H)`` drawn from ``seed``, bias 0."""
    backbone = load_model(spec, torch.float32)
    hidden = backbone.config.hidden_size
    head = nn.Linear(hidden, 1)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        head.weight.copy_(torch.randn(1, hidden, generator=generator) / math.sqrt(hidden))
        head.bias.zero_()
    return RewardModel(backbone, load_tokenizer(spec), head, system_prompt, max_length)


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The ``reward_model.json`` of a saved reward model (ValueError if ``path`` is not one)."""
    file = Path(path) / METADATA_FILE
    if not file.is_file():
        raise ValueError(
            f"{path} is not a reward-model directory (no {METADATA_FILE}); train one with "
            "`rlvr rm train`"
        )
    meta = json.loads(file.read_text(encoding="utf-8"))
    if meta.get("format") != FORMAT_VERSION:
        raise ValueError(f"{file}: unsupported format {meta.get('format')!r}")
    return meta


def load_reward_model(path: str | os.PathLike, device: str | torch.device = "cpu") -> RewardModel:
    """Restore a reward model saved by :meth:`RewardModel.save`, in fp32 eval mode on
    ``device``."""
    meta = read_metadata(path)
    backbone = load_model(str(path), torch.float32)
    head = nn.Linear(meta["hidden_size"], 1)
    head.load_state_dict(load_file(Path(path) / HEAD_FILE))
    model = RewardModel(
        backbone,
        load_tokenizer(str(path)),
        head,
        meta["system_prompt"],
        meta["max_length"],
        meta["reward_stats"],
    )
    return model.to(device).eval()


# ------------------------------------------------------------------ training


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
            ("dtype", self.dtype in _DTYPES, f"one of {sorted(_DTYPES)}"),
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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    start = time.monotonic()
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
        disable=not progress,
    )
    model.train()
    with display:
        task = display.add_task("rm", total=total, stats="")
        for _ in range(config.epochs):
            order = shuffle.permutation(len(train_set)).tolist()
            for lo in range(0, len(order), config.batch_size):
                batch = [train_set[i] for i in order[lo : lo + config.batch_size]]
                ids, mask = right_pad([seq for pair in batch for seq in pair], pad_id)
                with _autocast(model.device, config.dtype):
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
                display.update(
                    task,
                    advance=1,
                    stats=f"loss {stats['loss']:.4f} · acc {stats['accuracy']:.2f}",
                )
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


# ------------------------------------------------------------------ as a reward

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
        path: directory written by :func:`train_reward_model`.
        normalize: ``none``, ``center`` or ``standard`` (see :func:`normalize_rewards`).
        batch_size: sequences per forward.
        device: where the reward model runs (loaded once per process and device).
    """
    model = cached_reward_model(path, device)
    with _FORWARD_LOCK:
        rewards = model.score([problem.prompt] * len(completions), completions, batch_size)
    return normalize_rewards(rewards, model.stats, normalize).tolist()
