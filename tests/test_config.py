"""Run config: defaults, YAML/TOML/JSON files, --set overrides, error messages, round trip."""

import re

import pytest
import yaml

from rlvr.config import (
    Config,
    ConfigError,
    build_config,
    load_config,
    parse_override,
    read_file,
    save_config,
)

YAML_TEXT = """\
model:
  name: tiny-random-llama
  system_prompt: You are a careful calculator.
task:
  name: arithmetic
  level: 1
  n_eval: 8
rollout:
  group_size: 2
  prompts_per_step: 3
  temperature: 0.7
algorithm:
  preset: dapo
  kl: {beta: 0.0}
train:
  steps: 7
  lr: 2.0e-5
  betas: [0.9, 0.95]
checkpoint:
  every: 10
"""

TOML_TEXT = """\
[model]
name = "tiny-random-llama"

[task]
name = "arithmetic"
level = 4
n_eval = 16

[algorithm]
preset = "rloo"
policy_loss = {clip_high = 0.3}

[train]
steps = 3
lr = 1e-4
lr_schedule = "cosine"
betas = [0.8, 0.9]

[logging]
tensorboard = false
"""


# ---------------------------------------------------------------- defaults and files


def test_defaults_validate() -> None:
    cfg = load_config()
    assert cfg == Config()
    assert cfg == build_config({})
    assert cfg.model.name == "smollm2-135m-instruct"
    assert cfg.model.system_prompt is None
    assert cfg.task.name == "arithmetic" and cfg.task.level == 2 and cfg.task.n_eval == 200
    assert cfg.rollout.group_size == 8 and cfg.rollout.max_new_tokens == 128
    assert cfg.algorithm.preset == "grpo" and cfg.algorithm.policy_loss.clip_high is None
    assert cfg.train.steps == 50 and cfg.train.lr == 1e-5 and cfg.train.betas == (0.9, 0.999)
    assert cfg.eval.n_prompts == 100 and cfg.logging.run_dir is None
    assert cfg.checkpoint.every == 25 and cfg.checkpoint.keep == 2
    # Config() re-validates to itself
    assert Config.model_validate(cfg.model_dump()) == cfg


def test_yaml_file_loads(tmp_path) -> None:
    for suffix in (".yaml", ".yml"):
        path = tmp_path / f"run{suffix}"
        path.write_text(YAML_TEXT)
        cfg = load_config(path)
        assert cfg.model.name == "tiny-random-llama"
        assert cfg.model.system_prompt == "You are a careful calculator."
        assert cfg.task.level == 1 and cfg.task.n_eval == 8
        assert cfg.rollout.group_size == 2 and cfg.rollout.prompts_per_step == 3
        assert cfg.rollout.temperature == 0.7
        assert cfg.algorithm.preset == "dapo" and cfg.algorithm.kl.beta == 0.0
        assert cfg.train.steps == 7 and cfg.train.lr == 2e-5 and cfg.train.betas == (0.9, 0.95)
        assert cfg.checkpoint.every == 10
        # untouched fields keep their defaults
        assert cfg.rollout.max_new_tokens == 128 and cfg.eval == Config().eval


def test_toml_file_loads(tmp_path) -> None:
    path = tmp_path / "run.toml"
    path.write_text(TOML_TEXT)
    cfg = load_config(str(path))
    assert cfg.model.name == "tiny-random-llama"
    assert cfg.task.level == 4 and cfg.task.n_eval == 16
    assert cfg.algorithm.preset == "rloo" and cfg.algorithm.policy_loss.clip_high == 0.3
    assert cfg.train.steps == 3 and cfg.train.lr == 1e-4 and cfg.train.lr_schedule == "cosine"
    assert cfg.train.betas == (0.8, 0.9)
    assert cfg.logging.tensorboard is False


def test_json_and_empty_yaml_files(tmp_path) -> None:
    path = tmp_path / "run.json"
    path.write_text('{"train": {"steps": 4}, "task": {"level": 5}}')
    cfg = load_config(path)
    assert cfg.train.steps == 4 and cfg.task.level == 5
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing set\n")
    assert load_config(empty) == Config()


def test_missing_file_error(tmp_path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=r"config file not found: .*nope\.yaml"):
        load_config(missing)


def test_unsupported_extension_error(tmp_path) -> None:
    path = tmp_path / "run.ini"
    path.write_text("[train]\nsteps = 2\n")
    with pytest.raises(ConfigError, match=r"run\.ini.*expected a \.yaml, \.yml, \.toml or \.json"):
        load_config(path)


def test_top_level_must_be_mapping(tmp_path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- train\n- steps\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        read_file(path)


# ---------------------------------------------------------------- --set overrides


def test_parse_override_yaml_scalars() -> None:
    assert parse_override("algorithm.clip_high=0.28") == ("algorithm.clip_high", 0.28)
    assert parse_override("train.steps=2") == ("train.steps", 2)
    assert parse_override("model.system_prompt=null") == ("model.system_prompt", None)
    assert parse_override("logging.progress=false") == ("logging.progress", False)
    assert parse_override("model.name=tiny-random-llama") == ("model.name", "tiny-random-llama")
    assert parse_override(" train.lr = 1.0e-3") == ("train.lr", 0.001)
    assert parse_override("train.betas=[0.9, 0.95]") == ("train.betas", [0.9, 0.95])
    assert parse_override("task.prompt_template=a=b") == ("task.prompt_template", "a=b")
    assert parse_override("model.system_prompt=") == ("model.system_prompt", "")
    with pytest.raises(ConfigError, match=r"KEY=VALUE.*'train\.steps'"):
        parse_override("train.steps")


def test_overrides_apply_with_types(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(YAML_TEXT)
    cfg = load_config(
        path,
        overrides=[
            "algorithm.policy_loss.clip_high=0.28",
            "train.steps=2",
            "model.system_prompt=null",
            "eval.every=3",
            "train.betas=[0.5, 0.6]",
        ],
    )
    clip_high = cfg.algorithm.policy_loss.clip_high
    assert clip_high == 0.28 and isinstance(clip_high, float)
    assert cfg.train.steps == 2 and isinstance(cfg.train.steps, int)
    assert cfg.model.system_prompt is None  # the file set it; the override cleared it
    assert cfg.eval.every == 3  # a section the file did not have
    assert cfg.train.betas == (0.5, 0.6)
    assert cfg.train.lr == 2e-5 and cfg.algorithm.preset == "dapo"  # the file's other values


def test_overrides_on_defaults_and_later_wins() -> None:
    cfg = load_config(None, ["train.steps=2", "train.steps=9", "task.level=6"])
    assert cfg.train.steps == 9 and cfg.task.level == 6
    data = {"train": {"steps": 5}}
    build_config(data, ["train.steps=1"])
    assert data == {"train": {"steps": 5}}  # the input dict is not modified


def test_override_into_non_section() -> None:
    with pytest.raises(ConfigError, match=r"--set train\.steps\.x: 'steps' is not a section"):
        build_config({"train": {"steps": 2}}, ["train.steps.x=1"])


# ---------------------------------------------------------------- error messages


def test_unknown_key_names_dotted_path_and_allowed_keys() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, ["train.stepz=2"])
    msg = str(info.value)
    assert "train.stepz: unknown key" in msg
    allowed = re.search(r"allowed keys here: (.*)", msg).group(1).split(", ")
    assert "steps" in allowed and "lr" in allowed and "micro_batch_size" in allowed
    assert allowed == sorted(allowed)


def test_unknown_key_in_file_and_unknown_section(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("rollout:\n  group_sise: 4\n")
    with pytest.raises(ConfigError, match=r"rollout\.group_sise: unknown key.*group_size"):
        load_config(path)
    with pytest.raises(ConfigError) as info:
        build_config({"trian": {"steps": 2}})
    msg = str(info.value)
    assert "trian: unknown key" in msg
    for section in ("algorithm", "checkpoint", "eval", "model", "train"):
        assert section in msg


def test_wrong_type_names_field() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, ["train.steps=abc"])
    msg = str(info.value)
    assert "train.steps:" in msg and "integer" in msg and "'abc'" in msg


def test_out_of_range_names_field() -> None:
    with pytest.raises(ConfigError, match=r"task\.level: .*less than or equal to 8.*got 9"):
        build_config({"task": {"level": 9}})
    with pytest.raises(ConfigError, match=r"rollout\.group_size: .*greater than or equal to 1"):
        build_config({}, ["rollout.group_size=0"])


def test_a_group_of_one_is_refused_where_the_update_compares_a_group() -> None:
    with pytest.raises(ConfigError, match=r"group_size is 1 but algorithm advantage 'grpo'"):
        build_config({}, ["rollout.group_size=1"])
    with pytest.raises(ConfigError, match=r"group_size is 1 .*'rloo'.*group_size >= 2"):
        build_config({"algorithm": {"preset": "rloo"}}, ["rollout.group_size=1"])
    with pytest.raises(ConfigError, match=r"group_size is 1 .*'passk'"):
        build_config({"algorithm": {"advantage": "passk"}}, ["rollout.group_size=1"])
    with pytest.raises(ConfigError, match=r"objective 'dpo' pairs the samples of a group"):
        build_config({"algorithm": {"preset": "online_dpo"}}, ["rollout.group_size=1"])
    for preset in ("remax", "rft", "sft"):  # their own baseline, or no reward differences
        build_config({"algorithm": {"preset": preset}}, ["rollout.group_size=1"])
    build_config({"algorithm": {"advantage": "reinforce"}}, ["rollout.group_size=1"])


def test_several_errors_reported_together() -> None:
    with pytest.raises(ConfigError) as info:
        build_config({}, ["train.steps=abc", "rollout.temprature=1.0"])
    msg = str(info.value)
    assert "train.steps:" in msg and "rollout.temprature: unknown key" in msg


def test_bad_literal_names_field_and_allowed_values() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, ["algorithm.preset=foo"])
    msg = str(info.value)
    assert "algorithm.preset:" in msg and "'foo'" in msg
    assert (
        "registered: aapo, alol, cispo, copg, dapo, disco, dno, dpo, dpo_norm, dr_grpo" in msg
        and "rloo" in msg
    )


def test_file_task_needs_path(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"task\.path is required when task\.name is 'file'"):
        load_config(None, ["task.name=file"])
    data = tmp_path / "d.jsonl"
    cfg = load_config(None, ["task.name=file", f"task.path={data}"])
    assert cfg.task.name == "file" and cfg.task.path == str(data)


def test_validate_assignment() -> None:
    cfg = Config()
    with pytest.raises(ValueError, match="steps"):
        cfg.train.steps = 0


# ---------------------------------------------------------------- round trip


def test_save_then_load_round_trips(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(YAML_TEXT)
    cfg = load_config(path, ["algorithm.policy_loss.clip_high=0.28", "logging.run_dir=runs/x"])
    out = tmp_path / "saved" / "config.yaml"
    out.parent.mkdir()
    save_config(cfg, out)
    again = load_config(out)
    assert again == cfg
    assert again.train.betas == (0.9, 0.95)
    saved = yaml.safe_load(out.read_text())
    assert list(saved) == list(Config.model_fields)  # every section, in order
    assert saved["algorithm"]["policy_loss"]["clip_high"] == 0.28
    assert saved["logging"]["run_dir"] == "runs/x"
    assert saved["model"]["system_prompt"] == "You are a careful calculator."
    default_out = tmp_path / "default.yaml"
    save_config(Config(), default_out)
    assert load_config(default_out) == Config()


def test_every_shipped_config_validates() -> None:
    """configs/*.yaml load as they are (a renamed key would break `rlvr train configs/...`)."""
    from pathlib import Path

    from rlvr.config import load_config

    shipped = sorted((Path(__file__).parent.parent / "configs").glob("*.yaml"))
    assert len(shipped) >= 7
    for path in shipped:
        load_config(path)
    ray_local = load_config(Path(__file__).parent.parent / "configs" / "ray_local.yaml")
    assert ray_local.distributed.backend == "ray" and ray_local.distributed.rollout_workers == 2


def test_the_help_of_a_key_naming_a_part_lists_every_registered_part(monkeypatch):
    """``rlvr config show``'s help for a key that names a registered part lists the registry
    as it is (no hand-written list to drift), a part registered later included."""
    from rlvr import algorithms
    from rlvr.config import REGISTERED, describe, registered

    monkeypatch.setitem(algorithms.ADVANTAGES, "my_estimator", object())
    helps = {key: text for key, _, _, text in describe(build_config({}))}
    assert set(REGISTERED) <= set(helps)
    for key in REGISTERED:
        names = registered(key)
        assert names, key
        listed = helps[key].split("registered: ")[1].split(", ")
        assert listed == sorted(names), key
    assert "my_estimator" in helps["algorithm.advantage.name"]
