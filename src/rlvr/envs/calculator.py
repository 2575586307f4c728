"""``calculator``: arithmetic with a ``calc(expression)`` tool (:func:`rlvr.envs.calc.calc`,
evaluated with ``ast``, never ``eval``). Pair it with a task whose numbers a small model cannot
multiply in its head, e.g. ``task: {name: arithmetic, level: 7}`` (three-digit by two-digit
products); the final answer is scored by the task's verifier.

``demonstration: true`` starts every episode with one worked exchange in the chat (a question,
the call in the environment's format, the tool's result, the answer): the in-context example of
ReAct-style prompting (Yao et al. 2023), which a 135M model follows far more readily than a
description of the format in the system prompt."""

from __future__ import annotations

from rlvr.data.base import Problem, Task
from rlvr.envs.base import Message
from rlvr.envs.calc import calc
from rlvr.envs.parsers import format_call
from rlvr.envs.tool_env import ToolEnv
from rlvr.envs.tools import ToolCall, make_tool

EXAMPLE = ("What is 12 * 34?", "12 * 34", "408")  # question, expression, result


class CalculatorEnv(ToolEnv):
    """A :class:`~rlvr.envs.tool_env.ToolEnv` with the one tool ``calc`` (see the module
    docstring for ``demonstration``)."""

    def __init__(
        self,
        tool_format: str = "hermes",
        task: Task | None = None,
        system_prompt: str | None = None,
        tool_reward: float = 0.0,
        timeout_s: float = 2.0,
        demonstration: bool = False,
    ) -> None:
        tools = [make_tool(calc, timeout_s=timeout_s)]
        super().__init__(tools, tool_format, task, system_prompt, tool_reward)
        self.demonstration = demonstration

    def reset(self, problem: Problem, seed: int) -> list[Message]:
        messages = super().reset(problem, seed)
        if not self.demonstration:
            return messages
        question, expression, result = EXAMPLE
        call = format_call(ToolCall("calc", {"expression": expression}), self.tool_format)
        example = [
            {"role": "user", "content": question},
            {"role": "assistant", "content": call},
            {"role": "tool", "content": result},
            {"role": "assistant", "content": f"Answer: {result}"},
        ]
        at = 1 if messages and messages[0]["role"] == "system" else 0
        return [*messages[:at], *example, *messages[at:]]
