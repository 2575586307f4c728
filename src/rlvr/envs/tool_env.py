"""A tool-using environment: the policy calls tools until it gives its final answer.

Each turn the policy's text is parsed in the environment's ``tool_format``
(:mod:`rlvr.envs.parsers`). Tool calls are run (:func:`rlvr.envs.tools.call_tool`: a timeout per
call, errors returned as text) and their results come back as ``tool`` messages; a malformed call
or a tool that fails is answered with the error, marks the action invalid and is counted
(``info["tool_errors"]``). A turn without a call is the final answer: it ends the episode and is
scored by the task's verifier (``task.score``, which reads ``Answer: ...`` or, without it, the
last number).

The anchor state of a turn (GiGPO) is the list of tool results (and errors) so far: episodes
whose calls returned the same results stand in the same state.
"""

from __future__ import annotations

from typing import Any

from rlvr.answers import numeric_reward
from rlvr.data.base import Problem, Task
from rlvr.envs.base import Message, StepResult
from rlvr.envs.parsers import PARSERS
from rlvr.envs.tools import Tool, call_tool


class ToolEnv:
    """Tools, a call format and a verifier (see the module docstring).

    Args:
        tools: the tools the policy may call.
        tool_format: ``hermes`` or ``action`` (:data:`rlvr.envs.parsers.PARSERS`).
        task: the task whose ``score`` judges the final answer (None: numeric match with the
            problem's answer).
        system_prompt: the system message of every episode (None: the template's default).
        tool_reward: reward of a turn whose calls all succeed (0: the outcome alone).
    """

    def __init__(
        self,
        tools: list[Tool],
        tool_format: str = "hermes",
        task: Task | None = None,
        system_prompt: str | None = None,
        tool_reward: float = 0.0,
    ) -> None:
        if tool_format not in PARSERS:
            raise ValueError(f"tool_format {tool_format!r}: expected one of {sorted(PARSERS)}")
        self.tools = tools
        self.by_name = {t.name: t for t in tools}
        self.tool_format = tool_format
        self.task = task
        self.system_prompt = system_prompt
        self.tool_reward = tool_reward
        self.calls: list[str] = []

    def reset(self, problem: Problem, seed: int) -> list[Message]:
        self.problem = problem
        self.calls = []
        return problem.messages(self.system_prompt)

    def score(self, text: str) -> float:
        if self.task is not None:
            return float(self.task.score(text, self.problem))
        return numeric_reward(text, self.problem.answer)

    def step(self, action_text: str) -> StepResult:
        parsed = PARSERS[self.tool_format](action_text)
        anchor = tuple(self.calls)
        if parsed.calls or parsed.errors:
            outcomes = [call_tool(self.by_name, call) for call in parsed.calls]
            texts = [o.text for o in outcomes] + [f"Error: {e}" for e in parsed.errors]
            errors = sum(not o.ok for o in outcomes) + len(parsed.errors)
            self.calls += texts
            info: dict[str, Any] = {
                "anchor": anchor,
                "tool_calls": len(outcomes) + len(parsed.errors),
                "tool_errors": errors,
                "action_valid": errors == 0,
            }
            reward = self.tool_reward if errors == 0 else 0.0
            return StepResult([{"role": "tool", "content": t} for t in texts], reward, info=info)
        reward = self.score(action_text)
        verdict = "Correct." if reward >= 1.0 else "Wrong."
        info = {"anchor": anchor, "action_valid": True, "success": reward >= 1.0}
        return StepResult(
            [{"role": "user", "content": verdict}], reward, terminated=True, info=info
        )
