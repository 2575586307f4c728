"""HAPO's Adaptive Temperature Sampling (Liu et al. 2025, arXiv:2509.16591; the authors' patched
vLLM sampler): each token drawn at T (1 + tau h), h its distribution's log-entropy scored against
the previous step's statistics. The temperatures and the draws by hand, the statistics by hand,
a run whose steps sample at the previous step's statistics and resumes exactly, the refusals."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from test_lora import built
from test_trainer import step_rows, tiny_config

from rlvr.config import ConfigError, build_config
from rlvr.rollout import SamplingParams
from rlvr.rollout.base import AdaptiveTemperature
from rlvr.rollout.sampling import (
    _inverse_cdf_sample,
    adaptive_temperatures,
    entropy_statistics,
    sample_next,
)
from rlvr.rollout.streams import group_keys, stream_key
from rlvr.trainer import train


def _log_entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = logits.log_softmax(-1)
    return (-(logp.exp() * logp).sum(-1)).log()


def test_each_token_is_drawn_at_its_adaptive_temperature_by_hand():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 50, generator=g)
    logits[0] *= 0.2  # flat: high entropy
    logits[1] *= 6.0  # peaked: low entropy
    x = _log_entropy(logits)
    m = float(x[2])  # row 2 sits at the pivot
    # top: twice row 0's distance (h = 1/2); bottom: half row 1's (h = -2, clamped to -1)
    adaptive = AdaptiveTemperature(0.05, m, 2 * float(x[0] - m), 0.5 * float(x[1] - m))
    want = 0.7 * (1 + 0.05 * torch.tensor([0.5, -1.0, 0.0]))
    got = adaptive_temperatures(logits, 0.7, adaptive)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    u = torch.rand(3, 1, generator=g, dtype=torch.float64)
    params = SamplingParams(temperature=0.7, adaptive=adaptive)
    tokens, logprobs = sample_next(logits, params, u)
    scaled = logits / want[:, None]
    assert tokens.tolist() == _inverse_cdf_sample(scaled.softmax(-1), u).tolist()
    torch.testing.assert_close(logprobs, scaled.log_softmax(-1).gather(-1, tokens[:, None])[:, 0])
    plain, _ = sample_next(logits, SamplingParams(temperature=0.7), u)  # off: one temperature
    assert plain.tolist() == _inverse_cdf_sample((logits / 0.7).softmax(-1), u).tolist()


def test_the_statistics_of_a_steps_tokens_by_hand():
    # log-entropies of 5 tokens: 0.8 quantile by nearest rank of the sorted x is the 4th (index
    # round(0.8 * 4) = 3)
    entropies = [[math.e**-2, math.e**0], [math.e**1, math.e**-1, math.e**3]]
    stats = entropy_statistics(entropies, tau=0.05, pivot=0.8)
    assert stats == AdaptiveTemperature(
        0.05, pytest.approx(1.0), pytest.approx(2.0), pytest.approx(-3.0)
    )
    assert entropy_statistics([[], []], 0.05) is None
    low = entropy_statistics([[0.0, 1.0]], 0.05, pivot=0.0)  # H = 0: log of 1e-8
    assert low.pivot == pytest.approx(math.log(1e-8)) and low.bottom == 0.0


def ats_config(run_dir, steps: int) -> dict:
    cfg = tiny_config(run_dir, steps=steps, rollout={"temperature_tau": 0.05})
    cfg["algorithm"] = {"preset": "hapo", "kl": {"beta": 0.0}}
    return cfg


def test_each_step_samples_at_the_previous_steps_statistics_and_a_run_resumes_exactly(tmp_path):
    cfg = ats_config(tmp_path / "run", steps=2)
    n = cfg["rollout"]["group_size"]
    with built(cfg) as parts:
        collector = parts.collector
        first, m1 = collector.collect(1)
        assert m1["sampling/temperature_pivot"] == 0.0  # step 1: the plain temperature
        stats = entropy_statistics(first.token_entropies, 0.05, 0.8)
        assert collector.sampling.adaptive == stats and stats.top > 0 > stats.bottom
        used = collector.sampling
        second, m2 = collector.collect(2)
        assert m2["sampling/temperature_pivot"] == stats.pivot
        # the engine sampled step 2 at those temperatures: the same draw again gives its
        # tokens and log-probs, the plain temperature other log-probs
        keys = group_keys(stream_key(0, 2, 0), len(second.problems), n)
        again = collector.rollouts.run(second.problems, n, used, keys)
        assert again.completion_ids == second.completion_ids
        assert again.sampler_logprobs == second.sampler_logprobs
        plain = dataclasses.replace(used, adaptive=None)
        other = collector.rollouts.run(second.problems, n, plain, keys)
        assert other.sampler_logprobs != second.sampler_logprobs
    whole = tmp_path / "whole"
    train(build_config(ats_config(whole, steps=3)))
    resumed = tmp_path / "resumed"
    train(build_config(ats_config(resumed, steps=1)))
    train(build_config(ats_config(resumed, steps=3)), resume=resumed)
    a, b = step_rows(whole), step_rows(resumed)
    for step in (2, 3):
        for key in ("sampling/temperature_pivot", "reward/mean", "policy/loss", "policy/grad_norm"):
            assert a[step][key] == b[step][key], (step, key)


def test_adaptive_temperatures_are_refused_where_they_cannot_run(tmp_path):
    for change, message in (
        ({"rollout": {"engine": "vllm"}}, "not vllm's"),
        ({"rollout": {"tree": {"branching": "fixed", "depth": 2}}}, "not agent episodes"),
        ({"algorithm": {"stages": [{"name": "error_correction"}]}}, "written corrections"),
        (
            {"algorithm": {"stages": [{"name": "replay"}], "correction": {"tis_cap": 2.0}}},
            "replayed samples lack",
        ),
        ({"algorithm": {"expert": {"traces": 1}}}, "not the data's or expert traces"),
    ):
        cfg = ats_config(tmp_path / "run", steps=1)
        for section, values in change.items():
            cfg[section].update(values)
        with pytest.raises(ConfigError, match=message):
            build_config(cfg)
