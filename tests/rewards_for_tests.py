"""A dense reward for tests: random tiny models rarely solve arithmetic, so the trainer tests
use a reward with variance inside every group (the fraction of ASCII letters)."""

from rlvr.data import Problem


def letter_fraction(completion: str, problem: Problem) -> float:
    return sum(ch.isascii() and ch.isalpha() for ch in completion) / max(len(completion), 1)
