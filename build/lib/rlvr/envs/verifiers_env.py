"""A verifiers taskset (Prime Intellect's ``verifiers`` 0.4) played as an rlvr environment:
``env.name: verifiers:<taskset id>`` with ``task.name: verifiers:<the same id>``
(:class:`rlvr.data.verifiers_tasks.VerifiersTask`).

One step: ``reset`` prompts with the task's prompt (after the run's system prompt), and the
policy's reply is scored by the task's own rewards on the trace verifiers' rollout would build;
the reward is their weighted sum, each one logged in the step's info (``verifiers_rewards``),
``success`` when the sum reaches 1. The same taskset without ``env`` trains as a plain task.

``env.params.harness: rlvr`` plays the taskset's episodes as verifiers does instead: its own
environment (its ``vf.Env``, which may play user turns) runs each episode with rlvr's in-process
harness against the recording endpoint (:mod:`rlvr.envs.verifiers_harness`).
"""

from __future__ import annotations

from typing import Any

from rlvr.data.base import Problem, Task
from rlvr.envs.base import EnvError, Message, StepResult

HARNESSES = ("rlvr",)


def verifiers_environment(
    env_id: str, task: Task, system_prompt: str | None = None, harness: str | None = None
) -> Any:
    """The environment of ``env.name: verifiers:<env_id>``: a one-step :class:`VerifiersEnv`,
    or with ``harness: rlvr`` a :class:`~rlvr.envs.verifiers_harness.VerifiersProgram` (the
    taskset's own episodes; ``system_prompt`` is then the taskset's)."""
    env = VerifiersEnv(env_id, task, system_prompt)  # checks the task
    if harness is None:
        return env
    if harness not in HARNESSES:
        raise EnvError(f"verifiers:{env_id}: harness {harness!r}; expected one of {HARNESSES}")
    from rlvr.envs.verifiers_harness import VerifiersProgram

    return VerifiersProgram(env_id, task)


class VerifiersEnv:
    """A verifiers task as a one-step environment (see the module docstring).

    Args:
        env_id: the taskset's id (``task.name`` must be ``verifiers:<the same id>``).
        task: the run's task (a :class:`~rlvr.data.verifiers_tasks.VerifiersTask`).
        system_prompt: the run's ``model.system_prompt``.
    """

    def __init__(self, env_id: str, task: Task, system_prompt: str | None = None) -> None:
        if getattr(task, "name", None) != f"verifiers:{env_id}" or not hasattr(task, "rewards"):
            raise EnvError(
                f"env verifiers:{env_id} plays the taskset's own tasks: set task.name: "
                f"verifiers:{env_id}"
            )
        self.env_id, self.task, self.system_prompt = env_id, task, system_prompt
        self.problem: Problem | None = None

    def reset(self, problem: Problem, seed: int) -> list[Message]:
        self.problem = problem
        return problem.messages(self.system_prompt)

    def step(self, action_text: str) -> StepResult:
        if self.problem is None:
            raise EnvError(f"verifiers:{self.env_id}: no episode in progress; call reset first")
        reward, parts = self.task.rewards(action_text, self.problem)  # type: ignore[attr-defined]
        info = {"verifiers_rewards": parts, "success": reward >= 1.0}
        self.problem = None
        return StepResult([], reward, terminated=True, info=info)
