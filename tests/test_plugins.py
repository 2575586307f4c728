"""A user's own parts, registered in a module outside the package, are selected from YAML,
trained, resumed and listed (issue 24): the config reads the registries."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rlvr import algorithms, cli
from rlvr.config import ConfigError, build_config, load_config
from rlvr.logging import read_metrics
from rlvr.plugins import PluginError, resolve_plugin
from rlvr.trainer import train


@pytest.fixture(autouse=True)
def _registrations_end_with_the_test():
    """The parts a test's plug-in registers are removed after it: later tests in this process
    list, and loop over, the built-in parts only (e.g. every registered policy loss)."""
    from rlvr.curriculum import CURRICULA
    from rlvr.registries import algorithm_parts

    registries = [*algorithm_parts().values(), CURRICULA]
    saved = [(r, dict(r), dict(r.descriptions)) for r in registries]
    yield
    for registry, entries, descriptions in saved:
        registry.clear()
        registry.update(entries)
        registry.descriptions.clear()
        registry.descriptions.update(descriptions)


PLUGIN = '''
"""A rank-based advantage and a scaled clipped loss: a user's parts, outside rlvr."""
import torch

from rlvr.algorithms import (
    AdvantageInputs, AdvantageOutput, clipped_policy_loss, register_advantage,
    register_policy_loss,
)


@register_advantage("rank_test")
def rank(inputs: AdvantageInputs, spread: float = 1.0) -> AdvantageOutput:
    """A_i = spread * (rank of r_i in its group / (G - 1) - 1/2)."""
    out = torch.zeros_like(inputs.rewards)
    for g in inputs.group_ids.unique():
        rows = (inputs.group_ids == g).nonzero().squeeze(-1)
        ranks = inputs.rewards[rows].argsort().argsort().float()
        out[rows] = spread * (ranks / max(len(rows) - 1, 1) - 0.5)
    return AdvantageOutput(out)


@register_policy_loss("scaled_token_test", summary="PPO clip times a constant")
def scaled(logp, old_logp, advantages, mask, *, clip_low, clip_high, dual_clip, scale=1.0):
    loss, info = clipped_policy_loss(logp, old_logp, advantages, clip_low, clip_high, dual_clip)
    return scale * loss, info
'''


def _config(tmp_path: Path, steps: int) -> Path:
    """A plug-in and a config beside it, in a directory of their own."""
    folder = tmp_path / "experiment"
    folder.mkdir(exist_ok=True)
    (folder / "my_parts.py").write_text(textwrap.dedent(PLUGIN))
    cfg = {
        "plugins": ["my_parts"],
        "model": {"name": "tiny-random-llama"},
        "task": {"name": "arithmetic", "level": 1, "n_eval": 8},
        "rollout": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 8},
        "reward": {"function": "rewards_for_tests:letter_fraction"},
        "algorithm": {
            "preset": "grpo",
            "beta": 0.0,
            "advantage": "rank_test",
            "policy_loss": "scaled_token_test",
            "params": {"advantage": {"spread": 2.0}, "policy_loss": {"scale": 0.5}},
        },
        "train": {"steps": steps, "lr": 1e-3, "threads": 1, "autocast": "fp32"},
        "eval": {"before": False, "after": False},
        "logging": {"run_dir": str(tmp_path / "run"), "progress": False, "tensorboard": False},
        "checkpoint": {"every": 1},
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_plugins_parts_train_resume_and_are_listed(tmp_path, monkeypatch):
    path = _config(tmp_path, steps=2)
    monkeypatch.chdir(tmp_path)  # not the config's directory: the plug-in is found beside it
    cfg = load_config(path)
    assert cfg.plugins == [str((path.parent / "my_parts.py").resolve())]
    summary = train(cfg)
    assert summary["steps"] == 2
    rows = [r for r in read_metrics(tmp_path / "run") if "policy/loss" in r]
    assert len(rows) == 2 and all("advantages/abs_mean" in r for r in rows)
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["algorithm"]["advantage"]["name"] == "rank_test"
    assert saved["plugins"] == cfg.plugins  # the resume below finds it again from here

    resumed = load_config(tmp_path / "run" / "config.yaml", ["train.steps=3"])
    assert train(resumed, resume=tmp_path / "run")["steps"] == 3
    assert [r["step"] for r in read_metrics(tmp_path / "run") if "policy/loss" in r] == [1, 2, 3]

    result = CliRunner().invoke(
        cli.app, ["algorithms", "--config", str(tmp_path / "run")], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "rank_test" in result.output and "scaled_token_test" in result.output


def test_unknown_names_are_refused_with_the_registered_ones(tmp_path):
    with pytest.raises(ConfigError, match="unknown advantage estimator 'nope'.*registered: .*grpo"):
        build_config({"algorithm": {"advantage": "nope"}})
    with pytest.raises(ConfigError, match="unknown policy loss 'nope'; registered: .*cispo"):
        build_config({"algorithm": {"policy_loss": "nope"}})
    with pytest.raises(
        ConfigError, match="unknown preset 'nope'; registered: aapo, alol, cispo, copg, dapo"
    ):
        build_config({"algorithm": {"preset": "nope"}})
    with pytest.raises(ConfigError, match="unknown credit rule 'nope'"):
        build_config({"algorithm": {"credit": "nope"}})
    with pytest.raises(ConfigError, match="unknown group selector 'nope'.*pass_rate"):
        build_config({"algorithm": {"group_selector": "nope"}})


def test_params_are_checked_against_the_parts_signature():
    with pytest.raises(ConfigError, match="advantage: unknown parameter.*accepts: eps"):
        build_config({"algorithm": {"advantage": {"epsilon": 1.0}}})
    with pytest.raises(ConfigError, match="advantage: beta is set by rlvr"):
        build_config({"algorithm": {"preset": "ppo", "advantage": {"beta": 1.0}}})
    with pytest.raises(ConfigError, match="objective: 'policy_gradient' takes no parameters"):
        build_config({"algorithm": {"objective": {"x": 1}}})
    with pytest.raises(ConfigError, match="algorithm.value.x: unknown key"):
        build_config({"algorithm": {"value": {"x": 1}}})
    cfg = build_config({"algorithm": {"advantage": {"eps": 0.01}}})
    assert dict(cfg.algorithm.resolve().advantage.params) == {"eps": 0.01}
    flat = build_config({"algorithm": {"params": {"advantage": {"eps": 0.01}}}})  # older form
    assert flat.algorithm.resolve() == cfg.algorithm.resolve()


def test_a_missing_plugin_names_where_it_was_looked_for(tmp_path):
    with pytest.raises(ConfigError, match="no module of that name on sys.path"):
        build_config({"plugins": ["no_such_plugin_module_xyz"]}, base_dir=tmp_path)
    with pytest.raises(PluginError, match=f"no such file \\(looked in {tmp_path}\\)"):
        resolve_plugin("missing.py", tmp_path)
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match="broken.py.* raised RuntimeError: boom"):
        build_config({"plugins": ["broken"]}, base_dir=tmp_path)


def test_relative_data_paths_are_read_from_the_config_directory(tmp_path, monkeypatch):
    folder = tmp_path / "cfg"
    folder.mkdir()
    (folder / "rows.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n')
    (folder / "run.yaml").write_text(
        yaml.safe_dump({"task": {"name": "file", "path": "rows.jsonl"}})
    )
    monkeypatch.chdir(tmp_path)
    assert load_config(folder / "run.yaml").task.path == str((folder / "rows.jsonl").resolve())
    (folder / "bad.yaml").write_text(yaml.safe_dump({"task": {"name": "file", "path": "no.jsonl"}}))
    with pytest.raises(ConfigError, match=f"next to the config \\({folder.resolve()}\\)"):
        load_config(folder / "bad.yaml")
    # a path given on the command line replaces the file's, which is then never looked for
    given = str(folder / "rows.jsonl")
    assert load_config(folder / "bad.yaml", [f"task.path={given}"]).task.path == given


def test_pass_rate_selector_keeps_groups_of_intermediate_difficulty():
    import torch

    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    group_ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
    # pass rates 1, 1/4, 0
    kept = algorithms.pass_rate_band(rewards, group_ids, low=0.1, high=0.9)
    assert kept.tolist() == [False, True, False]
    acc = algorithms.GroupAccumulator(
        3, 1, select=lambda r, g: algorithms.pass_rate_band(r, g, low=0.1, high=0.9)
    )
    assert acc.add(rewards, group_ids).tolist() == [4, 5, 6, 7]


def test_installed_packages_register_parts_through_the_entry_point_group(tmp_path, monkeypatch):
    """A package declaring ``[project.entry-points."rlvr.plugins"]`` is imported once, before
    any config is checked (here a distribution made on disk, as pip would install it)."""
    from rlvr import plugins

    (tmp_path / "ep_parts.py").write_text(
        "from rlvr.algorithms import register_kl\n"
        "@register_kl('half_k1_ep_test')\n"
        "def half_k1(logp, ref_logp):\n"
        "    return 0.5 * (logp - ref_logp)\n"
    )
    info = tmp_path / "ep_parts-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-parts\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[rlvr.plugins]\nparts = ep_parts\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugins, "_entry_points_loaded", False)
    cfg = build_config({"algorithm": {"kl": {"estimator": "half_k1_ep_test", "beta": 0.1}}})
    assert cfg.algorithm.resolve().kl.estimator == "half_k1_ep_test"
    assert "half_k1_ep_test" in algorithms.KL_ESTIMATORS


def test_curricula_environments_and_rewards_are_checked_when_a_run_starts(tmp_path, monkeypatch):
    from rlvr.curriculum import CURRICULA, register_curriculum
    from rlvr.curriculum.sequential import Sequential
    from rlvr.registries import check_config

    with pytest.raises(ConfigError, match="curriculum.name: unknown curriculum 'nope'; regis"):
        check_config(build_config({"curriculum": {"name": "nope"}}))
    with pytest.raises(ConfigError, match="env.name: unknown environment 'nope'; registered: "):
        check_config(build_config({"env": {"name": "nope"}}))
    with pytest.raises(ConfigError, match="reward.terms.1.name: unknown reward 'nope'.*math"):
        check_config(build_config({"reward": {"terms": [{"name": "task"}, {"name": "nope"}]}}))

    # registered for this test only (the CLI's listing tests may run after it in this process)
    monkeypatch.setitem(CURRICULA, "every_other_test", None)
    del CURRICULA["every_other_test"]

    @register_curriculum("every_other_test", "every other problem of the task's stream")
    def every_other(task, seed, stride: int = 2):
        sampler = Sequential(task)
        sampler.position = seed % stride
        return sampler

    check_config(
        build_config({"curriculum": {"name": "every_other_test", "params": {"stride": 3}}})
    )
    with pytest.raises(ConfigError, match="curriculum.params: unknown parameter.*accepts: stride"):
        check_config(build_config({"curriculum": {"name": "every_other_test", "params": {"s": 3}}}))
