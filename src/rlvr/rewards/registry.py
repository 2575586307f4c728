"""Reward protocol, registry, and the weighted sum of named rewards the trainer logs per component.

Two kinds of reward (both pure functions of text; fields are keyword arguments):

- per-sample, ``kind="sample"``: ``fn(completion: str, problem: Problem, **fields) -> float``;
- per-group, ``kind="group"``: ``fn(completions: list[str], problem: Problem, **fields) ->
  list[float]``, called once with all completions of one prompt. Label-free rewards need the
  whole group, e.g. TTRL's majority vote (Zuo et al., 2025, "TTRL: Test-Time Reinforcement
  Learning") rewards a sample for agreeing with the group's most common answer.

A reward declares the fields it uses as keyword parameters (``num_tokens``, ``schema``,
``references``, ...). :class:`CombinedReward` passes each function only the fields it accepts
(all of them if it takes ``**fields``), so one batch can carry fields for several rewards;
:data:`SAMPLE_FIELDS` lists the per-sample fields a training run provides. Keyword parameters
that no field provides are set under ``params`` in the config.

A reward returns a real number: a ``float`` or ``int``, a ``bool`` (True scores 1.0), or a
numpy scalar; a :class:`Score` is a float that also carries a human-readable reason. Anything
else (a string such as ``"0.5"``, None, a list from a per-sample reward), a non-finite value, a
value beyond ``max_abs`` in magnitude (default :data:`DEFAULT_MAX_ABS`) or a group reward of the
wrong length is a :class:`RewardError` naming the reward, the sample and its problem.

The reward name ``task`` (alias ``verifier``) is the task's own verifier (``task.score``), so
shaping terms can be added on top of it; :class:`CombinedReward` needs the task to resolve it.
"""

from __future__ import annotations

import importlib
import inspect
import math
import multiprocessing
import numbers
import os
import queue
import reprlib
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    CancelledError,
    Future,
    ProcessPoolExecutor,
    wait,
)
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from rlvr.errors import RlvrError

if TYPE_CHECKING:
    from rlvr.data.base import Problem, Task

# Timed-out calls of a thread executor keep their threads; past this many the reward is broken.
MAX_ABANDONED_THREADS = 64

RewardKind = Literal["sample", "group"]
OnError = Literal["raise", "zero"]
ExecutorKind = Literal["thread", "process"]

# Modules whose import registers the built-in rewards (imported on first lookup).
_BUILTIN_MODULES = (
    "rlvr.rewards.answers",
    "rlvr.rewards.structure",
    "rlvr.rewards.similarity",
    "rlvr.rewards.length",
    "rlvr.rewards.code",
    "rlvr.rewards.label_free",
    "rlvr.rewards.reference_probability",
    "rlvr.rewards.reward_model",
    "rlvr.rewards.novelty",
)

# Reward names that mean the task's own verifier (resolved with the task, not the registry).
TASK_REWARD_NAMES = ("task", "verifier")

#: Largest reward magnitude accepted by default. Advantages are computed in float32, where the
#: standard deviation of [1e30, 0] is already inf (its square overflows): every advantage of the
#: group then silently becomes 0 or NaN. 1e6 leaves ample headroom for real rewards.
DEFAULT_MAX_ABS = 1e6

#: The per-sample fields a training run passes to rewards that declare them as keyword
#: parameters, each with the stand-in value :meth:`CombinedReward.check` passes at start-up:
#: ``num_tokens`` (completion length in tokens); ``token_entropy`` and ``self_certainty``
#: (means over the completion's tokens, from the rollout engine); ``reference_logprobs`` and
#: ``reference_logprobs_bare`` (per-token log-probs of the reference answer after the
#: completion's reasoning, and with no reasoning). The trainer computes the last four only
#: for rewards that declare them.
SAMPLE_FIELDS: dict[str, Any] = {
    "num_tokens": 8,
    "token_entropy": 1.0,
    "self_certainty": 1.0,
    "reference_logprobs": [-1.0, -1.0],
    "reference_logprobs_bare": [-1.0],
}

#: The reward signatures, quoted by errors about a reward that cannot be called.
SIGNATURE_HELP = (
    "a reward is f(completion: str, problem: rlvr.data.Problem, **fields) -> float, or a "
    "group reward registered with @rlvr.rewards.register_reward(name, kind='group'): "
    "f(completions: list[str], problem: rlvr.data.Problem, **fields) -> list[float]; "
    f"fields: {', '.join(SAMPLE_FIELDS)}, or fixed values set under params"
)


class SampleReward(Protocol):
    """``(completion, problem, **fields) -> float``: the reward of one completion."""

    def __call__(self, completion: str, problem: Problem, /, **fields: Any) -> float: ...


class GroupReward(Protocol):
    """``(completions, problem, **fields) -> list[float]``: rewards of one prompt's group."""

    def __call__(
        self, completions: list[str], problem: Problem, /, **fields: Any
    ) -> list[float]: ...


class Score(float):
    """A reward value (a ``float``) with a ``reason``, e.g. ``"2/3 tests passed; test 1: ..."``,
    and ``events``: what was observed while scoring, as metric names (the code rewards report
    e.g. ``"sandbox/killed/memory"``, ``"sandbox/forbidden/syscall"``).

    :class:`CombinedReward` collects the reasons into :attr:`RewardBreakdown.reasons` and
    counts the samples per event in :attr:`RewardBreakdown.events`.
    """

    reason: str
    events: tuple[str, ...]

    def __new__(cls, value: float, reason: str = "", events: tuple[str, ...] = ()) -> Score:
        obj = super().__new__(cls, value)
        obj.reason = reason
        obj.events = tuple(events)
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        return (Score, (float(self), self.reason, self.events))

    def __repr__(self) -> str:
        extra = f", {self.events!r}" if self.events else ""
        return f"Score({float(self)!r}, {self.reason!r}{extra})"


class RewardError(RlvrError, RuntimeError):
    """A reward raised, returned a bad value, or timed out, on a given sample.

    The message names the reward, the sample index in the batch, the problem id (when known)
    and the first 80 characters of the completion; the attributes carry the same for programs.
    """

    def __init__(
        self,
        reward: str,
        index: int,
        completion: str,
        detail: str,
        problem_id: str | None = None,
    ) -> None:
        self.reward, self.index, self.detail = reward, index, detail
        self.problem_id = problem_id
        self.completion_head = completion[:80]
        problem = "" if problem_id is None else f"problem {problem_id!r}, "
        super().__init__(
            f"reward {reward!r} failed on sample {index} ({problem}completion starts "
            f"{self.completion_head!r}): {detail}"
        )


class RewardConfigError(RlvrError, ValueError):
    """A reward that cannot be used as configured: an unknown name, a ``module:function`` that
    does not import, a signature that does not fit the reward protocol, unknown parameters, or
    a start-up check (:meth:`CombinedReward.check`) that failed."""


@dataclass(frozen=True)
class RegisteredReward:
    """A named reward function and its kind; an ``inline`` reward (the task's own verifier:
    trusted, cheap and bounded) runs in the caller's thread, without a worker or time limit."""

    name: str
    fn: Callable[..., Any]
    kind: RewardKind
    inline: bool = False


_REGISTRY: dict[str, RegisteredReward] = {}
_REGISTRY_LOCK = threading.Lock()


def register_reward(name: str, kind: RewardKind = "sample") -> Callable[[Callable], Callable]:
    """Decorator: register ``fn`` under ``name`` as a per-sample or per-group reward.

    The function is returned unchanged (so it stays picklable by reference for process pools).
    Registering a different function under a taken name raises ``ValueError``; re-registering
    the same ``module.qualname`` (a module imported twice) replaces the entry.
    """
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"reward name must be a non-empty string without ':', got {name!r}")
    if name in TASK_REWARD_NAMES:
        raise ValueError(f"reward name {name!r} is reserved for the task's own verifier")
    if kind not in ("sample", "group"):
        raise ValueError(f"reward {name!r}: kind must be 'sample' or 'group', got {kind!r}")

    def decorator(fn: Callable) -> Callable:
        with _REGISTRY_LOCK:
            old = _REGISTRY.get(name)
            if old is not None and _qualified(old.fn) != _qualified(fn):
                raise ValueError(
                    f"reward {name!r} is already registered to {_qualified(old.fn)}; "
                    f"cannot register {_qualified(fn)} under the same name"
                )
            _REGISTRY[name] = RegisteredReward(name, fn, kind)
        return fn

    return decorator


def _qualified(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def available_rewards() -> list[str]:
    """Names of all registered rewards (built-ins included), sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


def get_reward(name: str | Callable[..., Any]) -> RegisteredReward:
    """The registered reward ``name``; for ``"module:function"`` or a callable, that function.

    A function that was registered keeps its registered kind, otherwise it is a per-sample
    reward. Unknown names raise :class:`RewardConfigError` listing the known ones (the task's
    verifier, ``task``, is resolved by :class:`CombinedReward`, which holds the task).
    """
    if callable(name) or ":" in name:
        if callable(name):
            fn, label = name, _callable_name(name)
        else:
            from rlvr.rewards.base import load_function

            fn, label = load_function(name), name
        for entry in list(_REGISTRY.values()):
            if entry.fn is fn:
                return entry
        return RegisteredReward(label, fn, "sample")
    _load_builtins()
    entry = _REGISTRY.get(name)
    if entry is None:
        raise RewardConfigError(
            f"unknown reward {name!r}; registered rewards: "
            f"{', '.join(sorted([*_REGISTRY, *TASK_REWARD_NAMES]))} "
            "(or name a function as 'module:function')"
        )
    return entry


def _callable_name(fn: Callable[..., Any]) -> str:
    """A function's label: its ``__name__``, or ``function`` for a lambda."""
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return "function" if name == "<lambda>" else name


@dataclass(frozen=True)
class _Signature:
    """Keyword parameters a reward accepts beyond its two positional ones."""

    names: frozenset[str]
    required: frozenset[str]
    var_keyword: bool

    @classmethod
    def of(cls, fn: Callable) -> _Signature:
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError) as err:
            raise RewardConfigError(
                f"reward {_qualified(fn)}: cannot read its signature ({err}); {SIGNATURE_HELP}"
            ) from None
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][
            :2
        ]
        rest = [p for p in params if p not in positional and p.kind != p.VAR_POSITIONAL]
        keywords = [p for p in rest if p.kind != p.VAR_KEYWORD]
        return cls(
            names=frozenset(p.name for p in keywords),
            required=frozenset(p.name for p in keywords if p.default is p.empty),
            var_keyword=any(p.kind == p.VAR_KEYWORD for p in rest),
        )

    def accepts(self, name: str) -> bool:
        return self.var_keyword or name in self.names


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
    :attr:`Score.events` name (any term).
    """

    total: list[float]
    components: dict[str, list[float]]
    weights: dict[str, float]
    errors: dict[str, int]
    reasons: dict[str, list[str | None]]
    events: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def concat(parts: Sequence[RewardBreakdown]) -> RewardBreakdown:
        """The breakdown of batches scored apart (shards of one draw), as if scored together:
        per-sample lists concatenated, error and event counts added."""
        first = parts[0]
        events: dict[str, int] = {}
        for p in parts:
            for name, count in p.events.items():
                events[name] = events.get(name, 0) + count
        return RewardBreakdown(
            total=[x for p in parts for x in p.total],
            components={k: [x for p in parts for x in p.components[k]] for k in first.components},
            weights=dict(first.weights),
            errors={k: sum(p.errors[k] for p in parts) for k in first.errors},
            reasons={k: [x for p in parts for x in p.reasons[k]] for k in first.reasons},
            events=events,
        )

    @property
    def num_errors(self) -> int:
        """Failed reward calls in this batch (all rewards)."""
        return sum(self.errors.values())

    def metrics(self, prefix: str = "reward") -> dict[str, float]:
        """Flat metrics for a logger: ``{prefix}/{label}/mean`` and ``{prefix}/{label}/errors``
        per component, ``{prefix}/errors`` in total, and each event's sample count under its
        own name (e.g. ``sandbox/killed/memory``)."""
        out: dict[str, float] = {}
        for label, values in self.components.items():
            out[f"{prefix}/{label}/mean"] = sum(values) / len(values) if values else 0.0
            out[f"{prefix}/{label}/errors"] = float(self.errors[label])
        out[f"{prefix}/errors"] = float(self.num_errors)
        out.update({name: float(count) for name, count in sorted(self.events.items())})
        return out


@dataclass(frozen=True)
class _Term:
    label: str
    entry: RegisteredReward
    weight: float
    params: dict[str, Any]
    signature: _Signature


@dataclass(frozen=True)
class _Call:
    term: int
    indices: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


# Set in process-pool workers by _init_worker: where a worker reports (call id, start time).
_START_CHANNEL: Any = None


def _init_worker(channel: Any) -> None:
    global _START_CHANNEL
    _START_CHANNEL = channel


def _invoke(call_id: int, fn: Callable, args: tuple, kwargs: dict, channel: Any = None) -> Any:
    """Run one reward call, first reporting its start so the caller's timeout starts now."""
    (channel or _START_CHANNEL).put((call_id, time.monotonic()))
    return fn(*args, **kwargs)


class _DaemonThreadPool:
    """A minimal thread pool whose workers are daemon threads.

    ``ThreadPoolExecutor`` joins its threads at interpreter exit, so one reward call that never
    returns (abandoned after its timeout) would hang the program at exit; a daemon thread does
    not. A Python thread cannot be killed: an abandoned call keeps its thread until it returns.
    """

    def __init__(self, max_workers: int) -> None:
        self._max_workers = max_workers
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def submit(self, fn: Callable, *args: Any) -> Future:
        future: Future = Future()
        self._tasks.put((future, fn, args))
        if len(self._threads) < self._max_workers:
            thread = threading.Thread(target=self._work, daemon=True, name="rlvr-reward")
            thread.start()
            self._threads.append(thread)
        return future

    def _work(self) -> None:
        while (task := self._tasks.get()) is not None:
            future, fn, args = task
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as err:  # noqa: BLE001 - delivered to the caller
                    future.set_exception(err)

    def shutdown(self) -> None:
        """Stop the workers: idle ones end now (joined, briefly); one still in an abandoned
        call ends when that call returns."""
        for _ in self._threads:
            self._tasks.put(None)
        deadline = time.monotonic() + 1.0
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


class CombinedReward:
    """A weighted sum of registered rewards, with timeouts, value checks and an error policy.

    Args:
        specs: ``[(name, weight, params), ...]`` (see :meth:`RewardSpec.coerce`).
        task: the task whose verifier the reward name ``task`` (alias ``verifier``) means; it
            runs inline (in the caller's thread, no time limit: built-in verifiers are cheap).
        on_error: ``"raise"``: a reward that raises, returns a bad value (see the module
            docstring) or times out raises :class:`RewardError` naming the reward, the sample
            index, its problem and the start of the completion. ``"zero"``: it scores 0.0 and
            is counted in ``errors``.
        timeout_s: limit for each call (one sample, or one group for group rewards), counted
            from when the call starts running; None for no limit.
        max_abs: largest accepted reward magnitude (each term's unweighted value).
        max_workers: parallel calls (default ``os.cpu_count()``).
        executor: ``"thread"`` (default; right for rewards that wait on subprocesses, such as the
            code sandbox) or ``"process"`` (CPU-bound or possibly hanging Python, e.g. sympy in
            ``math``: a process that exceeds its timeout is killed and the pool restarted, and
            math-verify's own signal-based timeouts work in a worker's main thread). In thread
            mode an abandoned call cannot be killed and keeps running in the background.

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
        self._pool: Any = None
        # Where calls report their start. One queue for all thread pools (a replaced pool's
        # calls still report to it); one per process pool (a killed worker may hold its lock).
        self._thread_channel: queue.SimpleQueue = queue.SimpleQueue()
        self._channel: Any = self._thread_channel if executor == "thread" else None
        self._call_ids = iter(range(1 << 62))
        self._abandoned = 0  # thread calls timed out and still running (threads cannot be killed)

    def __enter__(self) -> CombinedReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers (killing process workers); the object can still be called after."""
        self._discard_pool(kill=True)

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
        outcomes = self._execute(calls)
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
                    f"its signature is {_qualified(term.entry.fn)}"
                    f"{inspect.signature(term.entry.fn)}; {SIGNATURE_HELP}"
                ) from None
            calls.append(call)
        probed: dict[str, float] = {}
        for call, (status, value) in zip(calls, self._execute(calls), strict=True):
            term = self.terms[call.term]
            try:
                scores = _validate(term, call, status, value, pair, self.timeout_s, self.max_abs)
            except RewardError as err:
                raise RewardConfigError(
                    f"start-up check of reward {term.label!r} failed: called "
                    f"{_describe(term, call)}: {err.detail}; {SIGNATURE_HELP}"
                ) from err
            probed[term.label] = float(scores[0])
        return probed

    def _collect(
        self, calls: list[_Call], outcomes: list[tuple[str, Any]], completions: Sequence[str]
    ) -> RewardBreakdown:
        n = len(completions)
        components = {term.label: [0.0] * n for term in self.terms}
        reasons: dict[str, list[str | None]] = {term.label: [None] * n for term in self.terms}
        errors = {term.label: 0 for term in self.terms}
        seen: dict[str, set[int]] = {}
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
                for i in call.indices:
                    reasons[term.label][i] = str(err)
                continue
            for i, score in zip(call.indices, scores, strict=True):
                components[term.label][i] = float(score)
                if isinstance(score, Score):
                    reasons[term.label][i] = score.reason
                    for event in score.events:
                        seen.setdefault(event, set()).add(i)
        total = [
            math.fsum(term.weight * components[term.label][i] for term in self.terms)
            for i in range(n)
        ]
        weights = {term.label: term.weight for term in self.terms}
        events = {name: len(samples) for name, samples in seen.items()}
        return RewardBreakdown(total, components, weights, errors, reasons, events)

    # --- execution -------------------------------------------------------------------------

    def _get_pool(self) -> Any:
        if self._pool is None:
            if self.executor == "thread":
                self._pool = _DaemonThreadPool(self.max_workers)
            else:
                method = (
                    "forkserver"
                    if "forkserver" in multiprocessing.get_all_start_methods()
                    else "spawn"
                )
                ctx = multiprocessing.get_context(method)
                self._channel = ctx.SimpleQueue()
                self._pool = ProcessPoolExecutor(
                    self.max_workers,
                    mp_context=ctx,
                    initializer=_init_worker,
                    initargs=(self._channel,),
                )
        return self._pool

    def _discard_pool(self, kill: bool) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if isinstance(pool, ProcessPoolExecutor):
            if kill:
                # concurrent.futures has no public way to stop a running task before 3.14
                # (kill_workers); its worker processes are in the private _processes map.
                for proc in list((getattr(pool, "_processes", None) or {}).values()):
                    proc.kill()
            pool.shutdown(wait=False, cancel_futures=True)
        else:
            pool.shutdown()

    def _submit(self, call_id: int, call: _Call) -> Future:
        fn = self.terms[call.term].entry.fn
        if self.executor == "thread":
            return self._get_pool().submit(
                _invoke, call_id, fn, call.args, call.kwargs, self._channel
            )
        try:
            return self._get_pool().submit(_invoke, call_id, fn, call.args, call.kwargs)
        except BrokenProcessPool:  # a worker died since the last call: start a fresh pool
            self._discard_pool(kill=True)
            return self._get_pool().submit(_invoke, call_id, fn, call.args, call.kwargs)

    def _drain_starts(self, started: dict[int, float], channel: Any) -> None:
        if channel is None:
            return
        if isinstance(channel, queue.SimpleQueue):
            while True:
                try:
                    call_id, t = channel.get_nowait()
                except queue.Empty:
                    return
                started[call_id] = t
        while not channel.empty():
            call_id, t = channel.get()
            started[call_id] = t

    def _execute(self, calls: list[_Call]) -> list[tuple[str, Any]]:
        """Run the calls: inline terms' calls in this thread, the others on the workers, at most
        ``max_workers`` at a time; each outcome is ("ok", value), ("error", exception) or
        ("timeout", None)."""
        outcomes: list[tuple[str, Any] | None] = [
            _run_inline(self.terms[call.term].entry.fn, call)
            if self.terms[call.term].entry.inline
            else None
            for call in calls
        ]
        todo = deque(k for k, outcome in enumerate(outcomes) if outcome is None)
        inflight: dict[Future, tuple[int, int, Any]] = {}  # future -> (call, call id, pool)
        started: dict[int, float] = {}
        killed_pools: list[Any] = []  # held, so that no new pool can reuse their identity
        while todo or inflight:
            while todo and len(inflight) < self.max_workers:
                k = todo.popleft()
                call_id = next(self._call_ids)
                inflight[self._submit(call_id, calls[k])] = (k, call_id, self._pool)
            done, _ = wait(list(inflight), timeout=0.05, return_when=FIRST_COMPLETED)
            for future in done:
                k, call_id, pool = inflight.pop(future)
                started.pop(call_id, None)
                try:
                    outcomes[k] = ("ok", future.result())
                except (BrokenProcessPool, CancelledError) as err:
                    if any(pool is killed for killed in killed_pools):
                        todo.appendleft(k)  # collateral of killing a timed-out worker: rerun
                    else:
                        outcomes[k] = ("error", RuntimeError(f"reward worker process died ({err})"))
                except BaseException as err:  # noqa: BLE001 - reported per call
                    outcomes[k] = ("error", err)
            if self.timeout_s is None:
                continue
            self._drain_starts(started, self._channel)
            now = time.monotonic()
            expired = [
                f
                for f, (_, cid, _) in inflight.items()
                if cid in started and now - started[cid] > self.timeout_s
            ]
            if expired:
                for future in expired:
                    k, call_id, _ = inflight.pop(future)
                    started.pop(call_id, None)
                    outcomes[k] = ("timeout", None)
                if self.executor == "thread":
                    self._abandoned += len(expired)
                    if self._abandoned > MAX_ABANDONED_THREADS:
                        raise _too_many_abandoned(self.terms[calls[k].term].label, calls[k])
                if self.executor == "process":
                    killed_pools.append(self._pool)
                self._discard_pool(kill=True)
        return [o for o in outcomes if o is not None]


def _too_many_abandoned(label: str, call: _Call) -> RewardError:
    """The error that stops a run whose timed-out reward calls pile up in threads."""
    text = call.args[0] if isinstance(call.args[0], str) else call.args[0][0]
    return RewardError(
        label,
        call.indices[0],
        text,
        f"more than {MAX_ABANDONED_THREADS} calls timed out and still run in the background "
        "(a thread cannot be stopped): fix the reward, or run it in worker processes that are "
        "killed on timeout (executor='process')",
        call.args[1].id,
    )


def _run_inline(fn: Callable, call: _Call) -> tuple[str, Any]:
    try:
        return ("ok", fn(*call.args, **call.kwargs))
    except Exception as err:  # noqa: BLE001 - reported per call, as from a worker
        return ("error", err)


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
        signature = _Signature.of(entry.fn)
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
) -> list[_Call]:
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
    if term.entry.kind == "sample":
        return [
            _Call(
                t,
                (i,),
                (completions[i], problems[i]),
                {**term.params, **{k: fields[k][i] for k in passed}},
            )
            for i in range(len(completions))
        ]
    return [
        _Call(
            t,
            tuple(idx),
            ([completions[i] for i in idx], problems[idx[0]]),
            {**term.params, **{k: [fields[k][i] for i in idx] for k in passed}},
        )
        for idx in groups
    ]


def _validate(
    term: _Term,
    call: _Call,
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
        raise fail(first, f"timed out after {timeout_s}s")
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


def _show(value: Any) -> str:
    """A value for an error message: its type and a short repr, e.g. ``str '0.5'``."""
    return f"{type(value).__name__} {reprlib.repr(value)}"


def _describe(term: _Term, call: _Call) -> str:
    """A reward call as text, e.g. ``f('Answer: 4', <Problem 'p0'>, num_tokens=8)``."""
    completions, problem = call.args
    args = [reprlib.repr(completions), f"<Problem {problem.id!r}>"]
    args += [f"{k}={reprlib.repr(v)}" for k, v in call.kwargs.items()]
    return f"{term.label}({', '.join(args)})"
