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


class FaultyEnv(CountdownEnv):
    """CountdownEnv whose ``fault`` happens at turn ``at`` (1-based) of the episodes of problems
    whose id ends in one of ``problems`` (every problem when empty): "hang" sleeps ``hang_s``,
    "raise" raises, "nan" gives a NaN reward, "reset" hangs the reset."""

    def __init__(
        self, fault: str = "hang", at: int = 2, problems: tuple = (), hang_s: float = 600.0
    ) -> None:
        self.fault, self.at, self.problems, self.hang_s = fault, at, tuple(problems), hang_s

    def _hit(self) -> bool:
        return not self.problems or self.problem.id.endswith(self.problems)

    def reset(self, problem: Problem, seed: int) -> list[dict]:
        messages = super().reset(problem, seed)
        if self.fault == "reset" and self._hit():
            import time

            time.sleep(self.hang_s)
        return messages

    def step(self, action_text: str) -> StepResult:
        if self.turn + 1 == self.at and self._hit():
            if self.fault == "hang":
                import time

                try:
                    time.sleep(self.hang_s)
                except Exception:  # an environment that swallows everything still stops
                    time.sleep(self.hang_s)
            elif self.fault == "raise":
                raise ConnectionResetError("the game server went away")
            elif self.fault == "nan":
                return StepResult([], float("nan"), True)
        return super().step(action_text)
