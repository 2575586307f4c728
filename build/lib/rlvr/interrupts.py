"""Ctrl-C during start-up always stops the command (exit 130), even when library code loses the
``KeyboardInterrupt`` (see docs/design.md, "Errors and exit statuses").

Python turns SIGINT into a ``KeyboardInterrupt`` raised wherever the main thread happens to be.
During start-up that is mostly inside imports and library code, where it can be lost or
disguised: ``import torch`` imports NumPy from its C extension and clears any error of that
import (the interrupt is gone and the run trains to its end; landing inside NumPy's own module
code it leaves a half-imported NumPy, and a later import fails with an ``AttributeError`` or
transformers' ``ModuleNotFoundError``), Python 3.11 wraps an exception of ``__set_name__`` in a
``RuntimeError``, a finaliser (``__del__``, a weakref callback) drops it ("Exception ignored in
..."). So while a command runs, the command line records every SIGINT (:func:`start_command`;
the handler still raises ``KeyboardInterrupt``) and stops on a recorded one: the trainer calls
:func:`check` before its first step, and the command line turns any error, or a normal end,
after a recorded SIGINT into "interrupted" with exit status 130. Outside a command (a Python
session that imported the command line) nothing is recorded.

No heavy imports here: the command line installs the handler first of all, before its own
imports (:mod:`rlvr._record_sigint`) and long before torch is imported.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

_received: list[int] = []  # SIGINTs recorded during a command (or the command line's imports)
_deferred = [False]  # record only, raise nothing: the command line's own imports
_active = [False]  # a command runs (start_command .. end_command)


def _handler(signum: int, frame: Any) -> None:
    if _deferred[0] or _active[0]:
        _received.append(signum)
    if not _deferred[0]:
        raise KeyboardInterrupt


def install(defer: bool = False) -> None:
    """Handle SIGINT as Python's own handler does (raise ``KeyboardInterrupt``), recording it
    while a command runs; ``defer``: only record it, for :func:`start_command` to raise (what
    :mod:`rlvr._record_sigint` does while the command line imports itself). Only over Python's
    default handler or this one (never over SIG_IGN, e.g. a job started in the background, or a
    handler someone else installed), and only from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _handler):
        _deferred[0] = defer
        signal.signal(signal.SIGINT, _handler)


def start_command() -> None:
    """A command starts: SIGINT raises and is recorded until :func:`end_command`; one recorded
    during the command line's imports is raised now."""
    install()
    _active[0] = True
    check()


def end_command() -> None:
    """A command ended: forget its SIGINTs (a Python session that imported the command line
    records nothing between commands)."""
    _active[0] = False
    _received.clear()


def received() -> bool:
    """Whether a SIGINT was recorded during this command."""
    return bool(_received)


def check() -> None:
    """Raise ``KeyboardInterrupt`` when a SIGINT was recorded during this command: one that
    library code swallowed during start-up stops the run here, before its first step."""
    if _received:
        raise KeyboardInterrupt
