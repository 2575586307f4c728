"""rlvr: reinforcement learning with verifiable rewards for language models.

The data path of one step: prompts (:mod:`rlvr.data`) -> rollouts (:mod:`rlvr.rollout`) ->
rewards (:mod:`rlvr.rewards`) -> advantages and losses (:mod:`rlvr.algorithms`) -> policy
update (:mod:`rlvr.trainer`).
"""

__version__ = "0.1.0"
