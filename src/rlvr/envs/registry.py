"""Environments by name: the built-in ones, another project's (a family ``PREFIX<id>`` of
:data:`rlvr.ecosystems.ECOSYSTEMS`, e.g. ``gem:<env_id>``), or ``module:Class`` (a user's),
built from the config's ``env.params``."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from rlvr.data.base import Task
from rlvr.ecosystems import ecosystem_of
from rlvr.envs.base import EnvError, Environment, load_environment_class
from rlvr.registry import Registry

ENVS: Registry[tuple[str | type, str]] = Registry("environment")
"""Environments by name: (``module:Class`` imported when first used, or the class; what it
is); the built-in ones and those of :func:`register_environment`."""
for _name, _entry in {
    "single_turn": ("rlvr.envs.single_turn:SingleTurnEnv", "the task as a one-step environment"),
    "calculator": (
        "rlvr.envs.calculator:CalculatorEnv",
        "arithmetic with a calc(expression) tool (pair with task arithmetic, level 7 or 8)",
    ),
    "guess_number": (
        "rlvr.envs.guess_number:GuessNumberEnv",
        "find a hidden number from higher/lower feedback (task guess_number)",
    ),
    "textarena": (
        "rlvr.envs.textarena:TextArenaEnv",
        "a TextArena single-player game, params.env_id (pip install 'rlvr[envs]')",
    ),
    "gem:<env_id>": (
        "rlvr.envs.gem:GemEnv",
        "a GEM environment, e.g. gem:game:GuessTheNumber-v0-easy; GEM's tools by "
        "params.wrappers, e.g. [python_tool] (rlvr[gem], docs/agents.md)",
    ),
    "openenv:<URL>": (
        "rlvr.envs.openenv_harness:openenv_environment",
        "an OpenEnv server's environment, e.g. openenv:http://127.0.0.1:8000; params.harness: "
        "openenv plays an MCP one with OpenEnv's own agent loop (rlvr[openenv])",
    ),
    "verifiers:<taskset>": (
        "rlvr.envs.verifiers_env:verifiers_environment",
        "a verifiers taskset's task, scored by its rewards, e.g. verifiers:my_taskset "
        "(with task.name: verifiers:my_taskset)",
    ),
    "skyrl_gym:<env_id>": (
        "rlvr.envs.skyrl:SkyRLGymEnv",
        "a SkyRL-gym environment on the task's rows, e.g. skyrl_gym:gsm8k (rlvr[skyrl])",
    ),
}.items():
    ENVS.add(_name, _entry)


def register_environment(name: str, description: str) -> Callable[[type], type]:
    """Class decorator: make an environment (:class:`~rlvr.envs.base.Environment`) selectable
    as ``env.name: NAME`` and listed by ``rlvr envs``."""

    def decorator(cls: type) -> type:
        ENVS.add(name, (cls, description))
        return cls

    return decorator


def environment_class(name: str) -> Callable[..., Any]:
    """The class (or factory function) of a built-in environment name, an ecosystem's
    (``gem:<env_id>``) or of ``module:Class``."""
    found = ecosystem_of(name, "environment")
    if found is not None:
        name = found[0].family  # the family's entry: gem:<env_id>
    if name in ENVS:
        entry = ENVS[name][0]
        if isinstance(entry, type):
            return entry
        module, _, attr = entry.partition(":")
        return getattr(importlib.import_module(module), attr)
    if ":" not in name:
        raise EnvError(f"env.name: {ENVS.unknown(name)}; or 'module:Class' (your own)")
    return load_environment_class(name)


def env_factory(
    name: str, params: dict[str, Any], task: Task, system_prompt: str | None
) -> Callable[[], Environment]:
    """A function making one fresh environment per episode: ``Class(**params)``, plus ``task``
    and ``system_prompt`` when the constructor takes them and ``params`` does not set them.
    One environment is made here, so bad params fail at start."""
    cls = environment_class(name)
    accepted = inspect.signature(cls).parameters
    kwargs = {k: v for k, v in (("task", task), ("system_prompt", system_prompt)) if k in accepted}
    found = ecosystem_of(name, "environment")
    if found is not None:
        kwargs["env_id"] = found[1]
    kwargs.update(params)

    def make() -> Environment:
        return cls(**kwargs)

    try:
        make()
    except TypeError as err:
        raise EnvError(f"env {name!r} with params {params}: {err}") from err
    return make
