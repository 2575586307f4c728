"""What this process is in a run that ``torchrun`` started (no torch import: the command line
reads it before its slow imports)."""

from __future__ import annotations

import os


def torchrun_follower(backend: str) -> bool:
    """Whether this process is a learner rank other than 0 of a ``distributed.backend:
    torchrun`` run: it follows rank 0's commands and neither writes nor reports the run."""
    return backend == "torchrun" and os.environ.get("RANK", "0") != "0"
