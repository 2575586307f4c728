"""``calculator``: arithmetic with a ``calc(expression)`` tool (:func:`rlvr.envs.calc.calc`,
evaluated with ``ast``, never ``eval``). Pair it with a task whose numbers a small model cannot
multiply in its head, e.g. ``task: {name: arithmetic, level: 7}`` (three-digit by two-digit
products); the final answer is scored by the task's verifier.

``demonstration: true`` starts every episode with one worked exchange in the chat (a question,
the call in the environment's format, the tool's result, the answer): the tool environments'
``examples`` option (:mod:`rlvr.envs.tool_env`) with :data:`EXAMPLE`."""

from __future__ import annotations

from typing import Any

from rlvr.data.base import Task
from rlvr.envs.calc import calc
from rlvr.envs.tool_env import ToolEnv
from rlvr.envs.tools import make_tool

EXAMPLE = [
    {"role": "user", "content": "What is 12 * 34?"},
    {"role": "assistant", "tool_call": {"name": "calc", "arguments": {"expression": "12 * 34"}}},
    {"role": "tool"},  # the tool's result: 408
    {"role": "assistant", "content": "Answer: 408"},
]
"""The worked example of ``demonstration: true``."""


class CalculatorEnv(ToolEnv):
    """A :class:`~rlvr.envs.tool_env.ToolEnv` with the one tool ``calc`` (see the module
    docstring for ``demonstration``; ``examples``: more worked examples)."""

    def __init__(
        self,
        tool_format: str = "hermes",
        task: Task | None = None,
        system_prompt: str | None = None,
        tool_reward: float = 0.0,
        timeout_s: float = 2.0,
        demonstration: bool = False,
        examples: list[list[dict[str, Any]]] | None = None,
    ) -> None:
        tools = [make_tool(calc, timeout_s=timeout_s)]
        examples = [EXAMPLE, *(examples or [])] if demonstration else examples
        super().__init__(tools, tool_format, task, system_prompt, tool_reward, examples)
