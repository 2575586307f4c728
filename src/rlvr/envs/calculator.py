"""``calculator``: arithmetic with a ``calc(expression)`` tool (:func:`rlvr.envs.calc.calc`,
evaluated with ``ast``, never ``eval``). Pair it with a task whose numbers a small model cannot
multiply in its head, e.g. ``task: {name: arithmetic, level: 7}`` (three-digit by two-digit
products); the final answer is scored by the task's verifier."""

from __future__ import annotations

from rlvr.data.base import Task
from rlvr.envs.calc import calc
from rlvr.envs.tool_env import ToolEnv
from rlvr.envs.tools import make_tool


class CalculatorEnv(ToolEnv):
    """A :class:`~rlvr.envs.tool_env.ToolEnv` with the one tool ``calc``."""

    def __init__(
        self,
        tool_format: str = "hermes",
        task: Task | None = None,
        system_prompt: str | None = None,
        tool_reward: float = 0.0,
        timeout_s: float = 2.0,
    ) -> None:
        tools = [make_tool(calc, timeout_s=timeout_s)]
        super().__init__(tools, tool_format, task, system_prompt, tool_reward)
