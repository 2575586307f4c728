"""Tasks: deterministic problem streams with held-out splits and verifiable answers."""

from rlvr.answers import extract_answer, numeric_match, numeric_reward, parse_number
from rlvr.data.arithmetic import ArithmeticTask
from rlvr.data.base import (
    DEFAULT_PROMPT_TEMPLATE,
    FILE_PROMPT_TEMPLATE,
    CategorizedTask,
    Demonstration,
    Problem,
    Task,
)
from rlvr.data.checks import (
    data_fingerprint,
    data_stats,
    limit_prompt_length,
    limit_task_prompts,
)
from rlvr.data.countdown import COUNTDOWN_PROMPT_TEMPLATE, CountdownTask, countdown_reward
from rlvr.data.files import FileTask, file_mixture
from rlvr.data.from_config import build_task
from rlvr.data.mixture import MixtureTask, answer_extractor
from rlvr.data.reasoning_gym import RG_PROMPT_TEMPLATE, ReasoningGymTask
from rlvr.data.registry import TASKS, is_task_name, make_task

__all__ = [
    "COUNTDOWN_PROMPT_TEMPLATE",
    "DEFAULT_PROMPT_TEMPLATE",
    "FILE_PROMPT_TEMPLATE",
    "RG_PROMPT_TEMPLATE",
    "TASKS",
    "ArithmeticTask",
    "CategorizedTask",
    "CountdownTask",
    "FileTask",
    "MixtureTask",
    "Demonstration",
    "Problem",
    "ReasoningGymTask",
    "Task",
    "answer_extractor",
    "build_task",
    "data_fingerprint",
    "countdown_reward",
    "data_stats",
    "extract_answer",
    "file_mixture",
    "is_task_name",
    "limit_prompt_length",
    "limit_task_prompts",
    "make_task",
    "numeric_match",
    "numeric_reward",
    "parse_number",
]
