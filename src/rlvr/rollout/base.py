"""The rollout engine protocol: prompts in, G sampled completions per prompt out.

Any engine (the built-in torch engine, later vLLM or SGLang) returns a :class:`Rollout`, whose
sample ``i`` belongs to prompt ``i // n`` (its group id): samples of one group are contiguous.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature == 0`` means greedy decoding.

    ``top_k == 0`` and ``top_p == 1`` disable those filters. Generation of a sample stops at
    any of ``stop_token_ids`` (the tokenizer's EOS is added by the trainer) or after
    ``max_new_tokens``. ``token_stats`` records, per sampled position, the entropy and the
    self-certainty of the model's distribution (see :func:`rlvr.rollout.sampling.token_stats`).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 128
    stop_token_ids: tuple[int, ...] = ()
    token_stats: bool = False  # also record per-token entropy and self-certainty


@dataclass
class Rollout:
    """Completions of ``n`` samples for each of ``P`` prompts (``N = P * n`` samples).

    Attributes:
        prompt_ids: P lists of prompt token ids (unpadded).
        completion_ids: N lists of sampled token ids, including the stop token if one was hit.
        logprobs: N lists, the sampler's log-prob of each sampled token (temperature-scaled
            distribution, before top-k/top-p truncation).
        finished: N flags, True if the sample ended with a stop token (False: truncated).
        n: samples per prompt (the group size G).
        token_entropy, self_certainty: N lists of per-token values when
            ``SamplingParams.token_stats`` (else empty).
    """

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    logprobs: list[list[float]]
    finished: list[bool]
    n: int
    stats: dict[str, float] = field(default_factory=dict)
    token_entropy: list[list[float]] = field(default_factory=list)
    self_certainty: list[list[float]] = field(default_factory=list)

    @property
    def group_ids(self) -> torch.Tensor:
        """[N] long: the prompt index of every sample."""
        return torch.arange(len(self.prompt_ids)).repeat_interleave(self.n)


class RolloutEngine(Protocol):
    """What the trainer needs from a generation backend."""

    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator | None = None,
    ) -> Rollout:
        """Sample ``n`` completions for each prompt (token ids, unpadded)."""

    def update_weights(self, policy: torch.nn.Module) -> None:
        """Copy the policy's current weights into the engine, in memory."""
