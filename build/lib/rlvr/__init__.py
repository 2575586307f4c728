"""rlvr: reinforcement learning with verifiable rewards for language models.

The data path of one step: prompts (:mod:`rlvr.data`) -> rollouts (:mod:`rlvr.rollout`) ->
rewards (:mod:`rlvr.rewards`) -> advantages and losses (:mod:`rlvr.algorithms`) -> policy
update (:mod:`rlvr.trainer`). docs/design.md describes the architecture.

The Python API (the command line is a thin layer over it)::

    from rlvr import Config, train, evaluate

    cfg = Config.model_validate({"task": {"name": "arithmetic", "level": 1},
                                 "train": {"steps": 2}})
    summary = train(cfg, reward=lambda completion, problem: float(problem.answer in completion))
    evaluate(summary["run_dir"])

Names are imported on first use, so ``import rlvr`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Config": "rlvr.config",
    "ConfigError": "rlvr.config",
    "load_config": "rlvr.config",
    "train": "rlvr.trainer",
    "evaluate": "rlvr.evaluation.api",
    "Problem": "rlvr.data",
    "RlvrError": "rlvr.errors",
}
__all__ = ["Config", "ConfigError", "Problem", "RlvrError", "evaluate", "load_config", "train"]

if TYPE_CHECKING:
    from rlvr.config import Config, ConfigError, load_config
    from rlvr.data import Problem
    from rlvr.errors import RlvrError
    from rlvr.evaluation.api import evaluate
    from rlvr.trainer import train


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rlvr' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
