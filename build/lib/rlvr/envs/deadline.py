"""A time limit on one call into an environment (``env.step_timeout_s``): :func:`call_with_deadline`.

Python cannot stop a thread, so how a hung call is cut short depends on where it runs:

* on the main thread (``rlvr train``, ``rlvr eval``, a Ray rollout worker's task), the call runs
  in place and a watchdog thread interrupts it when the deadline passes: it sends the main
  thread a signal (SIGUSR2) whose handler raises :class:`Deadline` (a BaseException, so an
  environment's ``except Exception`` does not swallow it; re-sent every second until the call
  gives up). Blocking system calls (sockets, sleeps, pipes) are interrupted too. Running in place
  keeps what many environments rely on: math-verify, GEM and SkyRL-gym time their own checks
  with SIGALRM, which works on the main thread only;
* on any other thread (a server's request handler), the call runs in a daemon thread that is
  abandoned at the deadline (it may go on running in the background; the episode has ended).

A call that overruns raises :class:`Deadline` here either way.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_SIGNAL = signal.SIGUSR2
_RESEND_S = 1.0


class Deadline(BaseException):  # noqa: N818 - raised into the call, like KeyboardInterrupt
    """A call into an environment ran past its time limit."""


def call_with_deadline(fn: Callable[[], T], seconds: float) -> T:
    """``fn()``, or :class:`Deadline` once it has run ``seconds`` (see the module docstring)."""
    if threading.current_thread() is threading.main_thread():
        return _in_place(fn, seconds)
    return _in_thread(fn, seconds)


def _in_place(fn: Callable[[], T], seconds: float) -> T:
    armed = threading.Event()
    finished = threading.Event()
    main = threading.main_thread().ident

    def handler(signum: int, frame: object) -> None:
        if armed.is_set():
            raise Deadline

    def watchdog() -> None:
        if finished.wait(seconds):
            return
        while not finished.is_set():
            signal.pthread_kill(main, _SIGNAL)  # type: ignore[arg-type]
            finished.wait(_RESEND_S)

    previous = signal.signal(_SIGNAL, handler)
    armed.set()
    dog = threading.Thread(target=watchdog, name="env-deadline", daemon=True)
    dog.start()
    try:
        return fn()
    finally:
        finished.set()  # no signal is sent after the watchdog sees this
        try:
            dog.join()  # a signal it sent meanwhile may still raise Deadline here: it was late
        finally:
            armed.clear()
            signal.signal(_SIGNAL, previous)


def _in_thread(fn: Callable[[], T], seconds: float) -> T:
    result: list[T] = []
    error: list[BaseException] = []

    def work() -> None:
        try:
            result.append(fn())
        except BaseException as err:  # noqa: BLE001 - handed to the caller
            error.append(err)

    thread = threading.Thread(target=work, name="env-call", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise Deadline
    if error:
        raise error[0]
    return result[0]
