"""torch.distributed for a run's parts apart: the learners' data-parallel group
(:mod:`rlvr.distributed.data_parallel`) and the group the weights are published over
(:mod:`rlvr.distributed.weights`). The Ray backend that uses them is
:mod:`rlvr.trainer.backends.ray`. Nothing is imported here, so the learner can use the
data-parallel group without importing Ray."""
