"""The publish check: after each publication, is every engine sampling from the trained policy?

The peers' most common LoRA failure is silent: rollouts keep sampling from the base model
because the adapter never reached the inference engine (verl #3821, #7495, #3516; OpenRLHF's
vLLM path has no LoRA, #1081), and training goes on, on base-model samples. Full weights can go
astray the same way (a publish skipped, a worker that missed a broadcast).

After every publish (``rollout.publish_check``) each engine (every Ray rollout worker's) samples
a short completion of a fixed probe prompt from a fixed stream, and the learner scores the same
tokens. Their mean absolute log-prob difference per token must be within the tolerance
(``rollout.publish_check_tolerance``). An engine over it is probed again on
``PROBE_STREAMS - 1`` more streams, and the mean over all its probe tokens decides: rounding
makes sporadic spikes on a few low-probability tokens of one short completion (up to 0.19 per
token over 2 tokens, bf16 on an AMD EPYC CPU, in runs whose engine was in sync), an engine that
serves another model differs on every stream. Over the tolerance still, the run stops with a
:class:`PublishMismatch` naming the engine. It costs one short generation per engine and one
forward of the learner per step (more only after a spike); the first stream's difference is
logged as ``rollout/publish_check_diff``.

The default tolerance is calibrated on the run itself: before the first update, engine and
learner hold the same weights, so the difference they show on the probe then is rounding alone
(:func:`rounding_floor`, over all ``PROBE_STREAMS`` streams). The tolerance is the larger of a
fixed floor (1e-3 where both compute in fp32, 0.25 where either runs in bf16/fp16: as much as
rounding may show on equal weights, ``MAX_ROUNDING``) and twice that measured rounding. Rounding depends on the kernels: SmolLM2-135M on an H100 (bf16 engine,
bf16-autocast learner) differed by 0.051 per token after the first publish and fell below 1e-3
as the policy sharpened; on an AMD EPYC CPU with bf16 on both sides, single probes of in-sync
runs reached 0.083 per token over 8-16 tokens (the floor was 0.05 until they stopped six runs);
on an Intel Xeon with AMX (bf16 engine, fp32 learner) an in-sync run's mean over all four
streams (64 tokens) reached 0.081 at policy version 9, 2.9x its 0.028 measured on equal weights
(the floor was 0.08 until it stopped that run: repro/expert_traces, luffy seed 3), and SFT runs
on SmolLM2's worked solutions there (bf16 engine, fp32 learner, 0.02-0.03 on equal weights)
reached 0.088-0.169 per token at versions 1-4, then fell to 0.002-0.005 once the policy was
confident: with an fp32 engine the same runs differed by at most 8e-6, so the engine was in
sync and bf16 rounding, which grows while the policy's distribution moves, made the rest. A
bf16 engine's check therefore catches only a gross mismatch (an engine serving another model
drifts further every update); the fp32 check, 1e-3, catches a single stale publish.
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
PROBE_STREAMS = 4
"""Streams of the probe: the first after every publish, all of them to measure the rounding and
to confirm a difference over the tolerance."""
FP32_TOLERANCE = 1e-3
LOW_PRECISION_TOLERANCE = 0.25
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
    and the keys [S] of the streams it is sampled from (the first after every publish)."""

    prompt: list[int]
    sampling: SamplingParams
    keys: torch.Tensor


def make_probe(prompt: list[int], sampling: SamplingParams, seed: int) -> Probe:
    """The probe of a run: ``prompt`` (its first problem's) sampled with the run's settings
    from ``PROBE_STREAMS`` streams of its own (seed, -1)."""
    short = dataclasses.replace(sampling, max_new_tokens=PROBE_TOKENS, stop=())
    return Probe(list(prompt), short, group_keys(stream_key(seed, -1), 1, PROBE_STREAMS))


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
    rollouts: Any, learners: Any, probe: Probe, streams: slice
) -> tuple[list[tuple[str, torch.dtype, torch.Tensor]], torch.dtype]:
    """Each engine's name, dtype and the |log-prob difference| [N] from the learner's of each of
    the N tokens it sampled on the probe's ``streams`` (a slice of ``probe.keys``, sampled in
    one call: one batch per engine; engines that sampled nothing left out), and the learner's
    dtype."""
    probes: list[EngineProbe] = rollouts.probe(probe.prompt, probe.sampling, probe.keys[streams])
    scored, learner_dtype = learners.score(probe.prompt, [p.ids for p in probes])
    pooled: dict[str, tuple[torch.dtype, list[torch.Tensor]]] = {}
    for engine, learner_logp in zip(probes, scored, strict=True):
        diff = (torch.tensor(engine.logprobs) - torch.tensor(learner_logp)).abs()
        pooled.setdefault(engine.engine, (engine.dtype, []))[1].append(diff.reshape(-1))
    out = [(name, dtype, torch.cat(diffs)) for name, (dtype, diffs) in pooled.items()]
    return [entry for entry in out if entry[2].numel()], learner_dtype


def rounding_floor(rollouts: Any, learners: Any, probe: Probe) -> float:
    """The largest probe difference (the mean over the tokens of all the probe's streams) while
    engines and learner hold the same weights (call it before the first update): what rounding
    alone makes them differ by. Raises :class:`PublishMismatch` where it exceeds
    ``MAX_ROUNDING`` or is not finite: that engine does not serve the model being trained from
    the start."""
    worst = 0.0
    for engine, _, diffs in _differences(rollouts, learners, probe, slice(None))[0]:
        diff = diffs.mean().item()
        if not diff <= MAX_ROUNDING:  # NaN too
            raise PublishMismatch(
                f"before training, on the same weights, the {engine}'s log-probs of the probe "
                f"completions differ from the learner's by {diff:.3g} per token (mean over "
                f"{diffs.numel()} tokens; rounding alone stays under {MAX_ROUNDING:g}): the "
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
    """Probe every engine of ``rollouts`` on the probe's first stream and score their tokens
    with ``learners`` (see the module docstring); an engine over the tolerance (``rounding``:
    :func:`rounding_floor` of the run) is probed on the other streams too, and
    :class:`PublishMismatch` names the first engine whose mean over all its tokens is over it.
    Returns ``rollout/publish_check_diff``: the largest first-stream mean difference."""
    worst = 0.0
    differences, learner_dtype = _differences(rollouts, learners, probe, slice(0, 1))
    for engine, dtype, diffs in differences:
        diff = diffs.mean().item()
        worst = max(worst, diff)
        limit = tolerance(setting, dtype, learner_dtype, rounding)
        if diff == diff and diff > limit and len(probe.keys) > 1:  # rounding's spike, or off?
            again = _differences(rollouts, learners, probe, slice(1, None))[0]
            diffs = torch.cat([diffs, *(d for name, _, d in again if name == engine)])
            diff = diffs.mean().item()
        if not diff <= limit:  # NaN too
            raise PublishMismatch(
                f"after publishing policy version {version}, the {engine}'s log-probs of its "
                f"probe completions differ from the learner's by {diff:.3g} per token (mean "
                f"over {diffs.numel()} tokens; tolerance {limit:g}, {str(dtype)[6:]} "
                f"engine, {str(learner_dtype)[6:]} learner; {rounding:.3g} on the same weights "
                "before training): the engine is not sampling from the policy being trained "
                "(for a LoRA run: the adapter did not reach it). The run stops rather than "
                "train on its samples. Set rollout.publish_check: false to train anyway, or "
                "rollout.publish_check_tolerance for engines that round differently."
            )
    return {"rollout/publish_check_diff": worst}
