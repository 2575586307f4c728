"""The nested algorithm schema: presets and configs in one shape, resolved once into one frozen
:class:`rlvr.algorithms.Algorithm`; the flat keys of older configs read into it with a one-line
note, checked on every shipped config."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from test_docs import SHIPPED

from rlvr import algorithms
from rlvr.algorithms.schema import PARTS, SCALARS, part_fields
from rlvr.config import (
    AlgorithmConfig,
    ConfigError,
    build_config,
    load_config,
    read_file,
)
from rlvr.flat_config import FLAT_KEYS, FLAT_PARAMS, ROLLOUT_STAGES

NOTE = "note: this config uses the flat algorithm keys of older rlvr"


@pytest.fixture(autouse=True)
def _every_note(monkeypatch):
    """The note is printed once per process and set of keys: here, once per test."""
    monkeypatch.setattr("rlvr.flat_config._NOTED", set())


def to_flat(data: dict) -> dict:
    """The flat form an older rlvr read of a whole config in the nested form (the inverse of
    :func:`rlvr.flat_config.nest_algorithm`, written here from the key tables alone)."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    nested = out.pop("algorithm", None) or {}
    flat: dict = {}
    place = {new: old for old, new in FLAT_KEYS.items()}
    part_of_params = {part: key for key, part in FLAT_PARAMS.items()}
    for key, value in nested.items():
        if key == "stages":
            for stage in value:
                settings = {k: v for k, v in stage.items() if k != "name"}
                if stage["name"] == "group_filter":
                    flat["group_filter"] = settings.pop("criterion")
                    flat["group_filter_oversample"] = settings.pop("oversample")
                    if settings:
                        flat.setdefault("params", {})["group_filter"] = settings
                    continue
                for old, (name, setting) in ROLLOUT_STAGES.items():
                    if name == stage["name"] and setting in settings:
                        out.setdefault("rollout", {})[old] = settings[setting]
        elif not isinstance(value, dict):
            flat[key] = value
        else:
            for field, v in value.items():
                if f"{key}.{field}" in place:
                    flat[place[f"{key}.{field}"]] = v
                else:
                    flat.setdefault("params", {}).setdefault(part_of_params[key], {})[field] = v
    out["algorithm"] = flat
    return out


def test_every_flat_key_has_a_nested_place():
    """Each flat key names a part's own field, or a keyword argument of the function it
    selects (GAE's gamma and lam, REINFORCE's baseline): never a key nothing reads."""
    params_of = {"advantage": {"baseline", "gamma", "lam"}}
    for old, new in FLAT_KEYS.items():
        part, field = new.split(".")
        assert field in part_fields(part) or field in params_of.get(part, ()), old
    assert set(FLAT_PARAMS.values()) <= set(PARTS)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_config_reads_the_same_in_its_flat_form(name, capsys):
    """Every config in configs/ and every repro arm is written in the nested form (it loads
    without a note); written in the flat form of older rlvr it loads to the same algorithm,
    with one note line naming each flat key and its new place."""
    path, overrides = SHIPPED[name]
    nested = load_config(path, overrides)
    assert NOTE not in capsys.readouterr().err
    data = read_file(path)
    for text in overrides:
        key, _, value = text.partition("=")
        node = data
        for part in key.split(".")[:-1]:
            node = node.setdefault(part, {})
        node[key.split(".")[-1]] = yaml.safe_load(value)
    flat = to_flat(data)
    old = build_config(flat, base_dir=Path(path).parent)
    err = capsys.readouterr().err
    assert old.algorithm.resolve() == nested.algorithm.resolve()
    keys = [k for k in flat["algorithm"] if k not in ("preset", *SCALARS)]
    if keys:
        notes = [line for line in err.splitlines() if line.startswith(NOTE)]
        assert len(notes) == 1
        assert all(f"algorithm.{k}" in notes[0] for k in keys)


def test_flat_keys_of_every_part_read_into_the_nested_form(capsys):
    cfg = build_config(
        {
            "algorithm": {
                "preset": "grpo",
                "advantage": "rloo",
                "pos_weight": 0.5,
                "clip_high": 0.28,
                "beta": 0.01,
                "kl_estimator": "k1",
                "entropy_coef": 0.001,
                "top_entropy_rho": 0.5,
                "tis_cap": 2.0,
                "off_policy_mask": 1.0,
                "dynamic_sampling": True,
                "max_draws": 3,
                "overlong_buffer_frac": 0.2,
                "group_filter": "shortest",
                "group_filter_oversample": 2,
                "params": {"policy_loss": {}, "kl_estimator": {}},
                "ppo_epochs": 2,
            },
            "rollout": {"hints": [0.5], "hint_threshold": 0.5, "replay": 1},
        }
    )
    note = capsys.readouterr().err
    assert note.count("\n") == 1 and "algorithm.beta as kl.beta" in note
    assert "rollout.hints as stages hints" in note
    a = cfg.algorithm.resolve()
    assert (a.advantage.name, a.advantage.pos_weight) == ("rloo", 0.5)
    assert (a.policy_loss.clip_high, a.kl.beta, a.kl.estimator) == (0.28, 0.01, "k1")
    assert (a.entropy.coef, a.entropy.top_rho) == (0.001, 0.5)
    assert (a.correction.tis_cap, a.correction.off_policy_mask) == (2.0, 1.0)
    assert (a.select.name, a.select.max_draws, a.overlong.buffer_frac) == ("informative", 3, 0.2)
    assert a.ppo_epochs == 2
    assert [s.name for s in a.stages] == ["hints", "group_filter", "replay"]
    assert dict(a.stages[0].params) == {"fractions": [0.5], "threshold": 0.5}
    assert dict(a.stages[1].params) == {"criterion": "shortest", "oversample": 2}
    assert dict(a.stages[2].params) == {"replayed": 1}
    assert "hints" not in cfg.rollout.model_dump()


def test_a_set_flat_key_overrides_the_nested_files_value(capsys):
    cfg = build_config({"algorithm": {"kl": {"beta": 0.0}}}, overrides=["algorithm.beta=0.1"])
    assert cfg.algorithm.resolve().kl.beta == 0.1
    assert "algorithm.beta as kl.beta" in capsys.readouterr().err


def test_a_part_takes_its_functions_arguments_beside_its_name():
    a = algorithms.resolve(
        "grpo", advantage={"eps": 1e-4}, policy_loss={"name": "sapo", "tau_pos": 2.0}
    )
    assert dict(a.advantage.params) == {"eps": 1e-4}
    assert dict(a.policy_loss.params) == {"tau_pos": 2.0}
    # another function than the preset's: the preset's params were that function's
    sapo = algorithms.get_preset("sapo")
    assert dict(sapo.policy_loss.params) == {"tau_pos": 1.0, "tau_neg": 1.05}
    assert algorithms.resolve("sapo", policy_loss={"name": "token"}).policy_loss.params == {}
    assert dict(algorithms.resolve("sapo", policy_loss={"tau_pos": 3.0}).policy_loss.params) == {
        "tau_pos": 3.0,
        "tau_neg": 1.05,
    }
    with pytest.raises(ValueError, match="advantage: unknown parameter.*gamma.*accepts: eps"):
        algorithms.resolve("grpo", advantage={"gamma": 0.9})
    with pytest.raises(
        ValueError, match="reference: unknown key.*beta; accepted: reset_every, mix"
    ):
        algorithms.resolve("grpo", reference={"beta": 0.1})


def test_the_resolved_algorithm_is_one_frozen_object_with_messages_naming_nested_keys():
    a = algorithms.resolve("dapo")
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.kl.beta = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"kl\.beta must be >= 0"):
        algorithms.resolve("grpo", kl={"beta": -1.0})
    with pytest.raises(ValueError, match=r"select\.max_draws > 1 refills"):
        algorithms.resolve("grpo", select={"max_draws": 3})
    with pytest.raises(ValueError, match=r"unknown algorithm keys \['beta'\]"):
        algorithms.resolve("grpo", beta=0.1)
    assert algorithms.resolve("dapo", select={"name": "all", "max_draws": 1}).select.active is False


def test_presets_are_data_in_the_configs_shape():
    """Every preset written back as a config's parts resolves to itself."""
    for name, preset in algorithms.PRESETS.items():
        shape = algorithms.as_overrides(preset)
        assert set(shape) == {*PARTS, "stages", *SCALARS}
        assert algorithms.resolve(name, **shape) == preset
        section = AlgorithmConfig(preset=name, **shape)
        assert section.resolve() == preset


def test_an_unknown_stage_or_setting_stops_the_run_naming_it(tmp_path):
    from rlvr.trainer.build import resolve_algorithm

    for stages, message in (
        (
            [{"name": "nope"}],
            "unknown draw stage 'nope'; registered: budgets, diver, dra, early_exit, error_correction, group_filter, guidance, hints, prefix_rl",
        ),
        ([{"name": "hints", "fraction": [0.5]}], "unknown setting.*fraction; accepted: fractions"),
        ([{"name": "hints", "fractions": [0.5, 0.2]}], "increasing fractions"),
        ([{"name": "group_filter", "criterion": "shortest"}], "oversample"),
        ([{"name": "replay", "replayed": 4, "buffer": 2}], "replayed <= buffer"),
    ):
        cfg = build_config({"algorithm": {"stages": stages, "correction": {"tis_cap": 2.0}}})
        with pytest.raises(ConfigError, match=message):
            resolve_algorithm(cfg)


def _old_dump(**set_: object) -> dict:
    """The algorithm section as an older rlvr's save_config wrote it: every flat key, null
    where unset, the loop's keys at their defaults, then ``set_``."""
    section: dict = {"preset": "grpo", **dict.fromkeys(FLAT_KEYS)}
    section.update(dynamic_sampling=None, group_filter=None, group_filter_oversample=None)
    section.update(params=None, ppo_epochs=1, minibatches=1, tis_level="token")
    section.update(mis_level="token", entropy_coef_step=1e-4, entropy_coef_max=0.005)
    section.update(credit="broadcast", credit_gamma=1.0, gigpo_weight=1.0, credit_gate=1.0)
    rollout = {"hints": [], "hint_threshold": 1.0, "replay": 0, "replay_buffer": 16}
    return {"algorithm": {**section, **set_}, "rollout": rollout}


def test_an_older_runs_recorded_config_loads_and_resumes_to_the_same_algorithm(tmp_path):
    from rlvr.config import save_config
    from rlvr.rundir import recorded_config

    old = build_config(_old_dump(preset="dapo", clip_high=0.3, params={"advantage": {"eps": 1e-3}}))
    new = build_config(
        {
            "algorithm": {
                "preset": "dapo",
                "policy_loss": {"clip_high": 0.3},
                "advantage": {"eps": 1e-3},
            }
        }
    )
    assert old.algorithm.resolve() == new.algorithm.resolve()
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_old_dump(preset="dapo", clip_high=0.3)))
    assert recorded_config(path)["algorithm"]["policy_loss"]["clip_high"] == 0.3
    bad = _old_dump(policy_loss="dppo_tv", tis_cap=2.0)  # refused now: compared as written
    path.write_text(yaml.safe_dump(bad))
    recorded = recorded_config(path)
    assert recorded["algorithm"]["correction"]["tis_cap"] == 2.0
    assert recorded["algorithm"]["policy_loss"]["name"] == "dppo_tv"
    save_config(old, tmp_path / "again.yaml")  # written back nested, loading to the same
    assert load_config(tmp_path / "again.yaml").algorithm.resolve() == old.algorithm.resolve()


def test_a_flat_set_applies_to_the_nested_place_over_the_file():
    file = {
        "algorithm": {
            "advantage": {"name": "dr_grpo", "normalize": "batch", "pos_weight": 0.5},
            "correction": {"tis_cap": 2.0},
            "stages": [
                {"name": "hints", "fractions": [0.5]},
                {"name": "group_filter", "criterion": "shortest", "oversample": 2},
            ],
        }
    }
    cfg = build_config(file, ["algorithm.advantage=rloo", "algorithm.group_filter_oversample=4"])
    a = cfg.algorithm.resolve()
    assert (a.advantage.name, a.advantage.normalize, a.advantage.pos_weight) == (
        "rloo",
        "batch",
        0.5,
    )
    assert dict(a.stages[1].params) == {"criterion": "shortest", "oversample": 4}
    cfg = build_config(file, ["rollout.hint_threshold=0.5", "algorithm.group_filter=null"])
    a = cfg.algorithm.resolve()
    assert [s.name for s in a.stages] == ["hints"] and a.stages[0].params["threshold"] == 0.5
    assert build_config(file, ["rollout.hints=[]"]).algorithm.resolve().stages[0].name == (
        "group_filter"
    )
    with_replay = build_config(file, ["rollout.replay=2"]).algorithm.resolve()
    assert [s.name for s in with_replay.stages] == ["hints", "group_filter", "replay"]


def test_neutral_flat_values_an_estimator_does_not_take_are_dropped():
    """An older rlvr accepted gamma: 1, lam: 1 and reward_baseline: 0 with any estimator."""
    grpo = build_config(_old_dump(gamma=1.0, lam=1.0, reward_baseline=0.0)).algorithm.resolve()
    assert grpo.advantage.params == {}
    ppo = build_config(_old_dump(preset="ppo", lam=1.0)).algorithm.resolve()
    assert dict(ppo.advantage.params) == {"gamma": 1.0, "lam": 1.0}  # gae takes it: kept
    with pytest.raises(ConfigError, match="unknown parameter.*gamma"):
        build_config(_old_dump(gamma=0.9))  # not neutral: refused, as before
