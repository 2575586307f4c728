"""``rubric``: a completion scored against weighted criteria, each checked by a program or judged.

"Rubrics as Rewards" (Gunjal et al. 2025) and "Rubric Anchors" (Huang et al. 2025) reward a
completion by the weighted share of its problem's rubric it satisfies:

    r = sum_k w_k s_k / sum_{k: w_k > 0} w_k,

with ``s_k`` in [0, 1] the score of criterion k; a negative weight is a pitfall (satisfying it
costs). A criterion is a mapping:

* ``criterion``: what it asks, in words (what the judge reads);
* ``weight`` (default 1);
* ``check`` (default ``judge``): ``judge`` (the judge's verdict on "does the response satisfy
  the criterion"), or a program: ``regex`` (``value`` found), ``contains`` / ``not_contains``
  (``value`` as a case-insensitive substring), ``min_words`` / ``max_words`` (``value`` words),
  ``json_schema`` (``value`` a JSON Schema the completion's JSON satisfies);
* ``label``: its name in the metrics (default ``CHECK_INDEX``, e.g. ``judge_0``).

The criteria are the ``criteria`` param (the same for every problem) or, by default, the
problem's answer as a JSON list (a data file's rubric column named as ``task.answer_column``).
Each criterion's score is logged as ``reward/rubric/LABEL`` (the mean over the samples) and
listed in the score's reason; the judge criteria of a whole group go to the judge in one call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.data.base import Problem
from rlvr.reward_models.judges import Usage
from rlvr.rewards.judged import Verdict, master_key, render, resolve_judge
from rlvr.rewards.protocol import RewardConfigError, Score
from rlvr.rewards.registry import register_reward
from rlvr.rewards.structure import json_schema_reward

RUBRIC_TEMPLATE = (
    "Here is a question and a response to it.\n\n"
    "Question:\n{prompt}\n\n"
    "Response:\n{completion}\n\n"
    "Does the response satisfy this criterion: {criterion}\nAnswer Yes or No."
)
"""The judge's question per criterion (fields ``{prompt}``, ``{completion}``, ``{criterion}``,
``{reference}``)."""

CHECKS = ("judge", "regex", "contains", "not_contains", "min_words", "max_words", "json_schema")


@dataclass(frozen=True)
class Criterion:
    """One rubric criterion (see the module docstring)."""

    criterion: str
    weight: float
    check: str
    value: Any
    label: str

    @classmethod
    def coerce(cls, spec: Any, index: int) -> Criterion:
        if isinstance(spec, str):
            spec = {"criterion": spec}
        if not isinstance(spec, Mapping):
            raise ValueError(f"rubric criterion {index}: expected a mapping, got {spec!r}")
        unknown = set(spec) - {"criterion", "weight", "check", "value", "label"}
        if unknown:
            raise ValueError(f"rubric criterion {index}: unknown keys {sorted(unknown)}")
        check = spec.get("check", "judge")
        if check not in CHECKS:
            raise ValueError(f"rubric criterion {index}: check {check!r} not one of {CHECKS}")
        if check != "judge" and "value" not in spec:
            raise ValueError(f"rubric criterion {index}: check {check!r} needs a value")
        if check == "judge" and not spec.get("criterion"):
            raise ValueError(f"rubric criterion {index}: a judged criterion needs its text")
        if check == "regex":
            re.compile(spec["value"])
        return cls(
            criterion=str(spec.get("criterion") or f"{check} {spec.get('value')!r}"),
            weight=float(spec.get("weight", 1.0)),
            check=check,
            value=spec.get("value"),
            label=str(spec.get("label") or f"{check}_{index}"),
        )


def rubric_of(problem: Problem, criteria: Sequence[Any] | None) -> list[Criterion]:
    """The criteria: ``criteria`` when given, else ``problem.answer`` parsed as a JSON list."""
    source: Any = criteria
    if source is None:
        try:
            source = json.loads(problem.answer)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"rubric: problem {problem.id!r}'s answer is not a JSON list of criteria ({err}); "
                "give the criteria as params or a rubric column as the answer"
            ) from None
    if not isinstance(source, list) or not source:
        raise ValueError(f"rubric: expected a non-empty list of criteria, got {source!r}")
    out = [Criterion.coerce(c, k) for k, c in enumerate(source)]
    if sum(c.weight for c in out if c.weight > 0) <= 0:
        raise ValueError("rubric: no criterion has a positive weight")
    return out


def program_check(criterion: Criterion, completion: str, problem: Problem) -> float:
    """A program criterion's score of ``completion`` (0 or 1)."""
    kind, value = criterion.check, criterion.value
    if kind == "regex":
        return float(re.search(value, completion) is not None)
    if kind == "contains":
        return float(str(value).lower() in completion.lower())
    if kind == "not_contains":
        return float(str(value).lower() not in completion.lower())
    words = len(completion.split())
    if kind == "min_words":
        return float(words >= int(value))
    if kind == "max_words":
        return float(words <= int(value))
    return float(json_schema_reward(completion, problem, schema=value))


@register_reward("rubric", kind="group")
def rubric(
    completions: list[str],
    problem: Problem,
    criteria: Sequence[Any] | None = None,
    judge: Any = None,
    template: str = RUBRIC_TEMPLATE,
    verdict: str = "probability",
    unparsed: float | None = None,
    guard: bool = True,
) -> list[float]:
    """Rubric rewards of ``[G]`` completions (see the module docstring).

    Args:
        criteria: the rubric (None: the problem's answer, a JSON list).
        judge: a ``reward.judges`` name or a Judge; needed when a criterion is judged.
        template: the judge's question per criterion; ``{criterion}`` is its text.
        verdict, unparsed: how the judge's verdict is read (:func:`judge_score`).
        guard: a master-key completion satisfies no judged criterion (not asked).
    """
    rubric_ = rubric_of(problem, criteria)
    judged = [c for c in rubric_ if c.check == "judge"]
    if judged and judge is None:
        raise RewardConfigError("rubric: judged criteria need params.judge (a reward.judges name)")
    scores = [[0.0] * len(rubric_) for _ in completions]
    asked: list[tuple[int, int]] = []
    questions: list[str] = []
    for i, completion in enumerate(completions):
        for k, c in enumerate(rubric_):
            if c.check != "judge":
                scores[i][k] = program_check(c, completion, problem)
            elif not (guard and master_key(completion) is not None):
                asked.append((i, k))
                questions.append(render(template, problem, completion, criterion=c.criterion))
    usage = Usage()
    if questions:
        answers, usage = Verdict(verdict).ask(resolve_judge(judge), questions, unparsed)
        for (i, k), (value, _) in zip(asked, answers, strict=True):
            scores[i][k] = value
    positive = sum(c.weight for c in rubric_ if c.weight > 0)
    out: list[float] = []
    for i, row in enumerate(scores):
        total = sum(c.weight * s for c, s in zip(rubric_, row, strict=True)) / positive
        reason = "; ".join(f"{c.label}: {s:.2f}" for c, s in zip(rubric_, row, strict=True))
        out.append(
            Score(
                total,
                reason,
                parts={c.label: s for c, s in zip(rubric_, row, strict=True)},
                usage=usage.metrics() if i == 0 and questions else None,
            )
        )
    return out
