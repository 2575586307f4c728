"""Data and rollout budget (issue 29, part 3) and SPO's persistent baseline (part 2): the
saturated-prompt memory, VCRL's variance selection and memory bank, SPO's per-prompt tracker;
each by hand, in a run from YAML, and resumed exactly."""

from __future__ import annotations

import json
import math

import pytest
import torch
from test_trainer import COMPARED, step_rows, tiny_config

from rlvr.algorithms import (
    AdvantageInputs,
    compute_advantages,
    normalized_variance,
    spo,
    variance_band,
)
from rlvr.config import build_config
from rlvr.curriculum import SaturationMemory, SPOTracker, VarianceBank, knapsack_sizes
from rlvr.curriculum.spo import beta_track
from rlvr.data import Problem
from rlvr.trainer import train


class Cycle:
    """A task of ``k`` problems repeated in order: p0, p1, ..., p(k-1), p0, ..."""

    name = "cycle"

    def __init__(self, k: int) -> None:
        self.k = k

    def train_problem(self, index: int) -> Problem:
        return Problem(id=f"p{index % self.k}", prompt=f"q{index % self.k}", answer="1")


def _ids(problems: list[Problem]) -> list[str]:
    return [p.id for p in problems]


def test_saturated_problems_are_remembered_and_skipped():
    sampler = SaturationMemory(Cycle(3), high=1.0, patience=2)
    first = sampler.draw(2)  # p0, p1
    groups = torch.tensor([0, 0, 1, 1])
    sampler.update(first, torch.tensor([1.0, 1.0, 1.0, 0.0]), groups)  # p0 all solved: streak 1
    assert _ids(sampler.draw(2)) == ["p2", "p0"]
    sampler.update(
        [Problem("p2", "", ""), Problem("p0", "", "")], torch.tensor([0.0, 0, 1, 1]), groups
    )  # p0 solved again: 2 in a row, remembered
    assert sampler.saturated == {"p0"}
    assert _ids(sampler.draw(3)) == ["p1", "p2", "p1"]  # p0 skipped where the stream brings it
    assert sampler.metrics() == {"curriculum/saturated": 1.0, "curriculum/skipped": 1.0}
    state = json.loads(json.dumps(sampler.state_dict()))  # JSON, as a checkpoint holds it
    resumed = SaturationMemory(Cycle(3), high=1.0, patience=2)
    resumed.load_state_dict(state)
    assert _ids(resumed.draw(4)) == _ids(sampler.draw(4))


def test_a_broken_streak_starts_again_and_a_used_up_stream_is_an_error():
    sampler = SaturationMemory(Cycle(1), high=0.5, patience=2, max_skips=5)
    one = [Problem("p0", "", "")]
    sampler.update(one, torch.tensor([1.0, 0.0]), torch.tensor([0, 0]))  # 0.5 >= high: streak 1
    sampler.update(one, torch.tensor([0.0, 0.0]), torch.tensor([0, 0]))  # broken
    sampler.update(one, torch.tensor([1.0, 1.0]), torch.tensor([0, 0]))
    assert sampler.saturated == set()
    sampler.update(one, torch.tensor([1.0, 1.0]), torch.tensor([0, 0]))
    with pytest.raises(RuntimeError, match="stream is used up"):
        sampler.draw(1)


def test_normalized_variance_by_hand():
    rewards = torch.tensor([1.0, 1, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0])
    ids = torch.tensor([0] * 4 + [1] * 4 + [2] * 4 + [3] * 3)
    # G = 4: s_max^2 = 2 * 2 / (4 * 3) = 1/3; [1,1,0,0]: s^2 = 1/3 -> 1; [1,0,0,0]: s^2 = 1/4 ->
    # 0.75; all right: 0. G = 3: s_max^2 = 1 * 2 / (3 * 2) = 1/3; [1,0,0]: s^2 = 1/3 -> 1
    p = normalized_variance(rewards, ids)
    torch.testing.assert_close(p, torch.tensor([1.0, 0.75, 0.0, 1.0]))
    assert variance_band(rewards, ids, kappa=0.8).tolist() == [True, False, False, True]
    assert normalized_variance(torch.tensor([1.0]), torch.tensor([0])).tolist() == [0.0]


def test_the_vcrl_bank_replays_the_highest_variance_prompts():
    sampler = VarianceBank(Cycle(100), kappa=0.5, replay_frac=0.5, bank_size=2)
    first = sampler.draw(4)  # positions 0-3
    rewards = torch.tensor([1.0, 1, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0])
    sampler.update(first, rewards, torch.arange(4).repeat_interleave(4))
    # p = 1, 0.75, 0, 1 -> entries 0 (1.0), 3 (1.0), 1 (0.75); a bank of 2 keeps 0 and 3
    assert [entry[:2] for entry in sampler.bank] == [(0, 1.0), (3, 1.0)]
    second = sampler.draw(4)  # half from the bank (highest p, then oldest, then position)
    assert _ids(second) == ["p0", "p3", "p4", "p5"]
    assert sampler.metrics() == {"curriculum/bank": 0.0, "curriculum/replayed": 2.0}
    state = json.loads(json.dumps(sampler.state_dict()))
    resumed = VarianceBank(Cycle(100), kappa=0.5, replay_frac=0.5, bank_size=2)
    resumed.load_state_dict(state)
    for s in (sampler, resumed):
        s.update(second, rewards, torch.arange(4).repeat_interleave(4))
    assert _ids(resumed.draw(4)) == _ids(sampler.draw(4)) == ["p0", "p5", "p6", "p7"]


def test_spo_tracker_and_advantage_by_hand():
    assert beta_track(0.5, 0.5, [1.0], 0.875) == (0.4375 + 1, 0.4375)
    assert beta_track(1.0, 1.0, [2.0, -1.0], 0.5) == (1.5, 1.5)  # rewards clamped to [0, 1]
    tracker = SPOTracker(Cycle(2), rho=0.875)
    problems = tracker.draw(2)
    assert tracker.baselines(problems) == [0.5, 0.5]  # the prior
    tracker.update(problems, torch.tensor([1.0, 0.0]), torch.tensor([0, 1]))
    assert tracker.baselines(problems) == pytest.approx([1.4375 / 1.875, 0.4375 / 1.875])
    state = json.loads(json.dumps(tracker.state_dict()))
    resumed = SPOTracker(Cycle(2))
    resumed.load_state_dict(state)
    assert resumed.baselines(problems) == tracker.baselines(problems)
    # A = r - b = 0.5, -0.5, 0.2; mean 1/15; unbiased std over the batch
    rewards, baselines = torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0.5, 0.5, 0.8])
    centred = [0.5, -0.5, 0.2]
    mean = sum(centred) / 3
    std = math.sqrt(sum((c - mean) ** 2 for c in centred) / 2)
    expected = [(c - mean) / (std + 1e-8) for c in centred]
    assert spo(rewards, baselines).tolist() == pytest.approx(expected)
    inputs = AdvantageInputs(rewards, torch.arange(3), baselines=baselines)
    assert compute_advantages("spo", inputs).advantages.tolist() == pytest.approx(expected)


def _file_task(tmp_path) -> dict:
    rows = [{"prompt": f"Say {w}.", "answer": w} for w in "yes no up down in out on off".split()]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"name": "file", "path": str(path), "eval_fraction": 0.25}  # 6 rows train


CASES = {
    "saturation": (
        {"name": "saturation", "params": {"high": 1.0, "threshold": 0.4}},
        {"group_selector": "pass_rate", "params": {"group_selector": {"threshold": 0.4}}},
    ),
    "vcrl": (
        # letter_fraction rewards of 2 samples rarely differ by much: p ~ 0.01-0.1
        {"name": "vcrl", "params": {"kappa": 0.01}},
        {
            "group_selector": "variance",
            "max_draws": 2,
            "params": {"group_selector": {"kappa": 0.01}},
        },
    ),
    "spo": ({"name": "spo"}, {"advantage": "spo"}),
}


def _config(tmp_path, run_dir, name: str, steps: int) -> dict:
    curriculum, algorithm = CASES[name]
    cfg = tiny_config(
        run_dir,
        steps=steps,
        curriculum=curriculum,
        algorithm=algorithm,
        rollout={"group_size": 2, "prompts_per_step": 2},
    )
    cfg["task"] = _file_task(tmp_path)
    return cfg


@pytest.mark.parametrize("name", list(CASES))
def test_each_trains_from_yaml_and_resumes_exactly(tmp_path, name):
    straight = tmp_path / "straight"
    train(build_config(_config(tmp_path, straight, name, 4)))
    reference = step_rows(straight)
    run_dir = tmp_path / "run"
    train(build_config(_config(tmp_path, run_dir, name, 2)))
    train(build_config(_config(tmp_path, run_dir, name, 4)), resume=run_dir)
    rows = step_rows(run_dir)
    assert sorted(rows) == [1, 2, 3, 4]
    curriculum_keys = [k for k in reference[4] if k.startswith("curriculum/")]
    assert curriculum_keys, reference[4].keys()
    for step in (3, 4):
        for key in (*COMPARED, *curriculum_keys):
            assert rows[step][key] == reference[step][key], (step, key)


def test_the_spo_advantage_needs_its_tracker(tmp_path):
    from rlvr.config import ConfigError

    cfg = tiny_config(tmp_path / "run", steps=1, algorithm={"advantage": "spo"})
    with pytest.raises(ConfigError, match="curriculum.name: spo"):
        train(build_config(cfg))


def test_a_step_where_no_group_passes_the_selector_trains_on_nothing_and_says_so(tmp_path, capfd):
    # letter_fraction rewards of 2 samples never reach the largest variance: kappa 1 keeps none
    cfg = tiny_config(
        tmp_path / "run",
        steps=2,
        algorithm={"group_selector": "variance", "params": {"group_selector": {"kappa": 1.0}}},
        rollout={"group_size": 2},
    )
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    assert sorted(rows) == [1, 2]
    assert all(r["policy/trained_samples_frac"] == 0.0 for r in rows.values())
    captured = capfd.readouterr()
    assert "no group passed the group selector 'variance'" in captured.out + captured.err


def test_knapsack_sizes_by_hand():
    from itertools import product

    from rlvr.curriculum.knapsack import knapsack_value

    # never seen: G = 4; p = 0 and 1: min 2; p = 0.5 and 0.25 share the other 8 samples
    sizes = knapsack_sizes([None, 0.0, 1.0, 0.5, 0.25], n=4, min_size=2, max_size=8)
    # v(N, p) = (1 - p^N - (1-p)^N) p (1-p)^2: the best split of 8 extra samples is 3 + 5
    # (0.0547 + 0.0691 = 0.1238 over 2 + 6: 0.1207, 4 + 4: 0.1214)
    assert sizes == [4, 2, 2, 5, 7]
    best = max(
        product(range(2, 9), repeat=2),
        key=lambda s: (
            knapsack_value(s[0], 0.5) + knapsack_value(s[1], 0.25) if sum(s) == 12 else -1
        ),
    )
    assert list(best) == sizes[3:]
    assert knapsack_value(3, 0.5) == pytest.approx((1 - 2 * 0.125) * 0.5 * 0.25)
    # every such prompt at max_size: the rest to the p = 0 prompt
    assert knapsack_sizes([0.0, 0.5], n=4, min_size=2, max_size=4) == [4, 4]
    assert knapsack_sizes([None, None], n=4) == [4, 4]
    with pytest.raises(ValueError, match="min_size <= n <= max_size"):
        knapsack_sizes([None], n=4, min_size=5)


def test_knapsack_groups_of_different_sizes_train_and_resume_exactly(tmp_path):
    def config(run_dir, steps):
        cfg = tiny_config(
            run_dir,
            steps=steps,
            curriculum={"name": "knapsack", "params": {"threshold": 0.4, "max_size": 6}},
            rollout={"group_size": 4, "prompts_per_step": 2},
        )
        cfg["task"] = _file_task(tmp_path)  # 6 training rows: steps 4-6 revisit them
        return cfg

    straight = tmp_path / "straight"
    train(build_config(config(straight, 6)))
    reference = step_rows(straight)
    sizes = [
        (r["curriculum/group_size_min"], r["curriculum/group_size_max"]) for r in reference.values()
    ]
    assert sizes[:3] == [(4.0, 4.0)] * 3  # first visits: G each
    assert any(low < high for low, high in sizes[3:]), sizes  # revisits: sized by pass rate
    run_dir = tmp_path / "run"
    train(build_config(config(run_dir, 2)))  # steps 1-2 train at the same rate for any length
    train(build_config(config(run_dir, 6)), resume=run_dir)
    rows = step_rows(run_dir)
    for step in (3, 4, 5, 6):
        for key in (*COMPARED, "curriculum/group_size_min", "curriculum/group_size_max"):
            assert rows[step][key] == reference[step][key], (step, key)


def test_a_hint_is_a_prefix_of_the_problems_solution():
    from rlvr.data import Demonstration
    from rlvr.data.hints import HINT_INTRO, hinted, solution_prefix

    assert solution_prefix("abcdefgh", 0.25) == "ab" and solution_prefix("abcdefgh", 0.5) == "abcd"
    worked = Demonstration.of([{"role": "assistant", "content": "3 + 4 = 7. Answer: 7"}])
    problem = Problem("p1", "What is 3 + 4?", "7", demonstrations=(worked,))
    hint = hinted(problem, 0.5)
    assert hint is not None and hint.id == "p1#hint50"
    assert hint.prompt == "What is 3 + 4?" + HINT_INTRO + "3 + 4 = 7."
    chat = Problem("c", "Q?", "1", chat=(("system", "S"), ("user", "Q?")), demonstrations=(worked,))
    hinted_chat = hinted(chat, 0.25)
    assert hinted_chat is not None and hinted_chat.chat == (
        ("system", "S"),
        ("user", "Q?" + HINT_INTRO + "3 + 4"),
    )
    assert hinted(Problem("x", "Q?", "1"), 0.5) is None  # no solution to give
    rejected = Demonstration.of([{"role": "assistant", "content": "8"}], reward=0.0)
    assert hinted(Problem("y", "Q?", "1", demonstrations=(rejected,)), 0.5) is None


def test_failed_groups_are_played_again_with_hints_and_trained_hinted(tmp_path):
    # the task's verifier: the tiny random model never answers, so every group fails; each is
    # played with 25% of its worked solution, then 50%, and trained on the 50% one
    cfg = tiny_config(tmp_path / "run", steps=2, rollout={"hints": [0.25, 0.5]})
    cfg["reward"] = {}
    cfg["logging"]["samples_per_step"] = 8
    train(build_config(cfg))
    rows = step_rows(tmp_path / "run")
    assert [rows[s]["sampling/hinted_groups"] for s in (1, 2)] == [2.0, 2.0]
    samples = [json.loads(line) for line in (tmp_path / "run/samples.jsonl").open()]
    assert samples and all("a worked solution begins as follows" in s["prompt"] for s in samples)


def test_hints_must_be_increasing_fractions():
    """The run stops before it starts, naming the stage (its settings are the stage's)."""
    from rlvr.config import ConfigError
    from rlvr.trainer.build import resolve_algorithm

    stages = [{"name": "hints", "fractions": [0.5, 0.25]}]
    with pytest.raises(ConfigError, match="stages hints: fractions must be increasing"):
        resolve_algorithm(build_config({"algorithm": {"stages": stages}}))
    with pytest.raises(ConfigError, match="increasing fractions"):  # the older form's key
        resolve_algorithm(build_config({"rollout": {"hints": [0.5, 0.25]}}))


def test_the_replay_buffer_keeps_the_newest_successes_per_prompt():
    from rlvr.trainer.stages.replay import ReplayBuffer

    buffer = ReplayBuffer(replay=2, per_prompt=3, threshold=1.0)
    for i, reward in enumerate([1.0, 0.0, 1.0, 1.0, 1.0]):
        buffer.store("p", {"text": f"s{i}", "reward": reward})
    assert [s["text"] for s in buffer.entries["p"]] == ["s2", "s3", "s4"]  # 3 kept, s1 failed
    assert [s["text"] for s in buffer.take("p")] == ["s4", "s3"]  # the newest 2, newest first
    assert buffer.take("q") == [] and buffer.metrics() == {"replay/buffer_samples": 3.0}
    again = ReplayBuffer(replay=2, per_prompt=3)
    again.load_state_dict(json.loads(json.dumps(buffer.state_dict())))
    assert again.take("p") == buffer.take("p")
    with pytest.raises(ValueError, match="replay <= replay_buffer"):
        ReplayBuffer(replay=4, per_prompt=3)


def _replay_config(tmp_path, run_dir, steps):
    cfg = tiny_config(
        run_dir,
        steps=steps,
        rollout={"group_size": 2, "prompts_per_step": 2, "replay": 2, "replay_threshold": 0.3},
        algorithm={"tis_cap": 2.0},
    )
    cfg["task"] = _file_task(tmp_path)  # 6 training rows: steps 4-6 revisit them
    return cfg


def test_replayed_successes_join_their_groups_and_resume_exactly(tmp_path):
    straight = tmp_path / "straight"
    train(build_config(_replay_config(tmp_path, straight, 6)))
    reference = step_rows(straight)
    assert [reference[s]["sampling/replayed"] for s in (1, 2, 3)] == [0.0, 0.0, 0.0]
    assert sum(reference[s]["sampling/replayed"] for s in (4, 5, 6)) > 0  # revisits replay
    assert reference[3]["replay/buffer_samples"] > 0
    run_dir = tmp_path / "run"
    train(build_config(_replay_config(tmp_path, run_dir, 2)))
    train(build_config(_replay_config(tmp_path, run_dir, 6)), resume=run_dir)
    rows = step_rows(run_dir)
    for step in (3, 4, 5, 6):
        for key in (*COMPARED, "sampling/replayed", "replay/buffer_samples"):
            assert rows[step][key] == reference[step][key], (step, key)


def test_replay_needs_an_importance_weight_at_config_time(tmp_path):
    from rlvr.config import ConfigError

    cfg = tiny_config(tmp_path / "run", steps=1, rollout={"replay": 2})
    with pytest.raises(ConfigError, match=r"needs algorithm.correction.tis_cap \(e.g. 2\), or a"):
        build_config(cfg)
    asynchronous = tiny_config(tmp_path / "run", rollout={"replay": 2, "max_staleness": 1})
    assert build_config(asynchronous).algorithm.correction.tis_cap == 2.0  # asynchronous TIS


def test_dppo_replays_without_tis_its_ratio_to_the_behaviour_policy_is_the_correction(tmp_path):
    """DPPO's ratio is to a row's sampler log-probs, a replayed row's stored behaviour log-probs:
    replay needs no tis_cap with it (which DPPO refuses), and trains."""
    run_dir = tmp_path / "run"
    cfg = tiny_config(
        run_dir,
        steps=2,
        rollout={"group_size": 2, "prompts_per_step": 6, "replay": 2, "replay_threshold": 0.3},
        algorithm={"policy_loss": "dppo_tv"},
    )
    cfg["task"] = _file_task(tmp_path)  # 6 training rows: step 2 draws them all again
    built = build_config(cfg)
    assert built.algorithm.correction.tis_cap is None
    train(built)
    rows = step_rows(run_dir)
    assert sorted(rows) == [1, 2] and rows[2]["sampling/replayed"] > 0
    assert all(math.isfinite(r["policy/loss"]) for r in rows.values())
