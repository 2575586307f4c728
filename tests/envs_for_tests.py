"""User environments for the agent tests (loaded as ``envs_for_tests:Class``, like a user's)."""

from rewards_for_tests import letter_fraction

from rlvr.data import Problem
from rlvr.envs import StepResult


class LetterEnv:
    """One step: the answer scores its fraction of ASCII letters (``letter_fraction``), so a
    one-turn episode must train exactly as the same reward without an environment."""

    def __init__(self, system_prompt: str | None = None) -> None:
        self.system_prompt = system_prompt

    def reset(self, problem: Problem, seed: int) -> list[dict]:
        self.problem = problem
        return problem.messages(self.system_prompt)

    def step(self, action_text: str) -> StepResult:
        return StepResult([], letter_fraction(action_text, self.problem), terminated=True)


class CountdownEnv:
    """Three turns: each action scores its letter fraction; the anchor is the turn index (so
    every group's turns at equal depth share a step group), then the episode ends."""

    def reset(self, problem: Problem, seed: int) -> list[dict]:
        self.problem, self.turn = problem, 0
        return problem.messages()

    def step(self, action_text: str) -> StepResult:
        self.turn += 1
        reward = letter_fraction(action_text, self.problem)
        info = {"anchor": self.turn, "action_valid": bool(action_text)}
        text = f"{3 - self.turn} turns left."
        return StepResult([{"role": "user", "content": text}], reward, self.turn >= 3, info=info)
