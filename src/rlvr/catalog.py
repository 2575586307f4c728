"""The names a config selects whose parts live above the config's layer: tasks
(:data:`TASKS`), environments (:data:`ENVS`) and backends (:data:`BACKENDS`). Each built-in part
is a lazy ``module:attr`` entry (imported when first used), so the config checks its names
without importing them; an ecosystem's task and environment are the family entries
``PREFIX<placeholder>`` its row of :data:`rlvr.ecosystems.ECOSYSTEMS` declares.

A user's task or environment registers in the same registry (:func:`rlvr.data.registry.
register_task`, :func:`rlvr.envs.registry.register_environment`).
"""

from __future__ import annotations

from typing import Any

from rlvr.ecosystems import ECOSYSTEMS
from rlvr.registry import Registry

TASKS: Registry[Any] = Registry("task")
"""Task name -> its class (or a family's ``make_task(id, **options)``)."""
for _name, _target, _about in (
    (
        "arithmetic",
        "rlvr.data.arithmetic:ArithmeticTask",
        "procedural integer arithmetic, difficulty levels 1-8 (ArithmeticTask)",
    ),
    (
        "file",
        "rlvr.data.files:FileTask",
        "prompt/answer rows (text or chat) from a .jsonl/.json/.parquet/.csv file, a "
        "save_to_disk directory or a Hugging Face dataset in the local cache (FileTask)",
    ),
    (
        "countdown",
        "rlvr.data.countdown:CountdownTask",
        "reach a target with + - * / using each given number once, levels 1-3 (CountdownTask)",
    ),
    (
        "judge",
        "rlvr.reward_models.judge_task:JudgeTask",
        "verdicts (Yes/No, or A/B) on right and wrong answers to arithmetic, to train a judge "
        "by RL (JudgeTask)",
    ),
    (
        "search_qa",
        "rlvr.data.search_qa:SearchQATask",
        "multi-hop questions about a generated world, levels 1-3 (hops), for env search "
        "(SearchQATask)",
    ),
    (
        "guess_number",
        "rlvr.data.guess_number:GuessNumberTask",
        "hidden numbers in 1..max_value for env guess_number (GuessNumberTask)",
    ),
):
    TASKS.add_lazy(_name, _target, _about)

ENVS: Registry[Any] = Registry("environment")
"""Environment name -> its class (or factory)."""
for _name, _target, _about in (
    ("single_turn", "rlvr.envs.single_turn:SingleTurnEnv", "the task as a one-step environment"),
    (
        "calculator",
        "rlvr.envs.calculator:CalculatorEnv",
        "arithmetic with a calc(expression) tool (pair with task arithmetic, level 7 or 8)",
    ),
    (
        "search",
        "rlvr.envs.search:SearchEnv",
        "answer questions with a BM25 search(query) tool over a local corpus (task search_qa)",
    ),
    (
        "guess_number",
        "rlvr.envs.guess_number:GuessNumberEnv",
        "find a hidden number from higher/lower feedback (task guess_number)",
    ),
    (
        "textarena",
        "rlvr.envs.textarena:TextArenaEnv",
        "a TextArena single-player game, params.env_id (pip install 'rlvr[envs]')",
    ),
):
    ENVS.add_lazy(_name, _target, _about)

for _ecosystem in ECOSYSTEMS.values():  # each ecosystem's task and environment, together
    if _ecosystem.make_task is not None:
        TASKS.add_lazy(_ecosystem.family, _ecosystem.make_task, _ecosystem.about_task)
    if _ecosystem.environment is not None:
        ENVS.add_lazy(_ecosystem.family, _ecosystem.environment, _ecosystem.about_environment)

BACKENDS: Registry[Any] = Registry("backend")
"""Backend name -> its ``build(cfg, user_reward, cleanup) -> RunParts``."""
BACKENDS.add_lazy("local", "rlvr.trainer.backends.local:build", "every part in this process")
BACKENDS.add_lazy(
    "ray", "rlvr.trainer.backends.ray:build", "rollout workers and learners as Ray actors"
)
BACKENDS.add_lazy(
    "torchrun",
    "rlvr.trainer.backends.torchrun:build",
    "the learners are torchrun's processes; rank 0 also samples (torchrun -m rlvr train ...)",
)
