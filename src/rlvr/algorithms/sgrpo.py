"""S-GRPO's decaying reward over a serial group (Dai et al. 2025, "S-GRPO: Early Exit via
Reinforcement Learning in Reasoning Models", arXiv:2505.07686).

A serial group is one reasoning path sampled for a prompt and m early exits cut from it: at m
token positions drawn uniformly, the path is stopped, the exit phrase is appended and the policy
answers (the ``early_exit`` draw stage). In serial order (the exits by position, front to back,
then the full path), a correct answer gets

    r_i = 1 / 2^(N_right(i) - 1)    (N_right(i): correct answers among the first i, this one
                                     included)

and a wrong one 0: the earliest correct exit 1, each later correct answer half the one before
(correct, wrong, correct, correct, wrong -> 1, 0, 0.5, 0.25, 0). The advantage is the reward
minus the serial group's mean, not divided by its std (``dr_grpo``).

Source: the paper's method section was not reachable from here; the rule above is the one two
independent readings of it state (a write-up of the NeurIPS 2025 poster: "a correct answer at
position i receives r = 1/2^(N_right-1), where N_right counts how many correct answers have
accumulated up to and including that position"; a reading note's pseudocode looping over the
exits, then the full path), and a reimplementation computes (``hardbrah/verl``,
``sgrpo/core_algos.py: compute_decaying_reward``: 1 / 2^(correct answers before this one)). The
exit phrase is the one those readings quote.
"""

from __future__ import annotations

import torch

PAPER = (
    'Dai et al. 2025, "S-GRPO: Early Exit via Reinforcement Learning in Reasoning Models", '
    "arXiv:2505.07686"
)
EXIT_PHRASE = "Time is limited, stop thinking and start answering.\n</think>\n\n"
"""Appended to a reasoning path cut at an exit position; the policy answers after it."""


def decaying_rewards(correct: torch.Tensor) -> torch.Tensor:
    """S-GRPO's serial-group rewards.

    Args:
        correct: [G, K] bool, whether each answer of G serial groups is right, in serial order
            (the exits front to back, then the full path).
    Returns:
        [G, K] float: 1 / 2^(N_right - 1) for a right answer (N_right: the right answers of its
        group up to and including it), 0 for a wrong one.
    """
    n_right = correct.float().cumsum(-1)
    decayed = torch.pow(0.5, n_right - 1)  # r_i = 1 / 2^(N_right(i) - 1)
    return torch.where(correct, decayed, torch.zeros_like(decayed))
