"""``guess_number``: find a hidden whole number in 1..N from "higher" / "lower" feedback.

The problems come from ``task: {name: guess_number}`` (:class:`rlvr.data.guess_number.
GuessNumberTask`: the hidden number is ``problem.answer``, the range is in the prompt). Each turn
the last whole number of the policy's text is its guess; a turn without one is invalid and told
so. A correct guess ends the episode with reward 1; turns run out at ``env.max_turns``.

The anchor state of a turn (GiGPO) is the feedback so far, ``((guess, "higher"), ...)``: all
first turns of a group share one, and episodes that guessed alike meet again later, so step
groups are real.
"""

from __future__ import annotations

import re

from rlvr.data.base import Problem
from rlvr.envs.base import Message, StepResult

_NUMBER = re.compile(r"-?\d+")


class GuessNumberEnv:
    """The game (see the module docstring); ``system_prompt``: the episodes' system message."""

    def __init__(self, system_prompt: str | None = None) -> None:
        self.system_prompt = system_prompt

    def reset(self, problem: Problem, seed: int) -> list[Message]:
        self.hidden = int(problem.answer)
        self.history: list[tuple[int, str]] = []
        return problem.messages(self.system_prompt)

    def step(self, action_text: str) -> StepResult:
        anchor = tuple(self.history)
        numbers = _NUMBER.findall(action_text)
        if not numbers:
            info = {"anchor": anchor, "action_valid": False}
            return StepResult([{"role": "user", "content": "Reply with a number."}], 0.0, info=info)
        guess = int(numbers[-1])
        if guess == self.hidden:
            info = {"anchor": anchor, "action_valid": True, "success": True}
            return StepResult(
                [{"role": "user", "content": "Correct!"}], 1.0, terminated=True, info=info
            )
        feedback = "higher" if guess < self.hidden else "lower"
        self.history.append((guess, feedback))
        info = {"anchor": anchor, "action_valid": True}
        text = f"{guess} is wrong. The number is {feedback}."
        return StepResult([{"role": "user", "content": text}], 0.0, info=info)
