"""``single_turn``: a plain task as a one-step environment (the policy answers once, the task's
verifier scores it). With ``algorithm.credit.name: broadcast`` it trains exactly as the same task
without an environment does (tested: tests/test_envs_episodes.py)."""

from __future__ import annotations

from rlvr.data.base import Problem, Task
from rlvr.envs.base import Message, StepResult


class SingleTurnEnv:
    """Prompts with the problem's chat; one answer, scored by ``task.score``, ends it."""

    def __init__(self, task: Task, system_prompt: str | None = None) -> None:
        self.task = task
        self.system_prompt = system_prompt

    def reset(self, problem: Problem, seed: int) -> list[Message]:
        self.problem = problem
        return problem.messages(self.system_prompt)

    def step(self, action_text: str) -> StepResult:
        reward = float(self.task.score(action_text, self.problem))
        return StepResult([], reward, terminated=True, info={"success": reward >= 1.0})
