"""Curricula: each formula on a hand-computed example, each sampler alone, and in the trainer."""

from __future__ import annotations

import json
import math

import pytest
import torch
from test_trainer import assert_same_steps, step_rows, tiny_config

from rlvr.config import ConfigError, build_config
from rlvr.curriculum import (
    DUMP,
    SEC,
    Sequential,
    absolute_advantage,
    make_sampler,
    softmax,
    td0_update,
    ucb_scores,
)
from rlvr.data import ArithmeticTask, MixtureTask, Problem, build_task
from rlvr.trainer import train


def mixture(levels=(1, 3, 5)) -> MixtureTask:
    return MixtureTask(
        [ArithmeticTask(level=lv, n_eval=6) for lv in levels], [f"L{lv}" for lv in levels]
    )


# ---------------------------------------------------------------- formulas


def test_absolute_advantage_is_grpo_magnitude():
    # group 0: one of four solved: mean 1/4, unbiased std sqrt((9/16 + 3/16) / 3) = 1/2
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    got = absolute_advantage(rewards, groups)
    assert got.tolist() == pytest.approx([1.5, 0.5, 0.5, 0.5, 0, 0, 0, 0], abs=1e-5)


def test_td0_update_moves_only_observed_arms():
    assert td0_update([0.0, 0.4, 0.2], {0: 0.8, 2: 0.0}, alpha=0.5) == pytest.approx(
        [0.4, 0.4, 0.1]
    )
    assert td0_update([0.3], {0: 0.9}, alpha=1.0) == pytest.approx([0.9])


def test_softmax_temperature_and_infinite_scores():
    assert softmax([0.0, math.log(3)], 1.0) == pytest.approx([0.25, 0.75])
    assert softmax([0.0, 0.5 * math.log(3)], 0.5) == pytest.approx([0.25, 0.75])
    assert softmax([math.inf, 1.0, math.inf], 0.1) == [0.5, 0.0, 0.5]
    assert sum(softmax([1000.0, 0.0], 0.01)) == pytest.approx(1.0)  # no overflow


def test_ucb_scores_by_hand():
    # total 8: 0.5 + sqrt(2 ln 8 / 2) = 1.9420, 0.2 + sqrt(2 ln 8 / 6) = 1.0326
    scores = ucb_scores([0.5, 0.2, 0.0], [2, 6, 0], exploration=1.0)
    assert scores[:2] == pytest.approx([1.94202, 1.03256], abs=1e-4)
    assert scores[2] == math.inf
    assert ucb_scores([0.5, 0.2], [2, 6], exploration=0.0) == [0.5, 0.2]


# ---------------------------------------------------------------- the mixture task


def test_mixture_categories_streams_eval_and_scoring():
    task = mixture()
    assert task.categories == ("L1", "L3", "L5") and task.name == "arithmetic"
    p = task.category_problem(1, 7)
    base = ArithmeticTask(level=3, n_eval=6).train_problem(7)
    assert (p.id, p.prompt, p.answer, p.category) == (base.id, base.prompt, base.answer, "L3")
    assert [task.train_problem(i).category for i in range(6)] == ["L1", "L3", "L5"] * 2
    assert task.train_problem(4) == task.category_problem(1, 1)
    held_out = task.eval_problems()
    assert [q.category for q in held_out[:6]] == ["L1", "L3", "L5"] * 2  # every prefix balanced
    assert len(held_out) == 18
    assert not {q.id for q in held_out} & {task.train_problem(i).id for i in range(300)}
    assert task.score(f"Answer: {p.answer}", p) == 1.0
    assert task.score("Answer: nope", p) == 0.0
    # a problem rebuilt from saved samples has no category: found among the held-out ids
    q = held_out[4]
    assert task.score(f"Answer: {q.answer}", Problem(q.id, q.prompt, q.answer)) == 1.0
    with pytest.raises(ValueError, match="no category of this mixture"):
        task.score("Answer: 1", Problem("elsewhere", "?", "1"))


def test_mixture_rejects_bad_categories():
    with pytest.raises(ValueError, match="one category name per task"):
        MixtureTask([ArithmeticTask(n_eval=2)], ["a", "b"])
    with pytest.raises(ValueError, match="distinct"):
        MixtureTask([ArithmeticTask(n_eval=2), ArithmeticTask(n_eval=2)], ["a", "a"])


# ---------------------------------------------------------------- samplers alone


def scored(
    problems: list[Problem], solved: dict[str, list[float]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards of a group of 4 per problem: the category's fixed pattern of outcomes."""
    rewards = torch.tensor([r for p in problems for r in solved[p.category]])
    groups = torch.arange(len(problems)).repeat_interleave(4)
    return rewards, groups


# L1 always solved (no signal), L3 half solved (most signal), L5 never solved (no signal)
OUTCOMES = {"L1": [1.0] * 4, "L3": [1.0, 0.0, 1.0, 0.0], "L5": [0.0] * 4}


def test_sec_learns_by_hand_then_prefers_learnable_category():
    sec = SEC(mixture(), seed=0, alpha=0.5, temperature=0.2)
    assert sec.probabilities() == pytest.approx([1 / 3] * 3)  # Q starts at 0
    problems = [sec.task.category_problem(c, 0) for c in range(3)]
    sec.update(problems, *scored(problems, OUTCOMES))
    # L3: |A| = 0.5 / std([1,0,1,0], unbiased) = 0.5 / 0.57735 = 0.86603 for every sample
    assert sec.q == pytest.approx([0.0, 0.5 * 0.86603, 0.0], abs=1e-4)
    for _ in range(10):
        batch = sec.draw(8)
        sec.update(batch, *scored(batch, OUTCOMES))
    probs = sec.probabilities()
    assert probs[1] > 0.9 and probs[0] == pytest.approx(probs[2])
    metrics = sec.metrics()
    assert metrics["curriculum/prob/L3"] == pytest.approx(probs[1])
    assert metrics["curriculum/value/L1"] == 0.0


def test_dump_explores_each_category_then_exploits():
    dump = DUMP(mixture(), seed=0, window=8, exploration=0.1, temperature=0.05)
    assert dump.probabilities() == pytest.approx([1 / 3] * 3)  # all unexplored: +inf each
    problems = [dump.task.category_problem(c, 0) for c in range(2)]
    dump.update(problems, *scored(problems, OUTCOMES))
    assert dump.probabilities() == [0.0, 0.0, 1.0]  # the one category never drawn comes first
    assert dump.counts == [4, 4, 0]
    for _ in range(10):
        batch = dump.draw(6)
        dump.update(batch, *scored(batch, OUTCOMES))
    assert dump.values()[1] == pytest.approx(0.86603, abs=1e-4)
    assert all(len(w) <= 8 for w in dump.windows)  # sliding window
    assert dump.probabilities()[1] > 0.9


@pytest.mark.parametrize("name", ["sequential", "sec", "dump"])
def test_state_dict_resumes_the_same_draws(name):
    def run(sampler, steps):
        ids = []
        for _ in range(steps):
            batch = sampler.draw(5)
            sampler.update(batch, *scored(batch, OUTCOMES))
            ids.append([p.id for p in batch])
        return ids

    straight = make_sampler(name, mixture(), seed=3)
    expected = run(straight, 6)
    first = make_sampler(name, mixture(), seed=3)
    head = run(first, 3)
    state = json.loads(json.dumps(first.state_dict()))  # checkpoints store it as JSON
    resumed = make_sampler(name, mixture(), seed=3)
    resumed.load_state_dict(state)
    assert head + run(resumed, 3) == expected
    other_seed = make_sampler(name, mixture(), seed=4)
    if name != "sequential":
        assert run(other_seed, 6) != expected


def test_sequential_walks_the_stream():
    task = ArithmeticTask(n_eval=2)
    sampler = Sequential(task)
    assert sampler.draw(3) + sampler.draw(2) == [task.train_problem(i) for i in range(5)]
    assert sampler.state_dict() == {"position": 5} and sampler.metrics() == {}


def test_category_curriculum_needs_categories():
    with pytest.raises(ValueError, match="task.levels"):
        SEC(ArithmeticTask(n_eval=2))
    with pytest.raises(ValueError, match="unknown curriculum"):
        make_sampler("reverse", mixture())


# ---------------------------------------------------------------- config


def test_config_levels_and_curriculum_errors():
    cfg = build_config({"task": {"levels": [1, 3]}, "curriculum": {"name": "dump"}})
    assert cfg.curriculum.kwargs() == {"window": 300, "exploration": 1.0}
    task = build_task(cfg.task)
    assert isinstance(task, MixtureTask) and task.categories == ("L1", "L3")
    sampler = make_sampler(cfg.curriculum.name, task, **cfg.curriculum.kwargs())
    assert sampler.temperature == 0.1  # the sampler's own default when unset
    sec = build_config({"task": {"levels": [1, 3]}, "curriculum": {"name": "sec"}}).curriculum
    assert make_sampler("sec", task, **sec.kwargs()).temperature == 1.0
    assert sec.model_copy(update={"temperature": 0.2}).kwargs()["temperature"] == 0.2
    with pytest.raises(ConfigError, match="curriculum.name: sec"):
        build_config({"curriculum": {"name": "sec"}})
    with pytest.raises(ConfigError, match="within 1..3"):
        build_config({"task": {"name": "countdown", "levels": [1, 4]}})
    with pytest.raises(
        ConfigError, match="only applies to the arithmetic, countdown, search_qa and judge"
    ):
        build_config({"task": {"name": "file", "path": "x.jsonl", "levels": [1, 2]}})
    from rlvr.registries import check_config  # names above the config's layer: at start

    with pytest.raises(ConfigError, match="curriculum.name: unknown curriculum 'ucb_bandit'"):
        check_config(build_config({"curriculum": {"name": "ucb_bandit"}}))


# ---------------------------------------------------------------- in the trainer


def curriculum_config(run_dir, steps):
    return tiny_config(
        run_dir,
        steps=steps,
        task={"levels": [1, 2, 3]},
        curriculum={"name": "sec", "temperature": 0.5},
        train={"lr_schedule": "constant"},  # the split run is extended, its schedule must not move
    )


def test_trainer_with_sec_logs_and_resumes_exactly(tmp_path):
    train(build_config(curriculum_config(tmp_path / "straight", 4)))
    straight = step_rows(tmp_path / "straight")
    row = straight[4]
    probs = [row[f"curriculum/prob/L{lv}"] for lv in (1, 2, 3)]
    assert sum(probs) == pytest.approx(1.0)
    fractions = [row.get(f"category/L{lv}/samples_frac", 0.0) for lv in (1, 2, 3)]
    assert sum(fractions) == pytest.approx(1.0)

    train(build_config(curriculum_config(tmp_path / "split", 2)))
    resumed_cfg = build_config(curriculum_config(tmp_path / "split", 4))
    train(resumed_cfg, resume=tmp_path / "split")
    split = step_rows(tmp_path / "split")
    assert_same_steps(straight, split)
    for step in straight:
        for lv in (1, 2, 3):
            key = f"curriculum/prob/L{lv}"
            assert straight[step][key] == pytest.approx(split[step][key], rel=1e-6)
    # rlvr eval on the run evaluates its mixture and reports each category
    from typer.testing import CliRunner

    from rlvr.cli import app

    result = CliRunner().invoke(
        app,
        [
            "eval",
            str(tmp_path / "split"),
            "--n",
            "2",
            "--n-prompts",
            "6",
            "--out",
            str(tmp_path / "ev"),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "ev/summary.json").read_text())
    assert sorted(summary["by_category"]) == ["L1", "L2", "L3"]
    assert [c["n_prompts"] for c in summary["by_category"].values()] == [2, 2, 2]
    prompts = [
        [
            json.loads(x)["prompt"]
            for x in (tmp_path / run / "samples.jsonl").read_text().splitlines()
        ]
        for run in ("straight", "split")
    ]
    assert prompts[0] == prompts[1]


def test_old_checkpoint_state_loads_as_sequential(tmp_path):
    from rlvr.checkpoint import load_checkpoint

    train(build_config(tiny_config(tmp_path / "run", steps=1)))
    ckpt = tmp_path / "run/checkpoints/step_000001"
    (ckpt / "state.json").write_text(json.dumps({"step": 1, "sampler_position": 2}))
    from rlvr.models import load_model

    model = load_model("tiny-random-llama")
    opt = torch.optim.AdamW(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    state = load_checkpoint(ckpt, model, opt, sched, torch.Generator())
    assert state.step == 1 and state.sampler == {"position": 2}


# ---------------------------------------------------------------- categories from a file column


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_file_mixture_splits_by_column_with_a_held_out_split_per_category(tmp_path):
    from rlvr.data import file_mixture

    rows = [
        {"prompt": f"q{i}", "answer": str(i), "source": "gsm" if i % 3 else "math"}
        for i in range(60)
    ]
    task = file_mixture(write_rows(tmp_path / "d.jsonl", rows), "source", seed=0)
    assert task.categories == ("math", "gsm")  # order of first appearance
    for c, name in enumerate(task.categories):
        want = {str(i) for i in range(60) if (rows[i]["source"] == name)}
        drawn = {task.category_problem(c, i).answer for i in range(200)}
        held = {p.answer for p in task.eval_problems() if p.category == name}
        assert drawn | held == want and not drawn & held  # its own rows, split disjointly
        assert len(held) == round(0.1 * len(want))  # each category's own 10%
    p = task.category_problem(1, 0)
    assert p.category == "gsm" and task.score(f"Answer: {p.answer}", p) == 1.0


def test_file_mixture_split_column_and_errors(tmp_path):
    from rlvr.data import FileTask, file_mixture

    rows = [
        {"prompt": f"q{i}", "answer": str(i), "level": i % 2, "split": "test" if i < 4 else "train"}
        for i in range(20)
    ]
    path = write_rows(tmp_path / "d.jsonl", rows)
    task = file_mixture(path, "level", split_column="split")
    assert task.categories == ("0", "1")  # values compared as text
    assert sorted(p.answer for p in task.eval_problems()) == ["0", "1", "2", "3"]
    with pytest.raises(ValueError, match="no row of .* has 'level' = '7'"):
        FileTask(path, category_column="level", category="7")
    with pytest.raises(ValueError, match="go together"):
        FileTask(path, category_column="level")
    with pytest.raises(ValueError, match="column 'domain' not found"):
        file_mixture(path, "domain")


def test_trainer_with_dump_over_a_file_column(tmp_path):
    rows = [{"prompt": f"Say {i}", "answer": str(i), "src": "ab"[i % 2]} for i in range(40)]
    path = write_rows(tmp_path / "d.jsonl", rows)
    cfg = tiny_config(
        tmp_path / "run",
        steps=2,
        task={"name": "file", "path": path, "category_column": "src", "level": 1},
        curriculum={"name": "dump"},
    )
    del cfg["task"]["level"]
    train(build_config(cfg))
    row = step_rows(tmp_path / "run")[2]
    assert row["curriculum/prob/a"] + row["curriculum/prob/b"] == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="curriculum: .* has 1"):
        one = [{**r, "src": "a"} for r in rows]
        cfg["task"]["path"] = write_rows(tmp_path / "one.jsonl", one)
        cfg["logging"]["run_dir"] = str(tmp_path / "one")
        train(build_config(cfg))


def test_config_category_column():
    cfg = build_config(
        {
            "task": {"name": "file", "path": "d.jsonl", "category_column": "src"},
            "curriculum": {"name": "sec"},
        }
    )
    assert cfg.task.category_column == "src"
    with pytest.raises(ConfigError, match="only applies to the file task"):
        build_config({"task": {"category_column": "src"}})
