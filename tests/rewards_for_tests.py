"""A dense reward for tests: random tiny models rarely solve arithmetic, so the trainer tests
use a reward with variance inside every group (the fraction of ASCII letters)."""

from rlvr.data import Problem


def letter_fraction(completion: str, problem: Problem) -> float:
    return sum(ch.isascii() and ch.isalpha() for ch in completion) / max(len(completion), 1)


def is_letter(completion: str, problem: Problem) -> float:
    """1 if the (one-token) completion is an ASCII letter: ~20% of a random byte-level policy's
    samples, so groups have variance and every preset has something to learn."""
    return float(len(completion) == 1 and completion.isascii() and completion.isalpha())
