"""Held-out accuracy of a policy on a task (greedy and sampled), as ``eval.judge`` decides."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rlvr.data import Problem, Task
from rlvr.grading.grader import Grader, grade_samples
from rlvr.rollout import RolloutEngine, SamplingParams
from rlvr.rollout.streams import group_keys, stream_key


@dataclass
class AccuracyRecords:
    """Per problem: judged correct, the judge's score, completion length, finished; agent
    episodes add ``extras`` per problem: ``turns``, ``tool_calls``, ``tool_errors``,
    ``invalid_actions``; the reward judge adds its ``parts`` per problem (a rubric's
    criteria, None where a sample reported none)."""

    correct: list[bool]
    scores: list[float]
    lengths: list[int]
    finished: list[bool]
    extras: dict[str, list[float]] = field(default_factory=dict)
    parts: dict[str, list[float | None]] = field(default_factory=dict)

    @staticmethod
    def concat(parts: list[AccuracyRecords]) -> AccuracyRecords:
        """Records of consecutive shards of the problems, in order."""
        return AccuracyRecords(
            [x for p in parts for x in p.correct],
            [x for p in parts for x in p.scores],
            [x for p in parts for x in p.lengths],
            [x for p in parts for x in p.finished],
            {k: [x for p in parts for x in p.extras[k]] for k in parts[0].extras},
            {
                k: [x for p in parts for x in p.parts.get(k, [None] * len(p.correct))]
                for k in dict.fromkeys(k for p in parts for k in p.parts)
            },
        )


def sample_and_grade(
    engine: RolloutEngine,
    task: Task,
    problems: list[Problem],
    encode: Callable[[Problem], list[int]],
    decode: Callable[[list[int]], str],
    sampling: SamplingParams,
    seed: int = 1234,
    judge: Grader | None = None,
    first: int = 0,
) -> AccuracyRecords:
    """One completion per problem, judged; problem i of the list draws from the stream
    ``stream_key(seed, first + i, 0)``, so problems split in shards (``first``: the shard's
    offset) sample what they sample together."""
    judge = judge or Grader()
    keys = group_keys(stream_key(seed), len(problems), 1, first_prompt=first)
    rollout = engine.generate([encode(p) for p in problems], 1, sampling, keys)
    scores, correct, parts = grade_samples(
        judge,
        task,
        [decode(ids) for ids in rollout.completion_ids],
        problems,
        [len(ids) for ids in rollout.completion_ids],
        range(len(problems)),
    )
    lengths = [len(c) for c in rollout.completion_ids]
    return AccuracyRecords(
        list(correct), list(scores), lengths, list(rollout.finished), parts=dict(parts)
    )


def accuracy_metrics(
    records: AccuracyRecords, problems: list[Problem], judge_name: str
) -> dict[str, float]:
    """``{"accuracy", "length_mean", "truncated_frac", "n"}`` (``n``: problems scored, for
    confidence intervals), ``"accuracy/<category>"`` for each category of the problems (a task
    with ``task.levels``), and with the reward judge ``"reward_mean"`` and the mean of each
    part of the reward (``"reward/rubric/LABEL"``: a rubric criterion's satisfaction). For agent episodes
    ``accuracy`` is the success rate, ``truncated_frac`` the episodes cut by a budget, and
    ``reward_mean``, ``turns_mean``, ``tool_calls_mean``, ``tool_errors_mean`` and
    ``tool_invalid_frac`` (invalid actions per action) are added."""
    n = max(len(problems), 1)
    out = {
        "accuracy": sum(records.correct) / n,
        "length_mean": sum(records.lengths) / n,
        "truncated_frac": sum(not f for f in records.finished) / n,
        "n": float(len(problems)),
    }
    if judge_name == "reward":
        out["reward_mean"] = sum(records.scores) / n
        for name, values in records.parts.items():  # a rubric's criteria: reward/rubric/LABEL
            given = [v for v in values if v is not None]
            if given:
                out[f"reward/{name}"] = sum(given) / len(given)
    if records.extras:  # agent episodes
        from rlvr.envs.agent import tool_means

        extras = {k: sum(v) for k, v in records.extras.items()}
        out["reward_mean"] = sum(records.scores) / n
        out.update(
            tool_means(
                n,
                extras["turns"],
                extras["tool_calls"],
                extras["tool_errors"],
                extras["invalid_actions"],
            )
        )
    by_category: dict[str, list[bool]] = {}
    for problem, ok in zip(problems, records.correct, strict=True):
        if problem.category:
            by_category.setdefault(problem.category, []).append(ok)
    for category, flags in by_category.items():
        out[f"accuracy/{category}"] = sum(flags) / len(flags)
    return out


def evaluate_accuracy(
    engine: RolloutEngine,
    task: Task,
    problems: list[Problem],
    encode: Callable[[Problem], list[int]],
    decode: Callable[[list[int]], str],
    sampling: SamplingParams,
    seed: int = 1234,
    judge: Grader | None = None,
) -> dict[str, float]:
    """Fraction of ``problems`` whose single completion ``judge`` calls correct
    (:func:`sample_and_grade`, :func:`accuracy_metrics`).

    Args:
        encode: problem -> prompt token ids (chat template applied).
        decode: completion token ids -> text.
        sampling: temperature 0 for greedy accuracy, > 0 for sampled accuracy.
        seed: names the samples' random streams (:mod:`rlvr.rollout.streams`), so evaluation
            never moves the training RNG and samples the same wherever it runs.
        judge: who decides correctness (:mod:`rlvr.grading.grader`); default the task's
            own answer check. Each problem's completion is its own group.
    """
    judge = judge or Grader()
    records = sample_and_grade(engine, task, problems, encode, decode, sampling, seed, judge)
    return accuracy_metrics(records, problems, judge.name)
