"""Where a run's parts run, chosen by name (``distributed.backend``): ``local`` (one process,
:mod:`.local`) or ``ray`` (rollout workers and learners as Ray actors, :mod:`.ray`, imported
only when chosen: Ray is an optional extra). Each backend is a function ``build(cfg,
user_reward, cleanup) -> RunParts`` (:data:`rlvr.catalog.BACKENDS`); the loop is the same for all
of them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from rlvr.catalog import BACKENDS
from rlvr.config import Config
from rlvr.trainer.build import RunParts


def build_parts(
    cfg: Config,
    user_reward: Callable[..., float] | None = None,
    cleanup: contextlib.ExitStack | None = None,
) -> RunParts:
    """The run's parts on the backend ``distributed.backend`` names; what must be closed is
    registered on ``cleanup`` (None: on a stack of its own, closed by no one; tests)."""
    cleanup = cleanup if cleanup is not None else contextlib.ExitStack()
    build = BACKENDS.get_or_raise(cfg.distributed.backend)  # imported when chosen
    return build(cfg, user_reward, cleanup)
