"""Draw stages: the batch transforms between a draw's scored groups and the samples it adds to
the step's batch, as an ordered list of registered stages (:data:`STAGES`).

The collector (:meth:`rlvr.trainer.collect.Collector._draw`) plays a draw, adds its rewards
and tells the prompt sampler, then runs each of the run's stages on a :class:`DrawState`, in
registration order: those before the selection, the step's group accumulator (dynamic
sampling, a group selector: :class:`rlvr.algorithms.GroupAccumulator`), then those after it on
the kept rows. A stage is active when the run's settings ask for it (:func:`stages_for`):

- ``hints`` (:mod:`.hints`): GHPO's hint-guided groups for the groups that failed
  (``rollout.hints``);
- ``group_filter`` (:mod:`.group_filter`): GFPO's filter of oversampled groups
  (``algorithm.group_filter``);
- ``replay`` (:mod:`.replay`): RePO's replayed samples of the kept groups (``rollout.replay``),
  after the selection.

A user's stage is one function registered with :func:`register_stage` (in a plug-in) and its
``active`` predicate; it runs after the built-in stages of its side of the selection.
"""

from rlvr.trainer.stages.base import STAGES, DrawState, Stage, register_stage, stages_for

# isort: off
# the built-in stages, registered in the order they run
from rlvr.trainer.stages import hints  # noqa: F401
from rlvr.trainer.stages import group_filter  # noqa: F401
from rlvr.trainer.stages import replay  # noqa: F401

# isort: on

__all__ = ["STAGES", "DrawState", "Stage", "register_stage", "stages_for"]
