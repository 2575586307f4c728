"""The rollout engine protocol: prompts in, G sampled completions per prompt out.

Any engine (the built-in torch engine, later vLLM or SGLang) returns a :class:`Rollout`, whose
sample ``i`` belongs to prompt ``i // n`` (its group id): samples of one group are contiguous.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from rlvr.rollout.streams import random_keys


@dataclass(frozen=True)
class AdaptiveTemperature:
    """HAPO's Adaptive Temperature Sampling (Liu et al. 2025, "From Uniform to Heterogeneous:
    Tailoring Policy Optimization to Every Token's Nature", arXiv:2509.16591; the authors'
    patched vLLM sampler, ``vllm/v1/sample/sampler.py``): each token is drawn at

        T_t = T (1 + tau h_t),   h_t = (x_t - m) / top  where x_t > m,  (x_t - m) / |bottom| else,

    clamped to [-1, 1], x_t = log max(H_t, 1e-8) the log-entropy of the token's distribution at
    temperature 1, and ``pivot`` m, ``top`` = max (x - m) and ``bottom`` = min (x - m) the
    statistics of the previous step's completion tokens (:func:`rlvr.rollout.sampling.
    entropy_statistics`): a token whose distribution is flatter than most is sampled hotter,
    a confident one cooler, as the paper describes it. The authors' tau is 0.05 (T_t within
    T [0.95, 1.05]). Their code divides the negative side by min (x - m) itself, a negative
    number, so there every token below the pivot is sampled hotter too (the sign HAPO's loss
    has with ``as_released``); here it is the paper's asymmetric rule."""

    tau: float
    pivot: float
    top: float
    bottom: float


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature == 0`` means greedy decoding.

    Filters act on the temperature-scaled distribution p (as in transformers' ``generate``):
    ``top_k`` keeps the k most likely tokens, ``top_p`` the nucleus (Holtzman et al. 2020),
    ``min_p`` the tokens with p >= min_p * max p (Nguyen et al. 2024, "Turning Up the Heat: Min-p
    Sampling for Creative and Coherent LLM Outputs"); ``top_k == 0``, ``top_p == 1`` and
    ``min_p == 0`` disable them.

    Generation of a sample stops at any of ``stop_token_ids`` (the tokenizer's EOS is added by the
    trainer), or once its decoded text contains any of the ``stop`` strings (the engine needs a
    ``decode`` function then), or after ``max_new_tokens``. A stop string ends the completion at
    the token that completes it: that token is kept whole, so the decoded text may run past the
    stop string by the rest of that token (a single string given as ``stop`` is one stop string;
    lists are stored as tuples). ``token_stats`` records, per sampled position, the
    entropy and the self-certainty of the model's distribution (see
    :func:`rlvr.rollout.sampling.token_stats`).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    max_new_tokens: int = 128
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    token_stats: bool = False  # also record per-token entropy and self-certainty
    adaptive: AdaptiveTemperature | None = None  # HAPO's per-token temperature (None: off)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        stop = (
            (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        )  # one string: one stop
        object.__setattr__(self, "stop", stop)
        checks = {
            "temperature": (self.temperature >= 0, ">= 0"),
            "top_p": (0 < self.top_p <= 1, "in (0, 1]"),
            "top_k": (self.top_k >= 0, ">= 0"),
            "min_p": (0 <= self.min_p <= 1, "in [0, 1]"),
            "max_new_tokens": (self.max_new_tokens >= 1, ">= 1"),
            "stop": (all(isinstance(s, str) and s for s in self.stop), "non-empty strings"),
        }
        for name, (ok, expected) in checks.items():
            if not ok:
                raise ValueError(
                    f"SamplingParams.{name} = {getattr(self, name)!r}: expected {expected}"
                )


@dataclass
class Rollout:
    """Completions of ``n`` samples for each of ``P`` prompts (``N = P * n`` samples).

    Attributes:
        prompt_ids: P lists of prompt token ids (unpadded).
        completion_ids: N lists of sampled token ids, including the stop token if one was hit.
        logprobs: N lists, the sampler's log-prob of each sampled token (temperature-scaled
            distribution, before top-k/top-p truncation).
        finished: N flags, True if the sample ended with a stop token or a stop string (False:
            truncated at ``max_new_tokens``).
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


def throughput(completions: list[list[int]], seconds: float) -> dict[str, float]:
    """A rollout's ``stats``: its seconds and sampled tokens per second."""
    tokens = sum(len(c) for c in completions)
    return {"rollout/seconds": seconds, "rollout/tokens_per_s": tokens / max(seconds, 1e-9)}


def checked_keys(keys: torch.Tensor | None, total: int, sampling: SamplingParams) -> torch.Tensor:
    """The [total] int64 stream keys of a ``generate`` call: ``keys`` checked, or drawn from
    torch's global generator when None (zeros when greedy: no randomness is used)."""
    if keys is None:
        if sampling.temperature <= 0:
            return torch.zeros(total, dtype=torch.long)
        return random_keys(total)
    keys = torch.as_tensor(keys, dtype=torch.long).cpu()
    if keys.shape != (total,):
        raise ValueError(
            f"generate: keys must have shape ({total},) (P * n), got {tuple(keys.shape)}"
        )
    return keys


class RolloutEngine(Protocol):
    """What the trainer needs from a generation backend."""

    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor | None = None,
    ) -> Rollout:
        """Sample ``n`` completions for each prompt (token ids, unpadded); sample i draws from
        the random stream ``keys[i]`` ([P * n] int64, :mod:`rlvr.rollout.streams`; None: keys
        drawn from torch's global generator; unused when greedy)."""

    def update_weights(self, policy: torch.nn.Module) -> None:
        """Copy the policy's current weights into the engine, in memory."""
