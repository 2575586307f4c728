"""PrefixRL (Setlur et al. 2026, arXiv:2601.18795): the cut rule by hand, a draw's groups played
from fixed prefixes of their problem's trace with the prefix masked from the loss, the loss by
hand over the sampled tokens only, a run from YAML, the refusals."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from test_lora import built
from test_trainer import step_rows, tiny_config

from rlvr import algorithms
from rlvr.config import ConfigError, build_config, load_config
from rlvr.data import hints
from rlvr.policy import completion_logprobs
from rlvr.rollout.streams import stream_key
from rlvr.trainer import train
from rlvr.trainer.build import resolve_algorithm
from rlvr.trainer.learner.kinds import Averages
from rlvr.trainer.stages.prefix_rl import PREFIXED, STREAMS, PrefixRL, problem_key


def test_the_cuts_by_hand():
    # h = floor(u L), kept within 1 .. L - 1
    assert algorithms.cut_points(20, [0.4, 0.55, 0.8]) == [8, 11, 16]
    assert algorithms.cut_points(3, [0.1, 0.5, 0.99]) == [1, 1, 2]
    assert algorithms.cut_points(1, [0.5, 0.7]) == [0, 0]  # nothing to give and leave
    # u uniform in [low, high), fixed by the key: the same cuts whenever drawn
    u = algorithms.cut_fractions(7, 3)
    assert u == algorithms.cut_fractions(7, 3) and u != algorithms.cut_fractions(8, 3)
    assert all(0.4 <= x < 0.8 for x in u)
    many = torch.tensor([algorithms.cut_fractions(k, 1, 0.2, 0.6)[0] for k in range(4000)])
    assert 0.2 <= many.min() and many.max() < 0.6
    assert abs(many.mean().item() - 0.4) < 0.01  # uniform: mean (low + high) / 2
    counts = torch.histc(many, bins=4, min=0.2, max=0.6) / 4000
    assert (counts - 0.25).abs().max() < 0.03
    with pytest.raises(ValueError, match="low <= high"):
        algorithms.cut_fractions(0, 3, 0.8, 0.4)


def prefix_config(run_dir, steps: int = 1, **stage) -> dict:
    cfg = tiny_config(run_dir, steps=steps)
    cfg["algorithm"]["stages"] = [{"name": "prefix_rl", **stage}]
    return cfg


def test_each_group_is_played_from_its_variants_fixed_prefix_and_the_prefix_is_not_trained(
    tmp_path,
):
    cfg = prefix_config(tmp_path / "run", variants=2)
    n = cfg["rollout"]["group_size"]
    with built(cfg) as parts:
        collector = parts.collector
        tokenizer = collector.tokenizer
        settings = PrefixRL(variants=2)
        seen = 0
        for step in (1, 2, 3):
            data, metrics = collector.collect(step)
            drawn = torch.Generator().manual_seed(
                stream_key(stream_key(0, step, 0), STREAMS) % 2**63
            )
            picks = torch.randint(3, (len(data.problems),), generator=drawn).tolist()
            prefixed = 0
            for g, (problem, pick) in enumerate(zip(data.problems, picks, strict=True)):
                assert "#" not in problem.id and not problem.response_prefix  # the drawn one
                rows = [i for i, owner in enumerate(data.group_ids.tolist()) if owner == g]
                assert len(rows) == n
                if pick == 0:  # the original problem: nothing given, every token trained
                    assert all(data.given_tokens[i] == 0 for i in rows)
                    assert all(all(data.action_mask[i]) for i in rows)
                    continue
                prefixed += 1
                # variant pick - 1 at the problem's own fraction: h = floor(u L) trace tokens
                trace = hints.reference_solution(problem)
                ids = tokenizer(trace, add_special_tokens=False).input_ids
                u = algorithms.cut_fractions(stream_key(0, STREAMS, problem_key(problem)), 2)
                h = math.floor(u[pick - 1] * len(ids))
                assert 0.4 * len(ids) - 1 <= h <= 0.8 * len(ids)
                prefix = tokenizer.decode(ids[:h])
                assert settings.variant(problem, pick - 1, 0, tokenizer).response_prefix == prefix
                given = len(tokenizer(prefix, add_special_tokens=False).input_ids)
                for i in rows:  # every sample continues the same prefix; the mask spares it
                    assert data.texts[i].startswith(prefix)
                    assert data.given_tokens[i] == given
                    assert data.action_mask[i] == [0] * given + [1] * (
                        len(data.completion_ids[i]) - given
                    )
                    assert data.sampler_logprobs[i][:given] == [0.0] * given
            assert metrics[PREFIXED] == prefixed
            seen += prefixed
        assert seen > 0

        # the loss and its gradient by hand (GRPO: ratio 1 on-policy, per-sequence token
        # mean): -A over each row's sampled tokens only, never its given prefix
        learner = parts.learners
        prepared = learner.prepare(data)
        mask = prepared.batch.action_mask.float()
        assert torch.equal(prepared.train_mask, mask) and (mask.sum(-1) > 0).all()
        adv = algorithms.grpo(data.rewards.float(), data.group_ids)
        rows = torch.arange(len(data))
        loss = learner.kind.loss(
            learner, prepared, rows, (mask.sum().item(), len(data)), Averages(), True
        )
        torch.testing.assert_close(loss, -adv.mean(), rtol=1e-5, atol=1e-6)
        params = [p for p in learner.policy.parameters() if p.requires_grad]
        got = torch.autograd.grad(loss, params)
        logp, _ = completion_logprobs(learner.policy, prepared.batch, shared_prefix=True)
        by_hand = -((adv[:, None] * mask * logp).sum(-1) / mask.sum(-1)).mean()
        want = torch.autograd.grad(by_hand, params)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_prefix_rl_trains_from_yaml_on_prefixed_problems_only(tmp_path):
    path = tmp_path / "prefix.yaml"
    path.write_text(yaml.safe_dump(prefix_config(tmp_path / "run", steps=2, original=False)))
    train(load_config(path))
    rows = step_rows(tmp_path / "run")
    assert all(math.isfinite(rows[s]["policy/loss"]) for s in (1, 2))
    assert all(rows[s][PREFIXED] == 2 for s in (1, 2))  # every group: arithmetic has traces


def test_prefix_rl_is_refused_where_it_has_no_meaning(tmp_path):
    cases = [
        ({"stages": [{"name": "dra"}, {"name": "prefix_rl"}]}, "must be the first stage"),
        (
            {"stages": [{"name": "prefix_rl"}, {"name": "error_correction"}]},
            "which error_correction would replay or rewrite",
        ),
        ({"preset": "online_dpo", "stages": [{"name": "prefix_rl"}]}, "not objective 'dpo'"),
        ({"preset": "pvpo"}, "reference baseline would play without their prefix"),
        ({"preset": "remax"}, "greedy or reference baseline"),
    ]
    for i, (change, message) in enumerate(cases):
        cfg = prefix_config(tmp_path / str(i))
        cfg["algorithm"].update(change)
        with pytest.raises(ConfigError, match=message):
            build_config(cfg)
    for stage, message in (
        ({"low": 0.9, "high": 0.5}, "0 < low <= high < 1"),
        ({"variants": 0}, "variants must be >= 1"),
    ):
        cfg = build_config(prefix_config(tmp_path / "settings", **stage))
        with pytest.raises(ConfigError, match=message):
            resolve_algorithm(cfg)
