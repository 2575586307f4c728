"""A config's plan, and the check a run makes at its start: the plan against its learner
device's memory, stopping the run before any model loads when it does not fit."""

from __future__ import annotations

import dataclasses

import torch

from rlvr.config import Config, ConfigError
from rlvr.trainer.plan.changes import advice
from rlvr.trainer.plan.components import estimate
from rlvr.trainer.plan.report import Plan
from rlvr.trainer.plan.setup import device_kind, setup_of
from rlvr.trainer.plan.units import GiB


class PlanError(ConfigError):
    """A run whose estimated peak memory does not fit its device: the plan's "does not fit"
    line and the cheapest change that would make it fit."""


def plan(
    cfg: Config,
    devices: int | None = None,
    device_memory: int | None = None,
    prompt_tokens: int | None = None,
) -> Plan:
    """The memory plan of ``cfg`` on ``devices`` learners (default ``distributed.learners``)
    whose devices have ``device_memory`` bytes each (None: unknown, no verdict); with advice
    when it does not fit. ``prompt_tokens``: see :func:`setup_of`."""
    setup = setup_of(cfg, devices, prompt_tokens, device_memory)
    found = estimate(setup, device_memory)
    if found.fits:
        return found
    return dataclasses.replace(found, advice=advice(setup, found))


def device_memory(cfg: Config) -> int | None:
    """The memory of the run's learner device in bytes: ``train.device_memory_gb``, else a CUDA
    device's total memory, else this machine's MemTotal (/proc/meminfo; None where unknown)."""
    if cfg.train.device_memory_gb is not None:
        return int(cfg.train.device_memory_gb * GiB)
    if device_kind(cfg.train.device) == "cuda":
        if not torch.cuda.is_available():
            return None
        index = torch.device(cfg.train.device).index if ":" in cfg.train.device else None
        return torch.cuda.get_device_properties(index or 0).total_memory
    try:
        with open("/proc/meminfo") as f:
            total = next(line for line in f if line.startswith("MemTotal:"))
    except (OSError, StopIteration):
        return None
    return int(total.split()[1]) * 1024


def check_plan(cfg: Config) -> Plan:
    """The plan of a run about to start on this machine's device (:func:`device_memory`);
    :class:`PlanError` with its "does not fit" line and advice when it does not fit."""
    found = plan(cfg, device_memory=device_memory(cfg))
    if not found.fits:
        raise PlanError("\n".join([found.verdict(), *found.advice]))
    return found
