"""The publish check: after each publication, is every engine sampling from the trained policy?

The peers' most common LoRA failure is silent: rollouts keep sampling from the base model
because the adapter never reached the inference engine (verl #3821, #7495, #3516; OpenRLHF's
vLLM path has no LoRA, #1081), and training goes on, on base-model samples. Full weights can go
astray the same way (a publish skipped, a worker that missed a broadcast).

After every publish (``rollout.publish_check``) each engine (every Ray rollout worker's) samples
a short completion of a fixed probe prompt from a fixed stream, and the learner scores the same
tokens. Their mean absolute log-prob difference per token must be within the tolerance
(``rollout.publish_check_tolerance``), else the run stops with a :class:`PublishMismatch`
naming the engine. It costs one short generation per engine and one forward of the learner per
step; the difference is logged as ``rollout/publish_check_diff``.

The default tolerance is calibrated on the run itself: before the first update, engine and
learner hold the same weights, so the difference they show on the probe then is rounding alone
(:func:`rounding_floor`). The tolerance is the larger of a fixed floor (1e-3 where both compute
in fp32, 0.05 where either runs in bf16/fp16) and twice that measured rounding. Rounding depends
on the kernels: SmolLM2-135M on an H100 (bf16 engine, bf16-autocast learner) differed by 0.051
per token after the first publish, above the 0.05 that a CPU never reached, and fell below 1e-3
as the policy sharpened.
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
ROUNDING_MARGIN = 2.0
"""The default tolerance is at least this multiple of the rounding measured before training."""
MAX_ROUNDING = 0.25
"""More than this per token on equal weights is not rounding: the engine serves another model."""


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


def tolerance(
    setting: float | None, engine: torch.dtype, learner: torch.dtype, rounding: float = 0.0
) -> float:
    """The largest accepted mean |difference| per token: ``setting``, else the dtypes' fixed
    floor or ``ROUNDING_MARGIN`` x the ``rounding`` measured on equal weights, the larger."""
    if setting is not None:
        return setting
    both_fp32 = engine == torch.float32 and learner == torch.float32
    fixed = FP32_TOLERANCE if both_fp32 else LOW_PRECISION_TOLERANCE
    return max(fixed, ROUNDING_MARGIN * rounding)


def _differences(
    rollouts: Any, learners: Any, probe: Probe
) -> tuple[list[tuple[EngineProbe, float]], torch.dtype]:
    """Each engine's probe completion with its mean |log-prob difference| per token from the
    learner's (engines that sampled nothing left out), and the learner's dtype."""
    probes: list[EngineProbe] = rollouts.probe(probe.prompt, probe.sampling, probe.keys)
    scored, learner_dtype = learners.score(probe.prompt, [p.ids for p in probes])
    out = []
    for engine, learner_logp in zip(probes, scored, strict=True):
        if engine.ids:
            diff = (torch.tensor(engine.logprobs) - torch.tensor(learner_logp)).abs().mean()
            out.append((engine, diff.item()))
    return out, learner_dtype


def rounding_floor(rollouts: Any, learners: Any, probe: Probe) -> float:
    """The largest probe difference while engines and learner hold the same weights (call it
    before the first update): what rounding alone makes them differ by. Raises
    :class:`PublishMismatch` where it exceeds ``MAX_ROUNDING`` or is not finite: that engine
    does not serve the model being trained from the start."""
    worst = 0.0
    for engine, diff in _differences(rollouts, learners, probe)[0]:
        if not diff <= MAX_ROUNDING:  # NaN too
            raise PublishMismatch(
                f"before training, on the same weights, the {engine.engine}'s log-probs of a "
                f"probe completion differ from the learner's by {diff:.3g} per token (mean over "
                f"{len(engine.ids)} tokens; rounding alone stays under {MAX_ROUNDING:g}): the "
                "engine does not serve the model being trained. Set rollout.publish_check: "
                "false to train anyway, or rollout.publish_check_tolerance to skip this "
                "calibration."
            )
        worst = max(worst, diff)
    return worst


def check_publish(
    rollouts: Any,
    learners: Any,
    probe: Probe,
    version: int,
    setting: float | None,
    rounding: float = 0.0,
) -> dict[str, float]:
    """Probe every engine of ``rollouts`` and score their tokens with ``learners`` (see the
    module docstring); raises :class:`PublishMismatch` naming the first engine off by more
    than the tolerance (``rounding``: :func:`rounding_floor` of the run). Returns
    ``rollout/publish_check_diff``: the largest mean difference."""
    worst = 0.0
    differences, learner_dtype = _differences(rollouts, learners, probe)
    for engine, diff in differences:
        limit = tolerance(setting, engine.dtype, learner_dtype, rounding)
        if not diff <= limit:  # NaN too
            raise PublishMismatch(
                f"after publishing policy version {version}, the {engine.engine}'s log-probs of "
                f"a probe completion differ from the learner's by {diff:.3g} per token (mean "
                f"over {len(engine.ids)} tokens; tolerance {limit:g}, {str(engine.dtype)[6:]} "
                f"engine, {str(learner_dtype)[6:]} learner; {rounding:.3g} on the same weights before "
                "training): the engine is not sampling from the policy being trained (for a LoRA "
                "run: the adapter did not reach it). The run stops rather than train on its "
                "samples. Set rollout.publish_check: false to train anyway, or "
                "rollout.publish_check_tolerance for engines that round differently."
            )
        worst = max(worst, diff)
    return {"rollout/publish_check_diff": worst}
