"""Other projects' name families (``PREFIX<id>``) come from one table: the task registry, the
environment registry and the config's checks all read it."""

from __future__ import annotations

import pytest

from rlvr.config import ConfigError, build_config
from rlvr.data import TASKS, is_task_name
from rlvr.ecosystems import ECOSYSTEMS, ecosystem_of
from rlvr.envs.registry import ENVS


def test_the_registries_list_exactly_the_families_of_the_table():
    for ecosystem in ECOSYSTEMS.values():
        assert (ecosystem.family in TASKS) == (ecosystem.task is not None), ecosystem
        assert (ecosystem.family in ENVS) == (ecosystem.environment is not None), ecosystem
        name = ecosystem.prefix + "x"
        assert is_task_name(name) == (ecosystem.task is not None)
        assert not is_task_name(ecosystem.prefix)  # an empty id names nothing
    assert ecosystem_of("gem:game:GuessTheNumber-v0", "environment")[1] == "game:GuessTheNumber-v0"
    assert ecosystem_of("skyrl_gym:gsm8k", "task") is None  # SkyRL-gym trains on the task's rows


def test_a_task_of_episodes_is_played_by_the_environment_the_table_names():
    build_config({"task": {"name": "gem:game:X-v0"}, "env": {"name": "gem:game:X-v0"}})
    with pytest.raises(ConfigError, match="episodes of env.name: gem:game:X-v0"):
        build_config({"task": {"name": "gem:game:X-v0"}})
    with pytest.raises(ConfigError, match="played by env.name: textarena"):
        build_config({"task": {"name": "textarena:Wordle-v0"}})
    with pytest.raises(ConfigError, match="another ecosystem's reasoning_gym:<name>"):
        build_config({"task": {"name": "nope:x"}})
