"""Environments by name (:data:`rlvr.catalog.ENVS`): the built-in ones, another project's (a
family ``PREFIX<id>`` of :data:`rlvr.ecosystems.ECOSYSTEMS`, e.g. ``gem:<env_id>``), a user's
(:func:`register_environment`) or ``module:Class``, built from the config's ``env.params``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from rlvr.catalog import ENVS
from rlvr.data.base import Task
from rlvr.envs.base import EnvError, Environment, load_environment_class


def register_environment(name: str, description: str) -> Callable[[type], type]:
    """Class decorator: make an environment (:class:`~rlvr.envs.base.Environment`) selectable
    as ``env.name: NAME`` and listed by ``rlvr envs``."""

    def decorator(cls: type) -> type:
        ENVS.add(name, cls, description)
        return cls

    return decorator


def environment_class(name: str) -> Callable[..., Any]:
    """The class (or factory function) of a built-in environment name, an ecosystem's
    (``gem:<env_id>``) or of ``module:Class``."""
    found = ENVS.lookup(name)  # a name, or a family's PREFIX<id>
    if found is not None:
        return ENVS[found[0]]
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
    found = ENVS.lookup(name)
    if found is not None and found[1] is not None:
        kwargs["env_id"] = found[1]
    kwargs.update(params)

    def make() -> Environment:
        return cls(**kwargs)

    try:
        make()
    except TypeError as err:
        raise EnvError(f"env {name!r} with params {params}: {err}") from err
    return make
