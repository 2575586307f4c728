"""The run's reward as one object: a weighted sum of named rewards, scored per component.

:class:`CombinedReward` holds one term per :class:`RewardSpec` (a reward name, weight, fixed
params and label), plans each batch into calls (one per sample, or one per group for group
rewards; each term gets only the fields it accepts, see :mod:`rlvr.rewards.protocol`), runs
them on a :class:`~rlvr.rewards.executor.RewardExecutor` under ``timeout_s``, checks every value
(a real number, finite, at most ``max_abs``; a group reward returns one per completion) and
returns a :class:`RewardBreakdown`: the weighted total per sample, the unweighted component per
term, errors, reasons and events. :meth:`CombinedReward.check` probes every term once before
the first rollout.

The reward name ``task`` (alias ``verifier``) is the task's own verifier (``task.score``), so
shaping terms can be added on top of it; :class:`CombinedReward` needs the task to resolve it.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import os
import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from rlvr.errors import RlvrError
from rlvr.rewards.executor import ExecutorKind, RewardCall, RewardExecutor
from rlvr.rewards.protocol import (
    DEFAULT_MAX_ABS,
    SAMPLE_FIELDS,
    SIGNATURE_HELP,
    RewardConfigError,
    RewardError,
    RewardSignature,
    Score,
    qualified_name,
)
from rlvr.rewards.registry import TASK_REWARD_NAMES, RegisteredReward, get_reward

if TYPE_CHECKING:
    from rlvr.data.base import Problem, Task

OnError = Literal["raise", "zero"]


@dataclass(frozen=True)
class RewardSpec:
    """One term of a :class:`CombinedReward`: reward ``name`` (a registered name, ``task``,
    ``"module:function"``, or a function itself), its ``weight``, fixed ``params`` (keyword
    arguments from the config) and the ``label`` its component is logged under (defaults to the
    name; for a function, its registered name or ``__name__``; needed when one reward appears
    twice)."""

    name: str | Callable[..., Any]
    weight: float = 1.0
    params: Mapping[str, Any] = field(default_factory=dict)
    label: str | None = None

    @classmethod
    def coerce(cls, spec: Any) -> RewardSpec:
        """Accept a RewardSpec, a ``name`` or function, ``(name, weight)``, ``(name, weight,
        params)`` or a mapping with keys ``name``, ``weight``, ``params``, ``label``."""
        if isinstance(spec, RewardSpec):
            return spec
        if isinstance(spec, str) or callable(spec):
            return cls(spec)
        if isinstance(spec, Mapping):
            unknown = set(spec) - {"name", "weight", "params", "label"}
            if unknown or "name" not in spec:
                raise RewardConfigError(
                    f"reward spec {dict(spec)!r}: expected keys name, weight, params, label"
                )
            return cls(
                spec["name"],
                float(spec.get("weight", 1.0)),
                dict(spec.get("params") or {}),
                spec.get("label"),
            )
        if isinstance(spec, Sequence) and 1 <= len(spec) <= 3:
            name, weight, params = (*spec, 1.0, {})[:3] if len(spec) == 1 else (*spec, {})[:3]
            if not (isinstance(name, str) or callable(name)) or not isinstance(
                params, Mapping | None
            ):
                raise RewardConfigError(f"reward spec {spec!r}: expected (name, weight, params)")
            return cls(name, float(weight), dict(params or {}))
        raise RewardConfigError(
            f"reward spec {spec!r}: expected (name, weight, params), a mapping or a RewardSpec"
        )


@dataclass(frozen=True)
class RewardBreakdown:
    """Scores of one batch.

    ``total[i] = sum_k weights[k] * components[k][i]``; ``components`` are the unweighted
    scores per reward label (0.0 where the reward failed under ``on_error="zero"``); ``errors``
    counts failures per label; ``reasons`` holds the :class:`Score` reason or error message per
    sample (None where the reward gave none); ``events`` counts the samples that reported each
    :attr:`Score.events` name (any term); ``parts`` holds, per ``label/part``, each sample's
    value of that :attr:`Score.parts` entry (a rubric's criteria; None where the sample
    reported none); ``usage`` sums
    :attr:`Score.usage` (a judge's calls, tokens and seconds); ``steps`` holds, per label of a
    process reward, each sample's :attr:`Score.steps` (None where it reported none).
    """

    total: list[float]
    components: dict[str, list[float]]
    weights: dict[str, float]
    errors: dict[str, int]
    reasons: dict[str, list[str | None]]
    events: dict[str, int] = field(default_factory=dict)
    parts: dict[str, list[float | None]] = field(default_factory=dict)
    usage: dict[str, float] = field(default_factory=dict)
    steps: dict[str, list[tuple[tuple[int, float], ...] | None]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.total)

    @staticmethod
    def single(label: str, values: list[float]) -> RewardBreakdown:
        """The rewards ``values`` as one term ``label`` of weight 1 that gave no reasons (an
        environment's returns, the data's rewards)."""
        return RewardBreakdown(
            total=list(values),
            components={label: list(values)},
            weights={label: 1.0},
            errors={label: 0},
            reasons={label: [None] * len(values)},
        )

    def select(self, rows: list[int]) -> RewardBreakdown:
        """The samples ``rows`` (in that order); counts and usage stay those of the whole batch
        (the work was done)."""
        return dataclasses.replace(
            self,
            total=[self.total[i] for i in rows],
            components={k: [v[i] for i in rows] for k, v in self.components.items()},
            reasons={k: [v[i] for i in rows] for k, v in self.reasons.items()},
            parts={k: [v[i] for i in rows] for k, v in self.parts.items()},
            steps={k: [v[i] for i in rows] for k, v in self.steps.items()},
        )

    def step_rewards(self) -> list[list[tuple[int, float]]] | None:
        """Each sample's step rewards ``[(end, value)]`` summed over the process terms with
        their weights (steps keyed by their end offset), or None when no term scores steps."""
        if not self.steps:
            return None
        out: list[list[tuple[int, float]]] = []
        for i in range(len(self.total)):
            summed: dict[int, float] = {}
            for label, rows in self.steps.items():
                for end, value in rows[i] or ():
                    summed[end] = summed.get(end, 0.0) + self.weights[label] * value
            out.append(sorted(summed.items()))
        return out

    @staticmethod
    def concat(parts: Sequence[RewardBreakdown]) -> RewardBreakdown:
        """The breakdown of batches scored apart (shards of one draw), as if scored together:
        per-sample lists concatenated, error and event counts added."""
        first = parts[0]
        events: dict[str, int] = {}
        usage: dict[str, float] = {}
        names = list(dict.fromkeys(name for p in parts for name in p.parts))
        subscores = {
            name: [x for p in parts for x in p.parts.get(name, [None] * len(p.total))]
            for name in names
        }
        stepped = list(dict.fromkeys(name for p in parts for name in p.steps))
        steps = {
            name: [x for p in parts for x in p.steps.get(name, [None] * len(p.total))]
            for name in stepped
        }
        for p in parts:
            for name, count in p.events.items():
                events[name] = events.get(name, 0) + count
            for name, amount in p.usage.items():
                usage[name] = usage.get(name, 0.0) + amount
        return RewardBreakdown(
            total=[x for p in parts for x in p.total],
            components={k: [x for p in parts for x in p.components[k]] for k in first.components},
            weights=dict(first.weights),
            errors={k: sum(p.errors[k] for p in parts) for k in first.errors},
            reasons={k: [x for p in parts for x in p.reasons[k]] for k in first.reasons},
            events=events,
            parts=subscores,
            usage=usage,
            steps=steps,
        )

    @property
    def num_errors(self) -> int:
        """Failed reward calls in this batch (all rewards)."""
        return sum(self.errors.values())

    def metrics(self, prefix: str = "reward") -> dict[str, float]:
        """Flat metrics for a logger: ``{prefix}/{label}/mean`` and ``{prefix}/{label}/errors``
        per component, ``{prefix}/errors`` in total, each event's sample count under its
        own name (e.g. ``sandbox/killed/memory``), each part's mean as
        ``{prefix}/{label}/{part}`` and the usage under its own names (``time/judge``)."""
        out: dict[str, float] = {}
        for label, values in self.components.items():
            out[f"{prefix}/{label}/mean"] = sum(values) / len(values) if values else 0.0
            out[f"{prefix}/{label}/errors"] = float(self.errors[label])
        out[f"{prefix}/errors"] = float(self.num_errors)
        out.update({name: float(count) for name, count in sorted(self.events.items())})
        for name, values in sorted(self.parts.items()):
            given = [v for v in values if v is not None]
            if given:
                out[f"{prefix}/{name}"] = sum(given) / len(given)
        out.update(sorted(self.usage.items()))
        return out


@dataclass(frozen=True)
class _Term:
    label: str
    entry: RegisteredReward
    weight: float
    params: dict[str, Any]
    signature: RewardSignature


class CombinedReward:
    """A weighted sum of registered rewards, with timeouts, value checks and an error policy.

    Args:
        specs: ``[(name, weight, params), ...]`` (see :meth:`RewardSpec.coerce`).
        task: the task whose verifier the reward name ``task`` (alias ``verifier``) means; it
            runs inline (in the caller's thread, no time limit: built-in verifiers are cheap).
        on_error: ``"raise"``: a reward that raises, returns a bad value (see
            :mod:`rlvr.rewards.protocol`) or times out raises :class:`RewardError` naming the
            reward, the sample index, its problem and the start of the completion. ``"zero"``:
            it scores 0.0 and is counted in ``errors``.
        timeout_s: limit for each call (one sample, or one group for group rewards), counted
            from when the call starts running; None for no limit.
        max_abs: largest accepted reward magnitude (each term's unweighted value).
        max_workers: parallel calls (default ``os.cpu_count()``).
        executor: ``"thread"`` (default; right for rewards that wait on subprocesses, such as the
            code sandbox) or ``"process"`` (CPU-bound or possibly hanging Python, e.g. sympy in
            ``math``: a process that exceeds its timeout is killed and the pool restarted, and
            math-verify's own signal-based timeouts work in a worker's main thread). In thread
            mode an abandoned call cannot be killed and keeps running in the background
            (:mod:`rlvr.rewards.executor`).

    Use as a context manager, or call :meth:`close`, to release the workers.
    """

    def __init__(
        self,
        specs: Sequence[Any],
        *,
        task: Task | None = None,
        on_error: OnError = "raise",
        timeout_s: float | None = 60.0,
        max_abs: float = DEFAULT_MAX_ABS,
        max_workers: int | None = None,
        executor: ExecutorKind = "thread",
    ) -> None:
        if on_error not in ("raise", "zero"):
            raise RewardConfigError(f"on_error must be 'raise' or 'zero', got {on_error!r}")
        if executor not in ("thread", "process"):
            raise RewardConfigError(f"executor must be 'thread' or 'process', got {executor!r}")
        if timeout_s is not None and not timeout_s > 0:
            raise RewardConfigError(f"timeout_s must be positive or None, got {timeout_s!r}")
        if not max_abs > 0:
            raise RewardConfigError(f"max_abs must be positive, got {max_abs!r}")
        self.terms = _make_terms([RewardSpec.coerce(s) for s in specs], task)
        self.on_error: OnError = on_error
        self.timeout_s = timeout_s
        self.max_abs = max_abs
        self.max_workers = max(1, max_workers or os.cpu_count() or 1)
        self.executor: ExecutorKind = executor
        self._runner = RewardExecutor(executor, self.max_workers, timeout_s)

    def __enter__(self) -> CombinedReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers (killing process workers); the object can still be called after."""
        self._runner.close()

    def field_names(self) -> set[str]:
        """Per-sample fields some term declares as a keyword parameter (e.g. ``num_tokens``,
        ``self_certainty``), so a caller computes only what the rewards read."""
        return {name for term in self.terms for name in term.signature.names}

    def __call__(
        self,
        completions: Sequence[str],
        problems: Sequence[Problem],
        group_ids: Sequence[int] | None = None,
        **fields: Sequence[Any],
    ) -> RewardBreakdown:
        """Score a batch.

        Args:
            completions: N completion texts.
            problems: N problems (sample i answers ``problems[i]``).
            group_ids: N group ids for group rewards (samples of one prompt share an id);
                default: samples with the same ``problem.id`` form a group.
            **fields: per-sample fields, each a list or tuple of length N (e.g.
                ``num_tokens=[...]``); reward ``r`` receives ``fields[k][i]`` (group rewards: the
                list over the group) for each ``k`` it accepts.
        """
        n = len(completions)
        if len(problems) != n:
            raise ValueError(f"got {n} completions but {len(problems)} problems")
        for key, values in fields.items():
            if not isinstance(values, (list, tuple)) or len(values) != n:
                raise ValueError(
                    f"field {key!r} must be a list or tuple with one value per completion "
                    f"({n}), got {type(values).__name__}"
                    + (f" of length {len(values)}" if isinstance(values, Sequence) else "")
                )
        groups = _groups(problems, group_ids)
        calls = [
            call
            for t, term in enumerate(self.terms)
            for call in _plan(t, term, completions, problems, groups, fields)
        ]
        outcomes = self._runner.run(calls)
        return self._collect(calls, outcomes, completions)

    def check(self, problem: Problem, text: str | None = None, **fields: Any) -> dict[str, float]:
        """Start-up probe: call every term once on ``problem``, before any rollout, so that a
        reward that cannot run fails at once rather than in the middle of a run.

        Each term is called as in training (in its worker, under ``timeout_s``) with ``text``
        (default ``"Answer: {problem.answer}"``, a well-formed completion; a group reward gets a
        group of two copies) and the fields it declares: ``fields`` (one value each) over the
        stand-ins of :data:`SAMPLE_FIELDS`. Whatever ``on_error`` says, a term that cannot be
        called with these arguments, needs a field nobody provides, raises, times out or returns
        a bad value raises :class:`RewardConfigError` naming the reward, the call it was given
        and the documented signature. Returns each term's (unweighted) value on ``text``.
        """
        text = f"Answer: {problem.answer}" if text is None else text
        pair = [text, text]
        values = {k: [v, v] for k, v in {**SAMPLE_FIELDS, **fields}.items()}
        calls = []
        for t, term in enumerate(self.terms):
            try:
                call = _plan(t, term, pair, [problem, problem], [[0, 1]], values)[0]
            except RewardConfigError as err:
                raise RewardConfigError(f"{err}; {SIGNATURE_HELP}") from None
            try:
                inspect.signature(term.entry.fn).bind(*call.args, **call.kwargs)
            except TypeError as err:
                raise RewardConfigError(
                    f"reward {term.label!r} cannot be called as {_describe(term, call)} ({err}); "
                    f"its signature is {qualified_name(term.entry.fn)}"
                    f"{inspect.signature(term.entry.fn)}; {SIGNATURE_HELP}"
                ) from None
            calls.append(call)
        probed: dict[str, float] = {}
        for call, (status, value) in zip(calls, self._runner.run(calls), strict=True):
            term = self.terms[call.term]
            try:
                scores = _validate(term, call, status, value, pair, self.timeout_s, self.max_abs)
            except RewardError as err:
                raise RewardConfigError(
                    f"start-up check of reward {term.label!r} failed: called "
                    f"{_describe(term, call)}: {err.detail}; {_check_hint(status, err)}"
                ) from err
            probed[term.label] = float(scores[0])
        return probed

    def _collect(
        self, calls: list[RewardCall], outcomes: list[tuple[str, Any]], completions: Sequence[str]
    ) -> RewardBreakdown:
        n = len(completions)
        components = {term.label: [0.0] * n for term in self.terms}
        reasons: dict[str, list[str | None]] = {term.label: [None] * n for term in self.terms}
        errors = {term.label: 0 for term in self.terms}
        seen: dict[str, set[int]] = {}
        parts: dict[str, list[float | None]] = {}
        usage: dict[str, float] = {}
        steps: dict[str, list[tuple[tuple[int, float], ...] | None]] = {}
        for call, (status, value) in zip(calls, outcomes, strict=True):
            term = self.terms[call.term]
            try:
                scores = _validate(
                    term, call, status, value, completions, self.timeout_s, self.max_abs
                )
            except RewardError as err:
                if self.on_error == "raise":
                    raise
                errors[term.label] += 1
                if term.params.get("judge") is not None:  # a judge reward's failed call
                    usage["judge/failures"] = usage.get("judge/failures", 0.0) + 1
                for i in call.indices:
                    reasons[term.label][i] = str(err)
                continue
            for i, score in zip(call.indices, scores, strict=True):
                components[term.label][i] = float(score)
                if isinstance(score, Score):
                    reasons[term.label][i] = score.reason
                    for event in score.events:
                        seen.setdefault(event, set()).add(i)
                    for part, value in score.parts.items():
                        parts.setdefault(f"{term.label}/{part}", [None] * n)[i] = float(value)
                    for name, amount in score.usage.items():
                        usage[name] = usage.get(name, 0.0) + float(amount)
                    if score.steps:
                        steps.setdefault(term.label, [None] * n)[i] = score.steps
        total = [
            math.fsum(term.weight * components[term.label][i] for term in self.terms)
            for i in range(n)
        ]
        weights = {term.label: term.weight for term in self.terms}
        events = {name: len(samples) for name, samples in seen.items()}
        return RewardBreakdown(
            total, components, weights, errors, reasons, events, parts, usage, steps
        )


def _task_entry(name: str, task: Task | None) -> RegisteredReward:
    """The task's own verifier as an inline per-sample reward."""
    if task is None:
        raise RewardConfigError(
            f"reward {name!r} is the task's own verifier: build the reward with the task "
            "(CombinedReward(..., task=task) or rlvr.rewards.build_reward(task, ...))"
        )
    return RegisteredReward(name, task.score, "sample", inline=True)


def _make_terms(specs: list[RewardSpec], task: Task | None) -> list[_Term]:
    if not specs:
        raise RewardConfigError("a combined reward needs at least one reward spec")
    terms: list[_Term] = []
    for spec in specs:
        if isinstance(spec.name, str) and spec.name in TASK_REWARD_NAMES:
            entry = _task_entry(spec.name, task)
        else:
            entry = get_reward(spec.name)
        label = spec.label or (spec.name if isinstance(spec.name, str) else entry.name)
        if any(t.label == label for t in terms):
            raise RewardConfigError(
                f"reward label {label!r} appears twice; give each term its own label"
            )
        if not math.isfinite(spec.weight):
            raise RewardConfigError(f"reward {label!r}: weight must be finite, got {spec.weight}")
        signature = RewardSignature.of(entry.fn)
        unknown = sorted(k for k in spec.params if not signature.accepts(k))
        if unknown:
            raise RewardConfigError(
                f"reward {label!r}: unknown parameter(s) {unknown}; accepted: "
                f"{sorted(signature.names)}"
            )
        terms.append(_Term(label, entry, spec.weight, dict(spec.params), signature))
    return terms


def _groups(problems: Sequence[Problem], group_ids: Sequence[int] | None) -> list[list[int]]:
    keys: Sequence[Any] = [p.id for p in problems] if group_ids is None else group_ids
    if len(keys) != len(problems):
        raise ValueError(f"got {len(keys)} group ids for {len(problems)} completions")
    order: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        order.setdefault(key, []).append(i)
    return list(order.values())


def _plan(
    t: int,
    term: _Term,
    completions: Sequence[str],
    problems: Sequence[Problem],
    groups: list[list[int]],
    fields: Mapping[str, Sequence[Any]],
) -> list[RewardCall]:
    """The calls of one reward term for a batch: one per sample, or one per group."""
    passed = [k for k in fields if term.signature.accepts(k)]
    clash = sorted(set(passed) & set(term.params))
    if clash:
        raise RewardConfigError(
            f"reward {term.label!r}: {clash} given both as parameters and as per-sample fields"
        )
    missing = sorted(term.signature.required - set(term.params) - set(passed))
    if missing:
        raise RewardConfigError(
            f"reward {term.label!r} needs the field(s) {missing}, which no field provides "
            f"(fields given: {sorted(fields)}) and params do not set"
        )
    fn, inline = term.entry.fn, term.entry.inline
    if term.entry.kind == "sample":
        return [
            RewardCall(
                t,
                term.label,
                fn,
                inline,
                (i,),
                (completions[i], problems[i]),
                {**term.params, **{k: fields[k][i] for k in passed}},
            )
            for i in range(len(completions))
        ]
    return [
        RewardCall(
            t,
            term.label,
            fn,
            inline,
            tuple(idx),
            ([completions[i] for i in idx], problems[idx[0]]),
            {**term.params, **{k: [fields[k][i] for i in idx] for k in passed}},
        )
        for idx in groups
    ]


def _validate(
    term: _Term,
    call: RewardCall,
    status: str,
    value: Any,
    completions: Sequence[str],
    timeout_s: float | None,
    max_abs: float,
) -> list[float]:
    """The call's scores, one per index, or RewardError naming the reward, sample and problem."""
    first, problem_id = call.indices[0], call.args[1].id

    def fail(index: int, detail: str) -> RewardError:
        return RewardError(term.label, index, completions[index], detail, problem_id)

    if status == "timeout":
        raise fail(first, f"timed out after {timeout_s}s (reward.timeout_s){_judge_wait(term)}")
    if status == "error":
        raise fail(first, f"{type(value).__name__}: {value}") from value
    if term.entry.kind == "sample":
        values = [value]
    elif isinstance(value, np.ndarray) and value.ndim == 1:
        values = value.tolist()
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        values = list(value)
    else:
        raise fail(first, f"group reward returned {_show(value)}, expected a list of floats")
    if len(values) != len(call.indices):
        raise fail(
            first, f"group reward returned {len(values)} values for a group of {len(call.indices)}"
        )
    scores = []
    for i, v in zip(call.indices, values, strict=True):
        if type(v) is not float and not isinstance(v, numbers.Real | np.bool_):  # fast path
            raise fail(
                i, f"returned {_show(v)}, expected a real number (float, int, bool, numpy scalar)"
            )
        if not math.isfinite(v):
            raise fail(i, f"returned non-finite {v}")
        if abs(v) > max_abs:
            raise fail(
                i,
                f"returned {float(v):g}, beyond the bound max_abs={max_abs:g}: rewards this large "
                "overflow the float32 advantage statistics; rescale the reward",
            )
        scores.append(v if isinstance(v, Score) else float(v))
    return scores


def _check_hint(status: str, err: RewardError) -> str:
    """What a failed start-up check adds to its detail: the reward protocol for a reward that
    raised or returned a bad value; not for a call that timed out (its detail names
    reward.timeout_s) or rlvr's own error (a judge's endpoint down or too slow, which names the
    judge's settings), where the check's own rule is what the user needs."""
    if status == "timeout" or isinstance(err.__cause__, RlvrError):
        return "a start-up check stops the run whatever reward.on_error says"
    return SIGNATURE_HELP


def _judge_wait(term: _Term) -> str:
    """For a term whose judge is an endpoint (``params.judge``: a named judge's config, or an
    inline mapping, defaults filled by :func:`~rlvr.reward_models.judges.judge_config`): how long
    each request to it is waited for, which the reward's time limit cut short; else nothing."""
    from rlvr.reward_models.judges import judge_config

    judge = term.params.get("judge")
    if not isinstance(judge, Mapping) or judge.get("engine") != "http":
        return ""
    try:
        config = judge_config(judge)
    except ValueError:  # not a judge's config: its own error is not this timeout's
        return ""
    tries = config.retries + 1
    return (
        f", before its judge at {config.base_url} answered or failed (each request to it is "
        f"waited for up to timeout_s x (retries + 1) = {config.timeout_s:g} s x {tries} = "
        f"{config.timeout_s * tries:g} s, once one of its max_concurrency = "
        f"{config.max_concurrency} slots is free): raise reward.timeout_s above that"
    )


def _show(value: Any) -> str:
    """A value for an error message: its type and a short repr, e.g. ``str '0.5'``."""
    return f"{type(value).__name__} {reprlib.repr(value)}"


def _describe(term: _Term, call: RewardCall) -> str:
    """A reward call as text, e.g. ``f('Answer: 4', <Problem 'p0'>, num_tokens=8)``."""
    completions, problem = call.args
    args = [reprlib.repr(completions), f"<Problem {problem.id!r}>"]
    args += [f"{k}={reprlib.repr(v)}" for k, v in call.kwargs.items()]
    return f"{term.label}({', '.join(args)})"
