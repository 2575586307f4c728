"""Reward protocol, registry, and the weighted sum of named rewards the trainer logs per component.

Two kinds of reward (both pure functions of text; fields are keyword arguments):

- per-sample, ``kind="sample"``: ``fn(completion: str, problem: Problem, **fields) -> float``;
- per-group, ``kind="group"``: ``fn(completions: list[str], problem: Problem, **fields) ->
  list[float]``, called once with all completions of one prompt. Label-free rewards need the
  whole group, e.g. TTRL's majority vote (Zuo et al., 2025, "TTRL: Test-Time Reinforcement
  Learning") rewards a sample for agreeing with the group's most common answer.

A reward declares the fields it uses as keyword parameters (``num_tokens``, ``schema``,
``references``, ...). :class:`CombinedReward` passes each function only the fields it accepts
(all of them if it takes ``**fields``), so one batch can carry fields for several rewards.
A reward may return a :class:`Score`, a float that also carries a human-readable reason.
"""

from __future__ import annotations

import importlib
import inspect
import math
import multiprocessing
import numbers
import os
import queue
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

from rlvr.errors import RlvrError

if TYPE_CHECKING:
    from rlvr.data.base import Problem

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


class SampleReward(Protocol):
    """``(completion, problem, **fields) -> float``: the reward of one completion."""

    def __call__(self, completion: str, problem: Problem, /, **fields: Any) -> float: ...


class GroupReward(Protocol):
    """``(completions, problem, **fields) -> list[float]``: rewards of one prompt's group."""

    def __call__(
        self, completions: list[str], problem: Problem, /, **fields: Any
    ) -> list[float]: ...


class Score(float):
    """A reward value (a ``float``) with a ``reason``, e.g. ``"2/3 tests passed; test 1: ..."``.

    :class:`CombinedReward` collects the reasons into :attr:`RewardBreakdown.reasons`.
    """

    reason: str

    def __new__(cls, value: float, reason: str = "") -> Score:
        obj = super().__new__(cls, value)
        obj.reason = reason
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        return (Score, (float(self), self.reason))

    def __repr__(self) -> str:
        return f"Score({float(self)!r}, {self.reason!r})"


class RewardError(RlvrError, RuntimeError):
    """A reward raised, returned a bad value, or timed out, on a given sample.

    The message names the reward, the sample index and the first 80 characters of the
    completion; the attributes carry the same for programs.
    """

    def __init__(self, reward: str, index: int, completion: str, detail: str) -> None:
        self.reward, self.index, self.detail = reward, index, detail
        self.completion_head = completion[:80]
        super().__init__(
            f"reward {reward!r} failed on sample {index} (completion starts "
            f"{self.completion_head!r}): {detail}"
        )


@dataclass(frozen=True)
class RegisteredReward:
    """A named reward function and its kind."""

    name: str
    fn: Callable[..., Any]
    kind: RewardKind


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


def get_reward(name: str) -> RegisteredReward:
    """The registered reward ``name``; or, for ``"module:function"``, that function.

    A ``module:function`` that was registered keeps its registered kind, otherwise it is a
    per-sample reward. Unknown names raise ``ValueError`` listing the known ones.
    """
    if ":" in name:
        from rlvr.rewards.base import load_function

        fn = load_function(name)
        for entry in list(_REGISTRY.values()):
            if entry.fn is fn:
                return entry
        return RegisteredReward(name, fn, "sample")
    _load_builtins()
    entry = _REGISTRY.get(name)
    if entry is None:
        raise ValueError(
            f"unknown reward {name!r}; registered rewards: {', '.join(sorted(_REGISTRY))} "
            "(or name a function as 'module:function')"
        )
    return entry


@dataclass(frozen=True)
class _Signature:
    """Keyword parameters a reward accepts beyond its two positional ones."""

    names: frozenset[str]
    required: frozenset[str]
    var_keyword: bool

    @classmethod
    def of(cls, fn: Callable) -> _Signature:
        params = list(inspect.signature(fn).parameters.values())
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
    """One term of a :class:`CombinedReward`: reward ``name``, its ``weight``, fixed ``params``
    (keyword arguments from the config) and the ``label`` its component is logged under
    (defaults to ``name``; needed when one reward appears twice)."""

    name: str
    weight: float = 1.0
    params: Mapping[str, Any] = field(default_factory=dict)
    label: str | None = None

    @classmethod
    def coerce(cls, spec: Any) -> RewardSpec:
        """Accept a RewardSpec, ``name``, ``(name, weight)``, ``(name, weight, params)`` or a
        mapping with keys ``name``, ``weight``, ``params``, ``label``."""
        if isinstance(spec, RewardSpec):
            return spec
        if isinstance(spec, str):
            return cls(spec)
        if isinstance(spec, Mapping):
            unknown = set(spec) - {"name", "weight", "params", "label"}
            if unknown or "name" not in spec:
                raise ValueError(
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
            if not isinstance(name, str) or not isinstance(params, Mapping | None):
                raise ValueError(f"reward spec {spec!r}: expected (name, weight, params)")
            return cls(name, float(weight), dict(params or {}))
        raise ValueError(
            f"reward spec {spec!r}: expected (name, weight, params), a mapping or a RewardSpec"
        )


@dataclass(frozen=True)
class RewardBreakdown:
    """Scores of one batch.

    ``total[i] = sum_k weights[k] * components[k][i]``; ``components`` are the unweighted
    scores per reward label (0.0 where the reward failed under ``on_error="zero"``); ``errors``
    counts failures per label; ``reasons`` holds the :class:`Score` reason or error message per
    sample (None where the reward gave none).
    """

    total: list[float]
    components: dict[str, list[float]]
    weights: dict[str, float]
    errors: dict[str, int]
    reasons: dict[str, list[str | None]]

    @property
    def num_errors(self) -> int:
        """Failed reward calls in this batch (all rewards)."""
        return sum(self.errors.values())

    def metrics(self, prefix: str = "reward") -> dict[str, float]:
        """Flat metrics for a logger: ``{prefix}/{label}/mean`` and ``{prefix}/{label}/errors``
        per component, and ``{prefix}/errors`` in total."""
        out: dict[str, float] = {}
        for label, values in self.components.items():
            out[f"{prefix}/{label}/mean"] = sum(values) / len(values) if values else 0.0
            out[f"{prefix}/{label}/errors"] = float(self.errors[label])
        out[f"{prefix}/errors"] = float(self.num_errors)
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
        for _ in self._threads:
            self._tasks.put(None)


class CombinedReward:
    """A weighted sum of registered rewards, with timeouts and an error policy.

    Args:
        specs: ``[(name, weight, params), ...]`` (see :meth:`RewardSpec.coerce`).
        on_error: ``"raise"``: a reward that raises, returns a non-finite or non-numeric value,
            or times out raises :class:`RewardError` naming the reward, the sample index and the
            start of the completion. ``"zero"``: it scores 0.0 and is counted in ``errors``.
        timeout_s: limit for each call (one sample, or one group for group rewards), counted
            from when the call starts running; None for no limit.
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
        on_error: OnError = "raise",
        timeout_s: float | None = 60.0,
        max_workers: int | None = None,
        executor: ExecutorKind = "thread",
    ) -> None:
        if on_error not in ("raise", "zero"):
            raise ValueError(f"on_error must be 'raise' or 'zero', got {on_error!r}")
        if executor not in ("thread", "process"):
            raise ValueError(f"executor must be 'thread' or 'process', got {executor!r}")
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive or None, got {timeout_s!r}")
        self.terms = _make_terms([RewardSpec.coerce(s) for s in specs])
        self.on_error: OnError = on_error
        self.timeout_s = timeout_s
        self.max_workers = max(1, max_workers or os.cpu_count() or 1)
        self.executor: ExecutorKind = executor
        self._pool: Any = None
        # Where calls report their start. One queue for all thread pools (a replaced pool's
        # calls still report to it); one per process pool (a killed worker may hold its lock).
        self._thread_channel: queue.SimpleQueue = queue.SimpleQueue()
        self._channel: Any = self._thread_channel if executor == "thread" else None
        self._call_ids = iter(range(1 << 62))

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

    def _collect(
        self, calls: list[_Call], outcomes: list[tuple[str, Any]], completions: Sequence[str]
    ) -> RewardBreakdown:
        n = len(completions)
        components = {term.label: [0.0] * n for term in self.terms}
        reasons: dict[str, list[str | None]] = {term.label: [None] * n for term in self.terms}
        errors = {term.label: 0 for term in self.terms}
        for call, (status, value) in zip(calls, outcomes, strict=True):
            term = self.terms[call.term]
            try:
                scores = _validate(term, call, status, value, completions, self.timeout_s)
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
        total = [
            math.fsum(term.weight * components[term.label][i] for term in self.terms)
            for i in range(n)
        ]
        weights = {term.label: term.weight for term in self.terms}
        return RewardBreakdown(total, components, weights, errors, reasons)

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
        """Run the calls, at most ``max_workers`` at a time; each outcome is ("ok", value),
        ("error", exception) or ("timeout", None)."""
        outcomes: list[tuple[str, Any] | None] = [None] * len(calls)
        todo = deque(range(len(calls)))
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
                if self.executor == "process":
                    killed_pools.append(self._pool)
                self._discard_pool(kill=True)
        return [o for o in outcomes if o is not None]


def _make_terms(specs: list[RewardSpec]) -> list[_Term]:
    if not specs:
        raise ValueError("a combined reward needs at least one reward spec")
    terms: list[_Term] = []
    for spec in specs:
        entry = get_reward(spec.name)
        label = spec.label or spec.name
        if any(t.label == label for t in terms):
            raise ValueError(f"reward label {label!r} appears twice; give each term its own label")
        if not math.isfinite(spec.weight):
            raise ValueError(f"reward {label!r}: weight must be finite, got {spec.weight}")
        signature = _Signature.of(entry.fn)
        unknown = sorted(k for k in spec.params if not signature.accepts(k))
        if unknown:
            raise ValueError(
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
        raise ValueError(
            f"reward {term.label!r}: {clash} given both as parameters and as per-sample fields"
        )
    missing = sorted(term.signature.required - set(term.params) - set(passed))
    if missing:
        raise ValueError(f"reward {term.label!r} needs the field(s) {missing}")
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
) -> list[float]:
    """The call's scores, one per index, or RewardError naming the reward and sample."""
    first = call.indices[0]
    if status == "timeout":
        raise RewardError(term.label, first, completions[first], f"timed out after {timeout_s}s")
    if status == "error":
        raise RewardError(
            term.label, first, completions[first], f"{type(value).__name__}: {value}"
        ) from value
    values = [value] if term.entry.kind == "sample" else value
    if term.entry.kind == "group" and (
        not isinstance(values, Sequence) or len(values) != len(call.indices)
    ):
        size = len(values) if isinstance(values, Sequence) else type(values).__name__
        raise RewardError(
            term.label,
            first,
            completions[first],
            f"group reward returned {size} values for a group of {len(call.indices)}",
        )
    scores = []
    for i, v in zip(call.indices, values, strict=True):
        if not isinstance(v, numbers.Real):
            raise RewardError(
                term.label, i, completions[i], f"returned {type(v).__name__}, expected a float"
            )
        if not math.isfinite(v):
            raise RewardError(term.label, i, completions[i], f"returned non-finite {v}")
        scores.append(v if isinstance(v, Score) else float(v))
    return scores
