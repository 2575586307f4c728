"""Where a run's parts run, chosen by name (``distributed.backend``): ``local`` (one process,
:mod:`.local`) or ``ray`` (rollout workers and learners as Ray actors, :mod:`.ray`, imported
only when chosen: Ray is an optional extra). Each backend is a function ``build(cfg,
user_reward, cleanup) -> RunParts``; the loop is the same for all of them."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable

from rlvr.config import Config
from rlvr.trainer.build import RunParts

BACKENDS = {
    "local": ("rlvr.trainer.backends.local", "every part in this process"),
    "ray": ("rlvr.trainer.backends.ray", "rollout workers and learners as Ray actors"),
}
"""Backend name -> (its module, whose ``build`` makes the parts; what it is)."""


def build_parts(
    cfg: Config,
    user_reward: Callable[..., float] | None = None,
    cleanup: contextlib.ExitStack | None = None,
) -> RunParts:
    """The run's parts on the backend ``distributed.backend`` names; what must be closed is
    registered on ``cleanup`` (None: on a stack of its own, closed by no one; tests)."""
    cleanup = cleanup if cleanup is not None else contextlib.ExitStack()
    module = importlib.import_module(BACKENDS[cfg.distributed.backend][0])
    return module.build(cfg, user_reward, cleanup)
