"""The publish check's tolerance (trainer/publish_check.py): fixed floors by dtype, calibrated
on the rounding measured before training, a spike on one probe stream confirmed on the others,
and an engine that serves another model from the start stopped before the first step."""

from __future__ import annotations

import pytest
import torch

from rlvr.trainer.publish_check import (
    EngineProbe,
    Probe,
    PublishMismatch,
    check_publish,
    rounding_floor,
    tolerance,
)

PROBE = Probe(prompt=[5, 6], sampling=None, keys=torch.zeros(1, 2))  # type: ignore[arg-type]


class Rollouts:
    """One engine whose probe completion has the given log-probs (``by_stream``: other ones on
    the streams it names, keys [s, 0] = s)."""

    def __init__(
        self, logprobs: list[float], dtype: torch.dtype = torch.bfloat16, by_stream=None
    ) -> None:
        self.logprobs, self.dtype, self.by_stream = logprobs, dtype, by_stream or {}
        self.streams: list[int] = []

    def probe(self, prompt, sampling, keys) -> list[EngineProbe]:
        out = []
        for stream in keys[:, 0].tolist():  # one completion per stream
            self.streams.append(int(stream))
            logprobs = self.by_stream.get(int(stream), self.logprobs)
            out.append(
                EngineProbe("torch engine", self.dtype, list(range(len(logprobs))), logprobs)
            )
        return out


class Learners:
    """The learner's scores of the same tokens: ``logprobs``, as many as each has."""

    def __init__(self, logprobs: list[float], dtype: torch.dtype = torch.bfloat16) -> None:
        self.logprobs, self.dtype = logprobs, dtype

    def score(self, prompt, completions):
        return [self.logprobs[: len(ids)] for ids in completions], self.dtype


def test_fixed_floors_by_dtype_and_the_calibrated_margin():
    bf16, fp32 = torch.bfloat16, torch.float32
    assert tolerance(None, fp32, fp32) == 1e-3
    assert tolerance(None, bf16, fp32) == 0.25 and tolerance(None, fp32, bf16) == 0.25
    assert tolerance(None, fp32, fp32, rounding=1e-7) == 1e-3  # the floor holds
    # twice the measured rounding where that is above the floor (0.2 per token: 0.4)
    assert tolerance(None, bf16, bf16, rounding=0.2) == pytest.approx(0.4)
    assert tolerance(0.3, bf16, bf16, rounding=0.9) == 0.3  # a setting is taken as given


def test_the_rounding_floor_is_the_mean_difference_on_equal_weights():
    engine, learner = Rollouts([-1.0, -2.0, -0.5, 0.0]), Learners([-1.1, -2.0, -0.4, -0.02])
    assert rounding_floor(engine, learner, PROBE) == pytest.approx((0.1 + 0 + 0.1 + 0.02) / 4)


@pytest.mark.parametrize("off", [1.0, float("nan")])
def test_an_engine_that_serves_another_model_from_the_start_is_stopped(off):
    with pytest.raises(PublishMismatch, match="before training, on the same weights") as err:
        rounding_floor(Rollouts([-1.0, -2.0]), Learners([-1.0 - off, -2.0 - off]), PROBE)
    assert "does not serve the model being trained" in str(err.value)


def test_a_publish_is_checked_against_twice_the_measured_rounding():
    learner = Learners([-1.0, -2.0])
    rounding = 0.15  # accepted up to 0.3 per token, above the fixed 0.25
    ok = check_publish(Rollouts([-1.28, -2.28]), learner, PROBE, 3, None, rounding)
    assert ok["rollout/publish_check_diff"] == pytest.approx(0.28)
    with pytest.raises(PublishMismatch, match="policy version 3") as err:
        check_publish(Rollouts([-1.32, -2.32]), learner, PROBE, 3, None, rounding)
    assert "tolerance 0.3" in str(err.value) and "0.15 on the same weights" in str(err.value)
    # fp32 on both sides: 1e-3 unless the measured rounding says more
    fp32 = Learners([-1.0, -2.0], torch.float32)
    with pytest.raises(PublishMismatch, match="tolerance 0.001"):
        check_publish(Rollouts([-1.01, -2.01], torch.float32), fp32, PROBE, 1, None, 0.0)


def test_a_spike_on_the_first_stream_is_confirmed_on_the_others():
    probe = Probe(prompt=[5, 6], sampling=None, keys=torch.arange(4)[:, None].repeat(1, 2))  # type: ignore[arg-type]
    learner = Learners([-1.0, -2.0])
    # rounding's spike: 0.3 per token on stream 0's two tokens, 0.02 on streams 1-3: the mean
    # over all 8 tokens, (2 * 0.3 + 6 * 0.02) / 8 = 0.09, is within 0.12
    spike = Rollouts([-1.02, -2.02], by_stream={0: [-1.3, -2.3]})
    out = check_publish(spike, learner, probe, 5, None, rounding=0.06)
    assert out["rollout/publish_check_diff"] == pytest.approx(0.3)  # the first stream's
    assert spike.streams == [0, 1, 2, 3]
    # within the tolerance on the first stream: the others are not probed
    calm = Rollouts([-1.02, -2.02])
    check_publish(calm, learner, probe, 5, None, rounding=0.06)
    assert calm.streams == [0]
    # off on every stream: stopped, the message giving the mean over all 8 tokens
    stale = Rollouts([-1.3, -2.3])
    with pytest.raises(PublishMismatch, match="by 0.3 per token \\(mean over 8 tokens"):
        check_publish(stale, learner, probe, 5, None, rounding=0.06)
    # the rounding before training is measured on all four streams
    assert rounding_floor(spike, learner, probe) == pytest.approx(0.09)
