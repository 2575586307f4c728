"""The learning side of a step, read in this order:

```
engine.py            Learner: the ppo_epochs x minibatches x micro-batches loop, gradient sync,
                     the optimizer step, skip-on-non-finite, its state and checkpoints
kinds.py             objective kinds as registered strategies: prepare, accumulate, summary
policy_gradient.py   J(theta) of GRPO and its relatives, PPO, distillation, as one sum
imitation.py         SFT and RFT: the policy gradient's surrogate replaced by the NLL
pairs.py             DPO, IPO, REBEL on the pairs of each group
advantage_inputs.py  what the advantage estimator reads; per-turn credit; advantage metrics
correction.py        the sampler-trainer correction (TIS / MIS, off-policy sequence masking)
forward.py           Forward: the settings of every log-prob call
reference.py         Reference: pi_ref as a frozen copy or a switched adapter; its resets
schedule.py          the learning-rate schedule and one clipped AdamW step
published.py         the semi-online snapshot the rollouts serve between syncs
state.py             what the learner keeps across steps: modules, checkpoints, state dicts
```
"""

from rlvr.trainer.learner.engine import Learner
from rlvr.trainer.learner.forward import Forward
from rlvr.trainer.learner.kinds import (
    OBJECTIVE_KINDS,
    Averages,
    ObjectiveKind,
    Prepared,
    SkipStep,
    register_objective_kind,
)
from rlvr.trainer.learner.published import PublishedCopy
from rlvr.trainer.learner.reference import Reference
from rlvr.trainer.learner.schedule import lr_lambda

__all__ = [
    "OBJECTIVE_KINDS",
    "Averages",
    "Forward",
    "Learner",
    "ObjectiveKind",
    "Prepared",
    "PublishedCopy",
    "Reference",
    "SkipStep",
    "lr_lambda",
    "register_objective_kind",
]
