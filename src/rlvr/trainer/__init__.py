"""The training spine, one step in one folder, in reading order (docs/design.md, "One
training step"):

* :mod:`.run`: the run directory, start-up checks, resume, then the loop;
* :mod:`.loop`: each step visibly collect -> learn -> publish -> record;
* :mod:`.collect`: prompts -> groups of episodes -> one batch (dynamic sampling);
* :mod:`.stages`: the draw stages between scoring and the batch (GHPO, GFPO, RePO, a user's);
* :mod:`.signals`: inputs of the estimator produced on demand (SPO, ReMax, AAPO);
* :mod:`.rollouts`: how episodes are played and scored (a plain task's one-step episodes or an
  environment's multi-turn ones): the one rollout path;
* :mod:`.batch`: :class:`~.batch.Samples`, one columnar table of a step's samples, from the
  engine to the learner;
* :mod:`.learner`: the update loop and the objective kinds (J(theta) of the policy gradient,
  imitation, pairs);
* :mod:`.build`: the parts from a config, whatever the backend;
* :mod:`.protocols`: the typed seams the local and Ray parts implement;
* :mod:`.backends`: ``local`` and ``ray``, chosen by ``distributed.backend``;
* :mod:`.metrics`: what a step records.
"""

from rlvr.trainer.learner import lr_lambda
from rlvr.trainer.run import train, with_callable_reward

__all__ = ["lr_lambda", "train", "with_callable_reward"]
