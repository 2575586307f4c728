"""torch.distributed for a run's parts apart: the learners' data-parallel group
(:mod:`rlvr.distributed.data_parallel`) and the group the weights are published over
(:mod:`rlvr.distributed.weights`). The Ray backend that uses them is
:mod:`rlvr.trainer.backends.ray`. Nothing is imported here, so the learner can use the
data-parallel group without importing Ray, and an unsharded run can ask whether a model is
sharded without importing DTensor (a model can only be sharded once its module is loaded)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

SHARDS = "shards"
"""The directory of a sharded checkpoint's shards (:mod:`rlvr.distributed.sharded_checkpoint`)."""


def is_sharded_checkpoint(directory: Path) -> bool:
    """Whether the checkpoint ``directory`` holds its weights as shards."""
    return (Path(directory) / SHARDS / ".metadata").is_file()


def _dtensor() -> Any:
    """The DTensor class, or None while its module is not loaded."""
    module = sys.modules.get("torch.distributed.tensor")
    return None if module is None else module.DTensor


def is_sharded_model(model: Any) -> bool:
    """Whether ``model``'s parameters are shards (:mod:`rlvr.distributed.sharding`)."""
    dtensor = _dtensor()
    return dtensor is not None and any(isinstance(p, dtensor) for p in model.parameters())


def local_part(tensor: Any) -> Any:
    """This rank's part of a shard (a DTensor's local tensor), else ``tensor`` itself."""
    dtensor = _dtensor()
    return tensor.to_local() if dtensor is not None and isinstance(tensor, dtensor) else tensor
