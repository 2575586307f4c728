"""Who decides whether a held-out sample is correct (``eval.judge``), in one place for the
trainer's evaluation, ``rlvr eval`` and ``rescore``.

* ``task`` (default): the task's own answer check, ``task.score(text, problem)``; the score is
  its value and a sample is correct when it is at least 1.
* ``reward``: the run's reward (:func:`rlvr.rewards.base.build_reward` from ``cfg.reward``, the
  same :class:`~rlvr.rewards.combined.CombinedReward` training calls, its weighted total); the
  score is the reward value and a sample is correct when it is at least
  ``eval.reward_threshold``. For a task whose correctness only the reward knows: unit tests
  (``python_unit_tests``: 1.0 when every test passes), a reward-model score.

The reward judge passes each sample's ``num_tokens`` as training does; a reward that reads a
field evaluation does not compute (``token_entropy``, ``self_certainty``, the reference-answer
log-probs) is refused with a :class:`~rlvr.config.ConfigError`. A group reward
(``kind="group"``, e.g. ``reward_model``) is called once per problem with that problem's
held-out samples as its group: the ``n`` samples of ``rlvr eval``, the single greedy (or
sampled) completion of the trainer's evaluation. A reward that compares a sample with its group
(``majority_vote``, ``evol_novelty``) therefore judges it against those samples only, not
against a training group. Algorithm shaping added to the reward in training (DAPO's overlong
penalty) is not part of the judgement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from rlvr.data import Problem, Task
from rlvr.rewards.base import build_reward, config_terms
from rlvr.rewards.combined import CombinedReward
from rlvr.rewards.protocol import SAMPLE_FIELDS
from rlvr.rewards.registry import CALLABLE_MARKER

if TYPE_CHECKING:
    from rlvr.config import Config

JudgeName = Literal["task", "reward"]

#: The per-sample fields an evaluation gives a reward (of :data:`SAMPLE_FIELDS`).
JUDGE_FIELDS = frozenset({"num_tokens"})


@dataclass(frozen=True)
class Grader:
    """How held-out samples are scored and called correct (see the module docstring).

    Attributes:
        name: ``task`` or ``reward``.
        threshold: least score of a correct sample (1.0 for the task judge).
        reward: the reward that judges (``reward`` only).
        reward_config: the ``reward`` config section it was built from (JSON form), recorded
            in an evaluation's summary so :func:`rlvr.evaluation.harness.rescore` rebuilds it.
    """

    name: JudgeName = "task"
    threshold: float = 1.0
    reward: CombinedReward | None = None
    reward_config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.name == "reward") != (self.reward is not None):
            raise ValueError(f"judge {self.name!r}: a reward is given exactly to the reward judge")

    def describe(self) -> dict[str, Any]:
        """``{"name", "threshold"}``, and ``"reward"`` (the config section) for the reward
        judge: what an evaluation summary records under ``"judge"``."""
        out: dict[str, Any] = {"name": self.name, "threshold": self.threshold}
        return {**out, "reward": self.reward_config} if self.name == "reward" else out

    def close(self) -> None:
        """Release the reward's workers (it can still be called after)."""
        if self.reward is not None:
            self.reward.close()


def grade_samples(
    judge: Grader,
    task: Task,
    completions: Sequence[str],
    problems: Sequence[Problem],
    num_tokens: Sequence[int],
    group_ids: Sequence[int],
) -> tuple[list[float], list[bool], dict[str, list[float | None]]]:
    """Scores and correctness of N samples, and the reward's parts.

    Args:
        completions: N completion texts; sample i answers ``problems[i]``.
        num_tokens: N completion lengths in tokens (the reward's ``num_tokens`` field).
        group_ids: N ids, equal for the held-out samples of one problem (a group reward's
            group).
    Returns:
        ``(scores [N], correct [N], parts)``: ``task.score`` or the reward's total per sample,
        ``score >= judge.threshold``, and the reward's named sub-scores per sample (a rubric's
        criteria, ``{"rubric/LABEL": [N]}``; empty for the task judge).
    """
    parts: dict[str, list[float | None]] = {}
    if judge.reward is None:  # the task judge
        scores = [float(task.score(t, p)) for t, p in zip(completions, problems, strict=True)]
    else:
        breakdown = judge.reward(
            list(completions),
            list(problems),
            group_ids=list(group_ids),
            num_tokens=[int(n) for n in num_tokens],
        )
        scores = [float(v) for v in breakdown.total]
        parts = breakdown.parts
    return scores, [s >= judge.threshold for s in scores], parts


def build_grader(cfg: Config, task: Task, reward: CombinedReward | None = None) -> Grader:
    """The judge ``cfg.eval`` asks for.

    Args:
        cfg: reads ``eval.judge``, ``eval.reward_threshold`` and the ``reward`` section.
        task: the task (its verifier is the task judge, and the reward term ``task``).
        reward: the run's reward when the caller already holds it (the trainer); else it is
            built from ``cfg.reward`` and probed once on the first held-out problem
            (:meth:`CombinedReward.check`), as training does before its first rollout.
    Raises:
        ConfigError: the reward reads a field evaluation does not compute, or is a Python
            function passed to ``rlvr.train()`` that a config cannot name.
    """
    if cfg.eval.judge == "task":
        return Grader()
    section = cfg.reward.model_dump(mode="json")
    if reward is None:
        reward = _build_reward(cfg, task)
    _check_fields(reward)
    return Grader("reward", cfg.eval.reward_threshold, reward, section)


def _build_reward(cfg: Config, task: Task) -> CombinedReward:
    """``cfg.reward`` built as the trainer builds it, and probed."""
    from rlvr.config import ConfigError

    function = cfg.reward.function
    if function is not None and function.startswith(CALLABLE_MARKER):
        raise ConfigError(
            f"eval.judge=reward: the run's reward ({function}) was a Python function passed "
            "to rlvr.train(), which a config cannot name: set reward.function to "
            "'module:function' (--set reward.function=...), or use eval.judge=task"
        )
    reward = build_reward(
        task,
        function,
        config_terms(cfg.reward),
        on_error=cfg.reward.on_error,
        timeout_s=cfg.reward.timeout_s,
        max_abs=cfg.reward.max_abs,
    )
    held_out = task.eval_problems()
    if held_out:
        try:
            reward.check(held_out[0])
        except BaseException:
            reward.close()
            raise
    return reward


def _check_fields(reward: CombinedReward) -> None:
    """:class:`ConfigError` naming a term that reads a per-sample field other than
    :data:`JUDGE_FIELDS` (and not fixed under its params)."""
    from rlvr.config import ConfigError

    for term in reward.terms:
        missing = sorted(
            (term.signature.names & set(SAMPLE_FIELDS)) - JUDGE_FIELDS - set(term.params)
        )
        if missing:
            raise ConfigError(
                f"eval.judge=reward: reward {term.label!r} reads {', '.join(missing)}, which "
                f"held-out evaluation does not compute (it gives a reward only "
                f"{', '.join(sorted(JUDGE_FIELDS))}): use eval.judge=task, or a reward "
                "without that field"
            )
