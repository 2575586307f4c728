"""Where reward calls run: in the caller's thread, on worker threads or in worker processes,
each under a time limit.

:class:`RewardExecutor` runs a batch of reward calls (:class:`RewardCall`), at most
``max_workers`` at a time, and returns one outcome per call: ``("ok", value)``,
``("error", exception)`` or ``("timeout", None)``. A call's time limit counts from when it starts running (a worker reports
its start through a channel), not from when it was queued. An ``inline`` call (the task's own
verifier) runs in the caller's thread, without a worker or time limit.

- ``thread`` workers are daemon threads (:class:`_DaemonThreadPool`): a call that never returns
  cannot hang the program at exit. A Python thread cannot be killed, so a timed-out call is
  abandoned and keeps running in the background; past :data:`MAX_ABANDONED_THREADS` of them the
  batch raises :class:`~rlvr.rewards.protocol.RewardError`;
- ``process`` workers (a ``forkserver`` or ``spawn`` pool) are killed on timeout and the pool
  restarted; calls killed as collateral are run again, and a worker that died on its own is an
  error of its call.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    CancelledError,
    Future,
    ProcessPoolExecutor,
    wait,
)
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Literal

from rlvr.rewards.protocol import RewardError

# Timed-out calls of a thread executor keep their threads; past this many the reward is broken.
MAX_ABANDONED_THREADS = 64

ExecutorKind = Literal["thread", "process"]


@dataclass(frozen=True)
class RewardCall:
    """One call of a reward function, ``fn(*args, **kwargs)``: ``args`` are ``(completion,
    problem)``, or ``(completions, problem)`` for a group reward; ``indices`` are the batch's
    samples it scores; ``term`` is its term's index and ``label`` its term's name (for errors);
    ``inline`` runs it in the caller's thread, without a worker or time limit."""

    term: int
    label: str
    fn: Callable[..., Any]
    inline: bool
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


class RewardExecutor:
    """Runs reward calls on ``max_workers`` workers of one ``kind`` (``thread`` or ``process``,
    see the module docstring), each under ``timeout_s`` (None: no limit). The workers start on
    the first call; :meth:`close` stops them (killing process workers), and the executor can
    still run calls after.
    """

    def __init__(self, kind: ExecutorKind, max_workers: int, timeout_s: float | None) -> None:
        self.kind: ExecutorKind = kind
        self.max_workers = max_workers
        self.timeout_s = timeout_s
        self._pool: Any = None
        # Where calls report their start. One queue for all thread pools (a replaced pool's
        # calls still report to it); one per process pool (a killed worker may hold its lock).
        self._thread_channel: queue.SimpleQueue = queue.SimpleQueue()
        self._channel: Any = self._thread_channel if kind == "thread" else None
        self._call_ids = iter(range(1 << 62))
        self._abandoned = 0  # thread calls timed out and still running (threads cannot be killed)

    def close(self) -> None:
        """Stop the workers (killing process workers)."""
        self._discard_pool(kill=True)

    def _get_pool(self) -> Any:
        if self._pool is None:
            if self.kind == "thread":
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

    def _submit(self, call_id: int, call: RewardCall) -> Future:
        fn = call.fn
        if self.kind == "thread":
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

    def run(self, calls: Sequence[RewardCall]) -> list[tuple[str, Any]]:
        """Run the calls: inline calls in this thread, the others on the workers, at most
        ``max_workers`` at a time; each outcome is ("ok", value), ("error", exception) or
        ("timeout", None)."""
        outcomes: list[tuple[str, Any] | None] = [
            _run_inline(call.fn, call) if call.inline else None for call in calls
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
                if self.kind == "thread":
                    self._abandoned += len(expired)
                    if self._abandoned > MAX_ABANDONED_THREADS:
                        raise _too_many_abandoned(calls[k].label, calls[k])
                if self.kind == "process":
                    killed_pools.append(self._pool)
                self._discard_pool(kill=True)
        return [o for o in outcomes if o is not None]


def _too_many_abandoned(label: str, call: RewardCall) -> RewardError:
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


def _run_inline(fn: Callable, call: RewardCall) -> tuple[str, Any]:
    try:
        return ("ok", fn(*call.args, **call.kwargs))
    except Exception as err:  # noqa: BLE001 - reported per call, as from a worker
        return ("error", err)
