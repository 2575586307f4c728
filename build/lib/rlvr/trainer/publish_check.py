"""The publish check: after each publication, is every engine sampling from the trained policy?

The peers' most common LoRA failure is silent: rollouts keep sampling from the base model
because the adapter never reached the inference engine (verl #3821, #7495, #3516; OpenRLHF's
vLLM path has no LoRA, #1081), and training goes on, on base-model samples. Full weights can go
astray the same way (a publish skipped, a worker that missed a broadcast).

After every publish (``rollout.publish_check``) each engine (every Ray rollout worker's) samples
a short completion of a fixed probe prompt from a fixed stream, and the learner scores the same
tokens. Their mean absolute log-prob difference per token must be within the tolerance
(``rollout.publish_check_tolerance``; 1e-3 where both compute in fp32, 0.05 where either runs
in bf16/fp16, whose rounding alone differs by about 1e-2), else the run stops with a
:class:`PublishMismatch` naming the engine. It costs one short generation per engine and one
forward of the learner per step; the difference is logged as ``rollout/publish_check_diff``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.errors import RlvrError
from rlvr.rollout import SamplingParams
from rlvr.rollout.streams import group_keys, stream_key

PROBE_TOKENS = 16
"""Tokens sampled on the probe prompt."""
FP32_TOLERANCE = 1e-3
LOW_PRECISION_TOLERANCE = 0.05


class PublishMismatch(RlvrError):
    """An engine's log-probs differ from the learner's after a publish: it does not serve the
    trained policy."""


@dataclass(frozen=True)
class EngineProbe:
    """One engine's completion of the probe: its name (``torch engine``, ``vLLM engine of
    rollout worker 1``), compute dtype, the sampled ids [T] and their log-probs [T]."""

    engine: str
    dtype: torch.dtype
    ids: list[int]
    logprobs: list[float]


@dataclass(frozen=True)
class Probe:
    """The fixed probe: a prompt's ids, the run's sampling settings (``PROBE_TOKENS`` tokens)
    and the one stream key [1] it is sampled from."""

    prompt: list[int]
    sampling: SamplingParams
    keys: torch.Tensor


def make_probe(prompt: list[int], sampling: SamplingParams, seed: int) -> Probe:
    """The probe of a run: ``prompt`` (its first problem's) sampled with the run's settings
    from a stream of its own (seed, -1)."""
    short = dataclasses.replace(sampling, max_new_tokens=PROBE_TOKENS, stop=())
    return Probe(list(prompt), short, group_keys(stream_key(seed, -1), 1, 1))


def tolerance(setting: float | None, engine: torch.dtype, learner: torch.dtype) -> float:
    """The largest accepted mean |difference| per token: ``setting``, else by the dtypes."""
    if setting is not None:
        return setting
    both_fp32 = engine == torch.float32 and learner == torch.float32
    return FP32_TOLERANCE if both_fp32 else LOW_PRECISION_TOLERANCE


def check_publish(
    rollouts: Any, learners: Any, probe: Probe, version: int, setting: float | None
) -> dict[str, float]:
    """Probe every engine of ``rollouts`` and score their tokens with ``learners`` (see the
    module docstring); raises :class:`PublishMismatch` naming the first engine off by more
    than the tolerance. Returns ``rollout/publish_check_diff``: the largest mean difference."""
    probes: list[EngineProbe] = rollouts.probe(probe.prompt, probe.sampling, probe.keys)
    scored, learner_dtype = learners.score(probe.prompt, [p.ids for p in probes])
    worst = 0.0
    for engine, learner_logp in zip(probes, scored, strict=True):
        if not engine.ids:
            continue
        diff = (torch.tensor(engine.logprobs) - torch.tensor(learner_logp)).abs().mean().item()
        limit = tolerance(setting, engine.dtype, learner_dtype)
        if not diff <= limit:  # NaN too
            raise PublishMismatch(
                f"after publishing policy version {version}, the {engine.engine}'s log-probs of "
                f"a probe completion differ from the learner's by {diff:.3g} per token (mean "
                f"over {len(engine.ids)} tokens; tolerance {limit:g}, {str(engine.dtype)[6:]} "
                f"engine, {str(learner_dtype)[6:]} learner): the engine is not sampling from "
                "the policy being trained (for a LoRA run: the adapter did not reach it). The "
                "run stops rather than train on its samples. Set rollout.publish_check: false "
                "to train anyway, or rollout.publish_check_tolerance for engines that round "
                "differently."
            )
        worst = max(worst, diff)
    return {"rollout/publish_check_diff": worst}
