"""G2RPO-A's adaptive guidance length ("G2RPO-A: Guided Group Relative Policy Optimization with
Adaptive Guidance", 2025, arXiv:2508.13023; the rule as the authors' code computes
it, ``T-Lab-CUHKSZ/G2RPO-A``, ``g2rpoa_trainer.py``: ``GuidanceLengthUpdateCallback`` and
``_compute_new_guidance_length``).

Each group holds k guided samples: the first l tokens of the problem's reference reasoning
start the reply, and the policy continues from them (the ``guidance`` draw stage,
:mod:`rlvr.trainer.stages.guidance`). One global l adapts to training: the steps go in cycles
of ``window + 1``; the first ``window`` steps of a cycle record the step's mean reward (over
every sample, guided or not), the last compares its own mean r_k with their mean r_bar:

    l <- min(floor(l r_bar / r_k), l_max)   if r_k < r_bar  (worse: more guidance)
    l <- max(floor(l r_bar / r_k), 1)       if r_k > r_bar  (better: less)

and l is unchanged when the two are equal or either is <= 0. The authors' code: window 2 (3-step
cycles), l_0 = l_max = 3072 tokens.
"""

from __future__ import annotations

from collections.abc import Sequence


def adapt_guidance_length(
    length: int, previous: Sequence[float], current: float, max_length: int
) -> int:
    """The guidance length after a cycle (see the module docstring).

    Args:
        length: l, the guidance length (tokens) of the cycle.
        previous: the mean rewards of the cycle's first steps (r_bar is their mean).
        current: r_k, the mean reward of the cycle's last step.
        max_length: l_max.
    Returns:
        the new l, in [1, max_length] when it changed.
    """
    if not previous:
        raise ValueError("the guidance length adapts to the mean reward of earlier steps: none")
    if length < 1 or max_length < 1:
        raise ValueError(f"guidance lengths are >= 1 token, got {length} and {max_length}")
    average = sum(previous) / len(previous)  # r_bar
    if current <= 0 or average <= 0 or current == average:
        return length
    scaled = int(length * average / current)  # floor(l r_bar / r_k)
    return min(scaled, max_length) if current < average else max(scaled, 1)
