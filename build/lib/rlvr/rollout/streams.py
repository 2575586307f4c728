"""Counter-based random streams: one per sample, named by what the sample is, not by where or
in which batch it is drawn.

A sample's stream is a 64-bit key derived from (seed, step, draw, prompt index, sample index)
(:func:`sample_keys`); the uniform that picks its token at position t is a hash of (key, t)
(:func:`uniforms`), inverted through the CDF by :func:`rlvr.rollout.sampling.sample_next`. No
random state depends on how samples are batched, compacted or split across rollout workers,
so a run samples the same tokens with 1, 2 or 4 workers as in one process (the idea of
counter-based generators, Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3";
the mixing function is SplitMix64, Steele et al. 2014). The vLLM engine seeds each request
with its sample's key instead.

Keys are int64 tensors (two's-complement views of the unsigned 64-bit values); all arithmetic
wraps modulo 2**64, in Python and in torch alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def _signed(x: int) -> int:
    """The int64 with the bits of the unsigned 64-bit ``x``."""
    return x - (1 << 64) if x >> 63 else x


def _mix(x: int) -> int:
    """SplitMix64's finaliser on a Python int (unsigned 64-bit)."""
    x = (x ^ (x >> 30)) * _M1 & _MASK
    x = (x ^ (x >> 27)) * _M2 & _MASK
    return x ^ (x >> 31)


def stream_key(*parts: int) -> int:
    """A 64-bit key (as a signed int64 value) naming the stream of ``parts``, e.g.
    ``stream_key(seed, step, draw)``; different tuples give unrelated keys."""
    h = 0
    for part in parts:
        h = _mix((h + _GOLDEN + (int(part) & _MASK)) & _MASK)
    return _signed(h)


def _lshr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 ``x`` (torch's ``>>`` is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mix_tensor(x: torch.Tensor) -> torch.Tensor:
    """:func:`_mix` element-wise on int64 tensors (multiplication wraps modulo 2**64)."""
    x = (x ^ _lshr(x, 30)) * _signed(_M1)
    x = (x ^ _lshr(x, 27)) * _signed(_M2)
    return x ^ _lshr(x, 31)


def derive(keys: torch.Tensor, values: torch.Tensor | int) -> torch.Tensor:
    """Keys [B] of the sub-streams ``values`` (an int or [B]) of the streams ``keys`` [B]:
    ``derive(tensor([stream_key(*p)]), v) == tensor([stream_key(*p, v)])``."""
    return _mix_tensor(keys + _signed(_GOLDEN) + values)


def sample_keys(
    base: int, prompts: Sequence[int] | torch.Tensor, samples: Sequence[int] | torch.Tensor
) -> torch.Tensor:
    """[N] int64 keys of samples ``samples[i]`` of prompts ``prompts[i]`` in the stream ``base``
    (a :func:`stream_key`), i.e. ``stream_key(*base_parts, prompt, sample)``."""
    prompts = torch.as_tensor(prompts, dtype=torch.long)
    samples = torch.as_tensor(samples, dtype=torch.long)
    keys = torch.full(prompts.shape, base, dtype=torch.long)
    return derive(derive(keys, prompts), samples)


def group_keys(base: int, n_prompts: int, n: int, first_prompt: int = 0) -> torch.Tensor:
    """[n_prompts * n] keys of ``n`` samples of each of prompts ``first_prompt ..``, in the
    engines' order (sample i belongs to prompt i // n)."""
    prompts = torch.arange(first_prompt, first_prompt + n_prompts).repeat_interleave(n)
    return sample_keys(base, prompts, torch.arange(n).repeat(n_prompts))


def uniforms(keys: torch.Tensor, position: int) -> torch.Tensor:
    """[B, 1] float64 uniforms in [0, 1) of token ``position`` of the streams ``keys`` [B]: the
    top 53 bits of the position's key."""
    return (_lshr(derive(keys, position), 11).double() * 2.0**-53)[:, None]


def random_keys(n: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """[n] keys drawn from ``generator`` (torch's global one by default), for callers that do
    not name their streams (one-off generation, tests)."""
    return torch.randint(-(2**63), 2**63 - 1, (n,), generator=generator, dtype=torch.long)
