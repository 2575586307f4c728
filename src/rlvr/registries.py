"""Every registry a config selects from, in one place: the check of a config's names when a
run starts (the algorithm's parts are already checked when the config loads, by
:mod:`rlvr.config`; curricula, environments and rewards live above the config's layer, so they
are checked here) and the listing of ``rlvr algorithms``.

Each registry's unknown-name error lists the registered names, plug-ins' included
(:mod:`rlvr.plugins`)."""

from __future__ import annotations

from rlvr import algorithms
from rlvr.catalog import ENVS
from rlvr.config import REGISTERED, Config, ConfigError
from rlvr.curriculum import CURRICULA
from rlvr.registry import Lazy, Registry, check_params
from rlvr.rewards import available_rewards

TASK_REWARDS = ("task", "verifier")
"""Reward names meaning the task's own verifier."""


def check_config(cfg: Config) -> None:
    """ConfigError naming the first key whose name is not registered (the curriculum, the
    environment, a reward term) or whose params its part does not accept."""
    curriculum = CURRICULA.get(cfg.curriculum.name)
    if curriculum is None:
        raise ConfigError(f"curriculum.name: {CURRICULA.unknown(cfg.curriculum.name)}")
    try:
        check_params(curriculum.make, cfg.curriculum.params, "curriculum.params", ("task", "seed"))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    name = cfg.env.name
    if name is not None and name not in ENVS and ":" not in name:
        raise ConfigError(f"env.name: {ENVS.unknown(name)}; or 'module:Class' (your own)")
    named = [(i, t.name) for i, t in enumerate(cfg.reward.terms)]
    named = [(i, n) for i, n in named if n not in TASK_REWARDS and ":" not in n]
    registered = available_rewards() if named else []  # imports the built-in rewards
    for i, name in named:
        if name in registered:
            continue
        raise ConfigError(
            f"reward.terms.{i}.name: unknown reward {name!r}; registered: "
            f"{', '.join(registered)}; or task (the task's verifier), or 'module:function'"
        )


def algorithm_parts() -> dict[str, Registry]:
    """The registries of the algorithm's parts by the config key that selects them
    (:data:`rlvr.config.REGISTERED`), and GFPO's criteria (the group_filter stage's)."""
    parts: dict[str, Registry] = {
        key: Lazy(target).load() for key, target in REGISTERED.items() if key.startswith("algo")
    }
    parts["algorithm.stages group_filter criterion"] = algorithms.GROUP_FILTERS
    return parts
