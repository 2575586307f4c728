"""A Bradley-Terry reward model: a causal LM backbone with a scalar head, and its directory.

A reward model is a causal LM backbone (any spec :func:`rlvr.models.load_model` accepts) with a
scalar linear head on the final hidden state of the last real token of
``chat_template(prompt) + response + EOS``: the prompt side is :func:`rlvr.models.encode_prompt`
(the same text the policy is sampled from), so the model scores completions exactly as the
policy writes them.

A saved model is a directory: the backbone (``save_pretrained``, safetensors) and its
tokenizer, ``value_head.safetensors`` and ``reward_model.json`` (backbone spec, system prompt,
max length, reward statistics, metrics and training config). :mod:`rlvr.reward_models.train`
writes one; :func:`load_reward_model` reads it back (the ``reward_model`` reward,
:mod:`rlvr.rewards.reward_model`, scores with it).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.models import encode_prompt, load_model, load_tokenizer

METADATA_FILE = "reward_model.json"
HEAD_FILE = "value_head.safetensors"
FORMAT_VERSION = 1

Precision = Literal["fp32", "bf16"]
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}


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
                with precision_autocast(self.device, dtype):
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


def precision_autocast(device: torch.device, dtype: Precision) -> torch.autocast:
    """Autocast to bf16 on ``device`` for ``dtype="bf16"``, a disabled autocast for ``fp32``."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
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
