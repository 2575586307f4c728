"""Draw stages: the batch transforms between a draw's scored groups and the samples it adds to
the step's batch, registered by name (:data:`STAGES`) and listed, in order, by the algorithm
(``algorithm.stages``: each entry ``{name, ...settings}``).

The collector (:meth:`rlvr.trainer.collect.Collector._draw`) plays a draw, adds its rewards
and tells the prompt sampler, then runs the algorithm's stages on a :class:`DrawState`: those
before the selection in their listed order, the step's group accumulator (a group selector:
:class:`rlvr.algorithms.GroupAccumulator`), then those after it on the kept rows
(:func:`stages_for`). The built-in stages:

- ``hints`` (:mod:`.hints`): GHPO's hint-guided groups for the groups that failed;
- ``group_filter`` (:mod:`.group_filter`): GFPO's filter of oversampled groups;
- ``replay`` (:mod:`.replay`): RePO's replayed samples of the kept groups, after the selection;
- ``dra`` (:mod:`.diversity`): DRA-GRPO's diversity-aware reward adjustment;
- ``diver`` (:mod:`.diver`): DIVER's diversity bonus on the correct completions;
- ``guidance`` (:mod:`.guidance`): G2RPO-A's guided samples in every group, their guidance
  length adapted to the reward;
- ``error_correction`` (:mod:`.error_correction`): EDGE-GRPO's corrections of the wrong
  responses (a reflection the policy continues, the answer, or the reference solution);
- ``budgets`` (:mod:`.budgets`): HBPO's budget subgroups, each reply starting with its budget;
- ``early_exit`` (:mod:`.early_exit`): S-GRPO's serial groups (one path and its early exits)
  and their decaying rewards.
- ``prefix_rl`` (:mod:`.prefix_rl`): PrefixRL's groups played from prefixes of their problem's
  off-policy trace, the prefix context the loss does not train.

A user's stage is one function and its settings dataclass, registered with
:func:`register_stage` (in a plug-in).
"""

from rlvr.trainer.stages.base import (
    STAGES,
    DrawState,
    Stage,
    check_stages,
    oversample,
    register_stage,
    stages_for,
)

# isort: off
from rlvr.trainer.stages import hints  # noqa: F401
from rlvr.trainer.stages import group_filter  # noqa: F401
from rlvr.trainer.stages import replay  # noqa: F401
from rlvr.trainer.stages import diversity  # noqa: F401
from rlvr.trainer.stages import diver  # noqa: F401
from rlvr.trainer.stages import guidance  # noqa: F401
from rlvr.trainer.stages import error_correction  # noqa: F401
from rlvr.trainer.stages import budgets  # noqa: F401
from rlvr.trainer.stages import early_exit  # noqa: F401
from rlvr.trainer.stages import prefix_rl  # noqa: F401

# isort: on

__all__ = [
    "STAGES",
    "DrawState",
    "Stage",
    "check_stages",
    "oversample",
    "register_stage",
    "stages_for",
]
