"""Other projects' tasks and environments, run unchanged and named ``PREFIX<id>``: the one table
of their name families (:data:`ECOSYSTEMS`), read by the config's checks
(:mod:`rlvr.config`), the task registry (:mod:`rlvr.data.registry`) and the environment
registry (:mod:`rlvr.envs.registry`). An ecosystem declares its task and its environment
together: which of the two its names denote, and which environment plays its task's problems.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlvr.registry import Registry


@dataclass(frozen=True)
class Ecosystem:
    """One family of names ``PREFIX<id>``.

    Attributes:
        prefix: e.g. ``"gem:"``.
        placeholder: what follows it, e.g. ``"<env_id>"``.
        task: what ``task.name: PREFIX<id>`` gives: ``"problems"`` (the ecosystem's problems,
            scored by its own verifiers), ``"episodes"`` (labels of the environment's episodes,
            scored by the environment), or None (no task of that name).
        environment: ``env.name: PREFIX<id>`` names one of its environments.
        plays_task: the ``env.name`` that plays its task's episodes: ``"same"`` (the task's
            own name), another environment's name, or None (its task needs no environment).
    """

    prefix: str
    placeholder: str
    task: Literal["problems", "episodes"] | None
    environment: bool
    plays_task: str | None = None

    @property
    def family(self) -> str:
        """The family as listed: ``PREFIX<placeholder>``."""
        return self.prefix + self.placeholder

    def id_of(self, name: str) -> str | None:
        """The ``<id>`` of ``name`` in this family (non-empty), else None."""
        if name.startswith(self.prefix) and len(name) > len(self.prefix):
            return name[len(self.prefix) :]
        return None


ECOSYSTEMS: Registry[Ecosystem] = Registry("ecosystem")
for _ecosystem in (
    Ecosystem("reasoning_gym:", "<name>", "problems", False),
    Ecosystem("textarena:", "<env_id>", "episodes", False, plays_task="textarena"),
    Ecosystem("gem:", "<env_id>", "episodes", True, plays_task="same"),
    Ecosystem("openenv:", "<URL>", "episodes", True, plays_task="same"),
    Ecosystem("verifiers:", "<taskset>", "problems", True),
    Ecosystem("skyrl_gym:", "<env_id>", None, True),
):
    ECOSYSTEMS.add(_ecosystem.prefix.rstrip(":"), _ecosystem)


def ecosystem_of(name: str, what: Literal["task", "environment"]) -> tuple[Ecosystem, str] | None:
    """The ecosystem whose ``what`` ``name`` names (``PREFIX<id>``), and the id; else None."""
    for ecosystem in ECOSYSTEMS.values():
        named = ecosystem.task is not None if what == "task" else ecosystem.environment
        found = ecosystem.id_of(name)
        if named and found is not None:
            return ecosystem, found
    return None


def task_families() -> list[str]:
    """``PREFIX<placeholder>`` of every ecosystem with tasks."""
    return [e.family for e in ECOSYSTEMS.values() if e.task is not None]
