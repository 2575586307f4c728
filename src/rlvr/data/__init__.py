"""Tasks: deterministic problem streams with held-out splits and verifiable answers."""

from rlvr.data.arithmetic import ArithmeticTask
from rlvr.data.base import DEFAULT_PROMPT_TEMPLATE, Problem, Task
from rlvr.data.files import FileTask
from rlvr.data.registry import TASKS, make_task
from rlvr.rewards.verifiers import extract_answer, numeric_match, numeric_reward, parse_number

__all__ = [
    "DEFAULT_PROMPT_TEMPLATE",
    "TASKS",
    "ArithmeticTask",
    "FileTask",
    "Problem",
    "Task",
    "extract_answer",
    "make_task",
    "numeric_match",
    "numeric_reward",
    "parse_number",
]
