"""A dense reward for tests: random tiny models rarely solve arithmetic, so the trainer tests
use a reward with variance inside every group (the fraction of ASCII letters). Below them, user
rewards that go wrong in the ways the reward checks must catch."""

import os

import numpy as np

from rlvr.data import Problem
from rlvr.rewards import register_reward


def letter_fraction(completion: str, problem: Problem) -> float:
    return sum(ch.isascii() and ch.isalpha() for ch in completion) / max(len(completion), 1)


def slow_letter_fraction(completion: str, problem: Problem, seconds: float = 2.0) -> float:
    """``letter_fraction`` after ``seconds``: a step long enough to be interrupted midway."""
    import time

    time.sleep(seconds)
    return letter_fraction(completion, problem)


def is_letter(completion: str, problem: Problem) -> float:
    """1 if the (one-token) completion is an ASCII letter: ~20% of a random byte-level policy's
    samples, so groups have variance and every preset has something to learn."""
    return float(len(completion) == 1 and completion.isascii() and completion.isalpha())


# --- user rewards that go wrong, for tests/test_rewards_run.py ---------------------------------


def answer_as_string(completion: str, problem: Problem) -> str:
    """A common mistake: the reward returned as text ("1.0"/"0.0") instead of a number."""
    return "1.0" if problem.answer in completion else "0.0"


def echo_value(completion: str, problem: Problem, value: object = 0.5) -> object:
    """Returns ``value`` (set under params) as it is for the completion "echo", else 0.5: to
    test what a reward may return."""
    return value if completion == "echo" else 0.5


def hangs_on_wait(completion: str, problem: Problem) -> float:
    """Never returns for a completion containing "wait" (well, after 60 s)."""
    if "wait" in completion:
        import time

        time.sleep(60)
    return 1.0


def takes_one_argument(completion: str) -> float:
    """Wrong signature: a reward also receives the problem."""
    return 1.0


def needs_unknown_field(completion: str, problem: Problem, difficulty: float) -> float:
    """Wrong signature: ``difficulty`` is no field a run provides and has no default."""
    return difficulty


def counts_tokens(completion: str, problem: Problem, num_tokens: int) -> float:
    """A field-reading reward: 1/num_tokens."""
    return 1.0 / num_tokens


def fails_on_answers(completion: str, problem: Problem) -> float:
    """Raises on any completion that states an answer."""
    if "Answer:" in completion:
        raise KeyError("answer")
    return 0.0


@register_reward("test_run_group_echo", kind="group")
def group_echo(completions: list[str], problem: Problem, values: object = None) -> object:
    """A group reward returning ``values`` (params) as they are, or an array of ones."""
    return np.ones(len(completions)) if values is None else values


def fails_when_marked(completion: str, problem: Problem, marker: str) -> float:
    """The fraction of letters until the file ``marker`` exists (a test creates it mid-run),
    then raises: a reward that starts failing after some steps."""
    if os.path.exists(marker):
        raise RuntimeError("the reward's service went away")
    return letter_fraction(completion, problem)


def hangs_after_probe(completion: str, problem: Problem) -> float:
    """Passes the start-up probe (a completion "Answer: <answer>") and then hangs for 5 s on
    every real completion: a reward that blocks a run unless its calls time out."""
    if completion.startswith("Answer:"):
        return 1.0
    import time

    time.sleep(5)
    return 1.0
