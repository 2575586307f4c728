"""Other projects' tasks and environments, run unchanged and named ``PREFIX<id>``: the one table
of their name families (:data:`ECOSYSTEMS`). An ecosystem declares its task and its
environment together: the ``module:attr`` that makes each from an id (registered as the family
``PREFIX<placeholder>`` of :data:`rlvr.catalog.TASKS` and :data:`rlvr.catalog.ENVS`), what each
is, and which environment plays its task's problems; the config's checks (:mod:`rlvr.config`)
read the same table.
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
        environment: the ``module:attr`` of the environment class (or factory) that
            ``env.name: PREFIX<id>`` makes, or None (no environment of that name).
        plays_task: the ``env.name`` that plays its task's episodes: ``"same"`` (the task's
            own name), another environment's name, or None (its task needs no environment).
        make_task: the ``module:attr`` of ``make_task(id, **task_options) -> Task``, or None.
        about_task: one line on its task.
        about_environment: one line on its environment.
    """

    prefix: str
    placeholder: str
    task: Literal["problems", "episodes"] | None
    environment: str | None
    plays_task: str | None = None
    make_task: str | None = None
    about_task: str = ""
    about_environment: str = ""

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
    Ecosystem(
        "reasoning_gym:",
        "<name>",
        "problems",
        None,
        make_task="rlvr.data.reasoning_gym:ReasoningGymTask",
        about_task="a reasoning-gym dataset, e.g. reasoning_gym:chain_sum, scored by its own "
        "verifier (ReasoningGymTask; needs `pip install reasoning-gym`)",
    ),
    Ecosystem(
        "textarena:",
        "<env_id>",
        "episodes",
        None,
        plays_task="textarena",
        make_task="rlvr.data.textarena:textarena_task",
        about_task="labelled games for env textarena (TextArenaTask)",
    ),
    Ecosystem(
        "gem:",
        "<env_id>",
        "episodes",
        "rlvr.envs.gem:GemEnv",
        plays_task="same",
        make_task="rlvr.data.textarena:gem_task",
        about_task="labelled episodes for env gem:<env_id> (a GEM environment)",
        about_environment="a GEM environment, e.g. gem:game:GuessTheNumber-v0-easy; GEM's tools "
        "by params.wrappers, e.g. [python_tool] (rlvr[gem], docs/agents.md)",
    ),
    Ecosystem(
        "openenv:",
        "<URL>",
        "episodes",
        "rlvr.envs.openenv_harness:openenv_environment",
        plays_task="same",
        make_task="rlvr.data.textarena:openenv_task",
        about_task="labelled episodes for env openenv:<URL> (an OpenEnv server)",
        about_environment="an OpenEnv server's environment, e.g. openenv:http://127.0.0.1:8000; "
        "params.harness: openenv plays an MCP one with OpenEnv's own agent loop (rlvr[openenv])",
    ),
    Ecosystem(
        "verifiers:",
        "<taskset>",
        "problems",
        "rlvr.envs.verifiers_env:verifiers_environment",
        make_task="rlvr.data.verifiers_tasks:verifiers_task",
        about_task="a verifiers taskset's tasks, scored by its own rewards (VerifiersTask)",
        about_environment="a verifiers taskset's task, scored by its rewards, e.g. "
        "verifiers:my_taskset (with task.name: verifiers:my_taskset)",
    ),
    Ecosystem(
        "skyrl_gym:",
        "<env_id>",
        None,
        "rlvr.envs.skyrl:SkyRLGymEnv",
        about_environment="a SkyRL-gym environment on the task's rows, e.g. skyrl_gym:gsm8k "
        "(rlvr[skyrl])",
    ),
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
