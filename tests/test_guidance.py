"""G2RPO-A's guidance (arXiv:2508.13023; the authors' code): the adaptive length rule by hand,
its cycles, a reply continued from a given prefix token for token, the guided samples inside
the groups and the learner's loss on them, a run from YAML, exact resume, the refusals."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import yaml
from test_lora import built
from test_trainer import COMPARED, step_rows, tiny_config

from rlvr import algorithms
from rlvr.config import ConfigError, build_config, load_config
from rlvr.policy import make_batch
from rlvr.trainer import train
from rlvr.trainer.build import resolve_algorithm
from rlvr.trainer.stages.guidance import Guidance, GuidanceLength


def test_the_guidance_length_grows_when_the_reward_falls_and_shrinks_when_it_rises():
    """r_bar = mean(0.5, 0.3) = 0.4: r_k = 0.2 doubles l (100 -> 200); r_k = 0.8 halves it
    (50); floor(7 x 0.3 / 0.9) = 2; the cap (3000 x 3 -> 3072) and the floor at 1 token hold;
    equal or zero rewards leave l."""
    adapt = algorithms.adapt_guidance_length
    assert adapt(100, [0.5, 0.3], 0.2, 3072) == 200
    assert adapt(100, [0.5, 0.3], 0.8, 3072) == 50
    assert adapt(7, [0.3], 0.9, 3072) == 2
    assert adapt(3000, [0.6], 0.2, 3072) == 3072
    assert adapt(1, [0.1], 0.9, 3072) == 1
    assert adapt(100, [0.4], 0.4, 3072) == 100
    assert adapt(100, [0.0, 0.0], 0.5, 3072) == adapt(100, [0.5], 0.0, 3072) == 100
    with pytest.raises(ValueError, match="earlier steps"):
        adapt(100, [], 0.5, 3072)


def test_the_length_moves_once_per_cycle_on_the_steps_mean_reward():
    """window 2: steps 1 and 2 are recorded (a step of two draws: its mean over both), step 3
    compared with them when step 4 begins: r_bar = (0.5 + 0.25) / 2, r_3 = 0.75 -> l = 100 /
    2 = 50; steps 4-6 the next cycle. Not adaptive: l stays."""
    settings = Guidance(length=100, max_length=400)
    tracker = settings.new_state()
    draws = [(1, [1.0, 0.0]), (2, [0.0, 0.0]), (2, [1.0, 0.0]), (3, [1.0, 1.0, 0.0, 1.0])]
    for step, rewards in draws:  # step 2 has two draws
        tracker.begin(step, settings)
        tracker.observe(torch.tensor(rewards))
    assert tracker.recorded == [0.5, 0.25] and tracker.length == 100
    tracker.begin(4, settings)  # step 4's samples are guided by the new l
    assert tracker.recorded == [] and tracker.length == 50
    again = GuidanceLength(1)
    again.load_state_dict(tracker.state_dict())
    assert again.state_dict() == tracker.state_dict()
    fixed = Guidance(length=100, adaptive=False)
    state = fixed.new_state()
    for step, r in enumerate([1.0, 0.0, 0.0, 1.0], start=1):
        state.begin(step, fixed)
        state.observe(torch.tensor([r]))
    assert state.length == 100 and state.recorded == []
    with pytest.raises(ValueError, match="max_length 50 is below length 100"):
        Guidance(length=100, max_length=50)


def guidance_config(run_dir, steps: int = 2, length: int = 4, **stage) -> dict:
    cfg = tiny_config(run_dir, steps=steps)
    cfg["algorithm"] = {
        "preset": "grpo",
        "aggregation": {"name": "token-mean"},  # the loss weighs the longer rows more
        "stages": [{"name": "guidance", "guided": 2, "length": length, **stage}],
    }
    cfg["train"]["micro_batch_size"] = 64  # one micro-batch: the logged loss is the whole loss
    return cfg


def test_a_reply_continues_from_its_given_prefix_token_for_token(tmp_path):
    """The engine continues the prompt followed by the prefix's tokens; the completion is the
    prefix's tokens then the sampled ones, sampler log-probs 0 on the prefix, given_tokens
    counting them."""
    cfg = guidance_config(tmp_path / "run")
    with built(cfg) as parts:
        collector = parts.collector
        tokenizer = collector.tokenizer
        problem = collector.sampler.draw(1)[0]
        prefix_ids = tokenizer("Step one:", add_special_tokens=False).input_ids
        guided = dataclasses.replace(problem, response_prefix="Step one:")
        keys = torch.tensor([11, 12])
        played = collector.play([guided], 2, keys)
        engine = collector.rollouts.engine
        prompt = collector.rollouts.player.encode(problem)
        direct = engine.generate([prompt + prefix_ids], 2, collector.sampling, keys)
    k = len(prefix_ids)
    assert played.prompt_ids == [prompt] and played.given_tokens == [k, k]
    for i in range(2):
        assert played.completion_ids[i] == prefix_ids + direct.completion_ids[i]
        assert played.sampler_logprobs[i] == [0.0] * k + direct.logprobs[i]
        assert played.texts[i].startswith("Step one:")


def test_each_group_gains_its_guided_samples_and_the_loss_is_grpos_over_the_mixed_group(
    tmp_path,
):
    """group_size samples, then 2 whose completion starts with the first 4 tokens of the worked
    solution; step 1's loss is -mean_t A over every token (ratio 1), A GRPO's over the mixed
    group, the given tokens included (the authors' code trains them). DAPO's overlong penalty
    counts the sampled tokens only."""
    cfg = guidance_config(tmp_path / "run")
    cfg["algorithm"]["overlong"] = {"buffer_frac": 0.5}  # 12 tokens, the last 6 penalised
    n = cfg["rollout"]["group_size"]
    with built(cfg) as parts:
        collector, learner = parts.collector, parts.learners
        data, metrics = collector.collect(1)
        P = len(data.problems)
        assert len(data) == P * (n + 2) and metrics["sampling/guided"] == 2 * P
        assert data.group_ids.tolist() == [g for g in range(P) for _ in range(n + 2)]
        assert data.given_tokens == ([0] * n + [4, 4]) * P
        assert metrics["sampling/guidance_length"] == 4.0
        tokenizer = collector.tokenizer
        for g, problem in enumerate(data.problems):
            solution = problem.demonstrations[0].text
            prefix = tokenizer(solution, add_special_tokens=False).input_ids[:4]
            for row in (g * (n + 2) + n, g * (n + 2) + n + 1):
                assert data.completion_ids[row][:4] == prefix
                assert data.sampler_logprobs[row][:4] == [0.0] * 4
                assert data.texts[row].startswith(tokenizer.decode(prefix))
        sampled = [len(c) - g for c, g in zip(data.completion_ids, data.given_tokens, strict=True)]
        penalty = algorithms.overlong_penalty(torch.tensor(sampled), 12, 6)
        raw = torch.tensor(data.breakdown.total)
        torch.testing.assert_close(data.rewards, (raw + penalty).float())
        assert max(len(c) for c in data.completion_ids) > 12  # 4 given + up to 12 sampled
        batch = make_batch(
            data.prompt_ids, data.completion_ids, learner.pad_token_id, data.group_ids.tolist()
        )
        mask = batch.action_mask.float()
        adv = algorithms.grpo(data.rewards, data.group_ids)
        expected = (-adv[:, None] * mask).sum() / mask.sum()
        update, bad = learner.update(data)
    assert bad is None
    assert update["policy/loss"] == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)
    assert update["mismatch/abs_log_ratio"] < 1e-3  # the given tokens are not a mismatch


def test_a_guided_run_from_yaml_adapts_its_length_and_resumes_exactly(tmp_path):
    """window 1 (cycles of 2 steps): the length logged at step 3 follows the rule from steps 1
    and 2's mean rewards over every sample, guided or not (``sampling/guidance_reward``); a run
    stopped at step 2 and resumed logs the same step 3 and 4."""
    straight = tmp_path / "straight" / "run"
    path = tmp_path / "guided.yaml"
    path.write_text(yaml.safe_dump(guidance_config(straight, steps=4, length=6, window=1)))
    train(load_config(path))
    rows = step_rows(straight)
    assert [rows[s]["sampling/guided"] for s in (1, 2, 3, 4)] == [4.0] * 4
    assert rows[1]["sampling/guidance_length"] == rows[2]["sampling/guidance_length"] == 6.0
    reward = [rows[s]["sampling/guidance_reward"] for s in (1, 2)]
    expected = algorithms.adapt_guidance_length(6, reward[:1], reward[1], 6)
    assert rows[3]["sampling/guidance_length"] == expected != 6
    resumed = tmp_path / "resumed" / "run"
    train(build_config(guidance_config(resumed, steps=2, length=6, window=1)))
    cfg = guidance_config(resumed, steps=4, length=6, window=1)
    train(build_config(cfg), resume=resumed)
    again = step_rows(resumed)
    for step in (3, 4):
        for key in (*COMPARED, "sampling/guidance_length", "sampling/guidance_reward"):
            assert again[step][key] == rows[step][key], (step, key)


def test_guidance_is_refused_where_it_has_no_meaning(tmp_path):
    cases = [
        ({"expert": {"traces": 1}}, "own groups .not the data's or expert traces"),
        ({"preset": "online_dpo"}, "policy gradient, not objective 'dpo'"),
        ({"advantage": {"name": "remax"}}, "produced inputs"),
    ]
    for i, (change, message) in enumerate(cases):
        cfg = guidance_config(tmp_path / str(i))
        cfg["algorithm"].update(change)
        with pytest.raises(ConfigError, match=message):
            build_config(cfg)
    cfg = guidance_config(tmp_path / "first")
    cfg["algorithm"]["stages"].insert(0, {"name": "diver"})
    with pytest.raises(ConfigError, match="must be the first stage"):
        build_config(cfg)
    cfg = guidance_config(tmp_path / "sized")
    cfg["algorithm"]["stages"].append({"name": "hints", "fractions": [0.5]})
    with pytest.raises(ConfigError, match="which hints would count as group_size"):
        build_config(cfg)
    cfg = guidance_config(tmp_path / "bad", guided=0)
    with pytest.raises(ConfigError, match="stages guidance: guided, length and window must be"):
        resolve_algorithm(build_config(cfg))
