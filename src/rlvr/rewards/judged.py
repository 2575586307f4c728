"""Rewards a language model gives: a judge reads the completion and gives a verdict.

A judge is a :class:`~rlvr.config.JudgeConfig` under ``reward.judges`` (a model rlvr loads, or
an OpenAI-compatible endpoint), named by a term's ``params: {judge: NAME}``
(:mod:`rlvr.reward_models.judges`). Every judge reward is a group reward: one call asks the
judge about a whole group at once (one batch for a local judge, concurrent requests for an
endpoint). Its scores carry the judge's reply as their reason (saved with the sample in
``samples.jsonl``) and the judge's usage (``judge/calls``, ``judge/cache_hits``, tokens,
``time/judge``) for the metrics. A judge that fails (an endpoint down after its retries, a
timeout, an unreadable verdict without ``unparsed``) fails the reward, which then follows
``reward.on_error`` like any reward.

* ``judge_score``: a pointwise verdict ("LLM-as-a-judge", Zheng et al. 2023, "Judging
  LLM-as-a-Judge with MT-Bench and Chatbot Arena"), read from the judge's next-token
  probabilities (``verdict: probability``: the expectation of the choices' values, e.g.
  P(Yes) / (P(Yes) + P(No)), no sampling) or parsed from its reply (``yes_no``, ``number``,
  ``boxed``, ``json:FIELD``), a number mapped from ``scale`` to [0, 1].
* ``judge_genrm``: a generative reward model (Zhang et al. 2024, "Generative Verifiers: Reward
  Modeling as Next-Token Prediction"; Mahan et al. 2024, "Generative Reward Models"): the judge
  reasons first, then states its verdict; the reasoning is the score's reason.
* ``judge_fallback``: the task's answer check where it can read an answer (math-verify), the
  judge where it cannot (a free-form answer), with the deciding path as an event
  (``judge/fallback/verifier`` or ``judge/fallback/judge``), as a general verifier does
  (Ma et al. 2025, "General-Reasoner").

Master keys. "One Token to Fool LLM-as-a-Judge" (Zhao et al. 2025) shows judges accepting
content-free replies (":", "Solution", "Let's solve this step by step."). With ``guard`` (on by
default) such a completion scores 0 without asking the judge (:func:`master_key`), counted as
``judge/guarded``; ``rlvr judge probe`` measures how a judge fares without the guard.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from typing import Any

from rlvr.data.base import Problem
from rlvr.reward_models.judges import Judge, Usage, get_judge
from rlvr.reward_models.questions import GENRM_TEMPLATE, POINTWISE_TEMPLATE
from rlvr.reward_models.verdicts import (
    expected_value,
    parse_boxed,
    parse_json_field,
    parse_number,
    parse_yes_no,
)
from rlvr.rewards.protocol import RewardConfigError, Score
from rlvr.rewards.registry import register_reward
from rlvr.templates import template_fields

TEMPLATE_FIELDS = frozenset({"prompt", "completion", "reference"})

#: Content-free replies that fool judges ("One Token to Fool LLM-as-a-Judge", Zhao et al.
#: 2025, their "master keys", and the openers our probe adds), compared after lower-casing and
#: stripping punctuation and spaces at both ends. Not "yes" or "true": those answer some tasks.
MASTER_KEYS = (
    "",
    "solution",
    "answer",
    "the answer is",
    "thought process",
    "let's solve this problem step by step",
    "let's solve this step by step",
    "let me solve this step by step",
    "step by step",
    "解",
)


def _normal(text: str) -> str:
    return text.lower().strip(string.whitespace + string.punctuation + "。：，")


_KEYS = frozenset(_normal(k) for k in MASTER_KEYS)


def master_key(completion: str) -> str | None:
    """Why ``completion`` is a content-free master key (its normal form is one of
    :data:`MASTER_KEYS`: empty, only punctuation and spaces, or a bare opener), else None."""
    normal = _normal(completion)
    if not normal:
        return "empty or only punctuation"
    return f"master key {completion.strip()!r}" if normal in _KEYS else None


def resolve_judge(judge: Judge | Mapping[str, Any] | str) -> Judge:
    """A reward's ``judge`` param: a :class:`Judge` (Python API), or a judge config (what the
    trainer puts in place of a ``reward.judges`` name)."""
    if isinstance(judge, Judge):
        return judge
    if isinstance(judge, str):
        raise RewardConfigError(
            f"judge {judge!r}: a judge reward's params name a judge defined under "
            "reward.judges in the run's config (rlvr.rewards.judge_specs resolves the name)"
        )
    return get_judge(judge)


def render(template: str, problem: Problem, completion: str, **extra: str) -> str:
    """The judge's question: ``template`` with the completion, problem and ``extra`` fields."""
    fields = template_fields(template)
    unknown = fields - TEMPLATE_FIELDS - set(extra)
    if unknown:
        raise RewardConfigError(
            f"judge template field(s) {sorted(unknown)} unknown; available: "
            f"{sorted(TEMPLATE_FIELDS | set(extra))}"
        )
    values = {"prompt": problem.prompt, "completion": completion, "reference": problem.answer}
    return template.format(**{**values, **extra})


class Verdict:
    """How a verdict is read: ``probability`` (choice probabilities; default choices
    ``{"Yes": 1, "No": 0}``), ``yes_no``, ``number``, ``boxed`` or ``json:FIELD`` (parsed from
    the reply); ``scale = [lo, hi]`` maps a parsed number to [0, 1] (clipped)."""

    def __init__(
        self,
        verdict: str,
        choices: Mapping[str, float] | None = None,
        scale: Sequence[float] | None = None,
    ) -> None:
        kinds = ("probability", "yes_no", "number", "boxed")
        if verdict not in kinds and not verdict.startswith("json:"):
            raise RewardConfigError(
                f"verdict {verdict!r}: expected one of {', '.join(kinds)} or json:FIELD"
            )
        if choices is not None and verdict != "probability":
            raise RewardConfigError("choices are read with verdict: probability")
        if scale is not None and (len(scale) != 2 or scale[0] >= scale[1]):
            raise RewardConfigError(f"scale {scale!r}: expected [low, high] with low < high")
        self.kind = verdict
        self.choices = dict(choices or {"Yes": 1.0, "No": 0.0})
        self.scale = None if scale is None else (float(scale[0]), float(scale[1]))

    def parse(self, text: str) -> float | None:
        """The verdict in a reply, scaled; None when it holds none."""
        if self.kind == "yes_no":
            return parse_yes_no(text)
        if self.kind == "number":
            value = parse_number(text)
        elif self.kind == "boxed":
            value = parse_boxed(text)
        else:
            value = parse_json_field(text, self.kind.removeprefix("json:"))
        if value is None or self.scale is None:
            return value
        lo, hi = self.scale
        return min(1.0, max(0.0, (value - lo) / (hi - lo)))

    def ask(
        self, judge: Judge, questions: list[str], unparsed: float | None
    ) -> tuple[list[tuple[float, str]], Usage]:
        """(verdict, reason) for each question, and the usage."""
        chats = [[{"role": "user", "content": q}] for q in questions]
        if self.kind == "probability":
            names = list(self.choices)
            probs, usage = judge.probabilities(chats, names)
            out = []
            for p in probs:
                value = expected_value(p, list(self.choices.values()))
                shown = ", ".join(f"P({n})={x:.3f}" for n, x in zip(names, p, strict=True))
                if value is None:
                    if unparsed is None:
                        raise ValueError(f"the judge gave none of {names} any probability")
                    value = unparsed
                out.append((value, shown))
            return out, usage
        replies, usage = judge.replies(chats)
        out = []
        for (reply,) in replies:
            value = self.parse(reply.text)
            if value is None:
                if unparsed is None:
                    raise ValueError(
                        f"no {self.kind} verdict in the judge's reply {reply.text[-200:]!r}"
                    )
                value = unparsed
            out.append((value, reply.text))
        return out, usage


def _scores(
    completions: list[str],
    problem: Problem,
    judge: Any,
    template: str,
    verdict: Verdict,
    unparsed: float | None,
    guard: bool,
) -> list[float]:
    """The judge's scores of a group; guarded master keys score 0 unasked."""
    judge = resolve_judge(judge)
    keys = [master_key(c) if guard else None for c in completions]
    asked = [i for i, k in enumerate(keys) if k is None]
    answers, usage = verdict.ask(
        judge, [render(template, problem, completions[i]) for i in asked], unparsed
    )
    scores: list[float] = [Score(0.0, f"guard: {k}", ("judge/guarded",)) for k in keys]
    for i, (value, reason) in zip(asked, answers, strict=True):
        scores[i] = Score(value, reason)
    first = scores[0]
    assert isinstance(first, Score)
    scores[0] = Score(float(first), first.reason, first.events, usage=usage.metrics())
    return scores


@register_reward("judge_score", kind="group")
def judge_score(
    completions: list[str],
    problem: Problem,
    judge: Any,
    template: str = POINTWISE_TEMPLATE,
    verdict: str = "probability",
    choices: Mapping[str, float] | None = None,
    scale: Sequence[float] | None = None,
    unparsed: float | None = None,
    guard: bool = True,
) -> list[float]:
    """A judge's pointwise verdict on each of ``[G]`` completions (see the module docstring).

    Args:
        judge: a ``reward.judges`` name (in a config) or a :class:`Judge`.
        template: the question; fields ``{prompt}``, ``{completion}``, ``{reference}``.
        verdict: ``probability`` | ``yes_no`` | ``number`` | ``boxed`` | ``json:FIELD``.
        choices: ``probability``'s answers and their values (default Yes: 1, No: 0).
        scale: ``[lo, hi]`` of a parsed number, mapped to [0, 1].
        unparsed: the score of a reply with no verdict (None: the reward fails).
        guard: master-key completions score 0 without asking (:func:`master_key`).
    """
    return _scores(
        completions, problem, judge, template, Verdict(verdict, choices, scale), unparsed, guard
    )


@register_reward("judge_genrm", kind="group")
def judge_genrm(
    completions: list[str],
    problem: Problem,
    judge: Any,
    template: str = GENRM_TEMPLATE,
    verdict: str = "yes_no",
    scale: Sequence[float] | None = None,
    unparsed: float | None = None,
    guard: bool = True,
) -> list[float]:
    """A generative reward model's verdict on each of ``[G]`` completions: the judge reasons
    (up to its ``max_new_tokens``), then states a verdict, read by ``verdict`` from its reply;
    the whole reply is the score's reason. Args as :func:`judge_score`."""
    if verdict == "probability":
        raise RewardConfigError("judge_genrm reads its verdict after reasoning: not probability")
    return _scores(
        completions, problem, judge, template, Verdict(verdict, None, scale), unparsed, guard
    )


@register_reward("judge_fallback", kind="group")
def judge_fallback(
    completions: list[str],
    problem: Problem,
    judge: Any,
    template: str = POINTWISE_TEMPLATE,
    verdict: str = "probability",
    unparsed: float | None = None,
    guard: bool = True,
) -> list[float]:
    """The answer check where it can read an answer, the judge where it cannot.

    A completion with a marked final answer (``\\boxed{}``, ``Answer: ...``) that math-verify
    parses, as it does the reference, is scored by math-verify
    (:func:`rlvr.rewards.final_answer.parsed_answer_matches`, event ``judge/fallback/verifier``); any other is asked of the judge (event
    ``judge/fallback/judge``) with ``template``/``verdict`` as in :func:`judge_score`.
    """
    from rlvr.rewards.final_answer import parsed_answer_matches

    decided: list[float | None] = []
    for completion in completions:
        verdict_of = parsed_answer_matches(completion, problem.answer)
        decided.append(None if verdict_of is None else float(verdict_of))
    asked = [i for i, d in enumerate(decided) if d is None]
    out: list[float] = [
        Score(d, "verifier", ("judge/fallback/verifier",)) if d is not None else Score(0.0)
        for d in decided
    ]
    if asked:
        judged = _scores(
            [completions[i] for i in asked],
            problem,
            judge,
            template,
            Verdict(verdict),
            unparsed,
            guard,
        )
        for i, s in zip(asked, judged, strict=True):
            assert isinstance(s, Score)
            out[i] = Score(float(s), s.reason, (*s.events, "judge/fallback/judge"), usage=s.usage)
    return out
