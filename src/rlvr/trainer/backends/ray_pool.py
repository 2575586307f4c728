"""Idle Ray actors of this driver's finished runs, handed to its next run
(``distributed.reuse_actors``, docs/scaling.md).

A Ray actor is a process: before it loads anything it imports torch, transformers and rlvr
(about 8 CPU-seconds on a 2-core machine, most of the 13-15 s a tiny model's actors take to
start). A driver that trains several times on one cluster (a sweep, a notebook, the repro suite,
the tests) pays that once per actor it holds at a time instead of once per actor per run:

* a run that ends without an error asks each actor to end its run (``end_run``: the engine, the
  policy, the reward, the judge, the process groups dropped), then keeps it here, idle;
* the next run takes an idle actor of the same role and resources and starts its run in place
  (``rerun``: what a fresh actor's constructor does; a failure there ends the actor, as a
  failing constructor ends a fresh one);
* a run that failed kills its actors (one may be stuck in a collective or an environment);
* idle actors keep their reservation on the cluster: a run asking for other resources kills
  the idle ones it cannot use before it starts its own; they end with the driver (or
  ``ray.shutdown()``), and a run that started Ray itself (``rlvr train``) never keeps any.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Hashable, Sequence
from typing import Any

Key = Hashable
"""What makes an idle actor usable by a run: its role (class), resources and placement."""


class ActorPool:
    """The idle actors of one Ray instance (those of an earlier instance are forgotten when the
    driver connects to another)."""

    def __init__(self) -> None:
        self._job: str | None = None
        self._idle: dict[Key, list[Any]] = {}
        self._lock = threading.Lock()

    def _current(self, ray: Any) -> dict[Key, list[Any]]:
        job = ray.get_runtime_context().get_job_id()
        if job != self._job:  # another instance: the handles of the old one died with it
            self._job, self._idle = job, {}
        return self._idle

    def idle(self, ray: Any) -> list[Any]:
        """The actors waiting here."""
        with self._lock:
            return [actor for actors in self._current(ray).values() for actor in actors]

    def keep_only(self, ray: Any, keys: set[Key]) -> None:
        """Kill the idle actors a run of ``keys`` cannot use (their reservations free)."""
        with self._lock:
            idle = self._current(ray)
            for key in [k for k in idle if k not in keys]:
                for actor in idle.pop(key):
                    with contextlib.suppress(Exception):
                        ray.kill(actor)

    def take(self, ray: Any, key: Key) -> Any | None:
        """An idle actor of ``key`` (None: there is none)."""
        with self._lock:
            actors = self._current(ray).get(key)
            return actors.pop() if actors else None

    def give(self, ray: Any, actors: Sequence[tuple[Key, Any]], timeout_s: float) -> None:
        """End the run of each ``(key, actor)``; keep those that ended it within ``timeout_s``,
        kill the others (dead, or busy)."""
        refs = [actor.end_run.remote() for _, actor in actors]  # a dead actor's ref fails
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
        with self._lock:
            idle = self._current(ray)
            for (key, actor), ref in zip(actors, refs, strict=True):
                ended = False
                if ref in done:
                    with contextlib.suppress(Exception):
                        ended = ray.get(ref) is True
                if ended:
                    idle.setdefault(key, []).append(actor)
                else:
                    with contextlib.suppress(Exception):
                        ray.kill(actor)
