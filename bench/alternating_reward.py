"""A reward for benchmarks on random-weight models (``random:<shape>``), whose completions
decode to nothing a verifier can check: 0, 1, 0, 1, ... in call order, so every group has
samples of both rewards and the update does its whole forward and backward (rlvr skips samples
whose advantage is 0: with rewards all 0 a step would measure no update at all)."""

from __future__ import annotations

import itertools
import threading

_calls = itertools.count()
_lock = threading.Lock()


def alternating(completion: str, problem: object) -> float:
    with _lock:
        return float(next(_calls) % 2)
