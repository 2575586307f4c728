"""Running a run's parts apart (docs/design.md, "The parts of a run"): rollout workers and
learners as Ray actors (:mod:`rlvr.distributed.ray_backend`), the learners' data-parallel group
(:mod:`rlvr.distributed.data_parallel`) and the weights they publish
(:mod:`rlvr.distributed.weights`). Nothing is imported here, so the learner can use the
data-parallel group without importing Ray."""
