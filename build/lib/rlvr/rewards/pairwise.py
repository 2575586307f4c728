"""``judge_pairwise``: a group ranked by a judge comparing its completions two at a time.

Every pair (i, j) of the group is shown to the judge, by default in both orders, and the
preference of i over j is the mean of ``P(i wins | i shown first)`` and ``P(i wins | i shown
second)``: a judge that favours the first (or second) position gives each completion that
advantage equally often, so the position bias cancels (Zheng et al. 2023, "Judging
LLM-as-a-Judge with MT-Bench and Chatbot Arena", Sec. 3.3; Wang et al. 2023, "Large Language
Models are not Fair Evaluators"). A verdict is the probability of "A" against "B" as the
reply's first token (``verdict: probability``) or the label the reply names (``text``; a reply
naming neither is a tie).

Rewards from the preference matrix ``q[i, j]`` (``q[i, j] + q[j, i] = 1``):

* ``win_rate``: ``r_i = mean_{j != i} q[i, j]``;
* ``bradley_terry``: strengths ``s`` maximising ``sum_{i != j} q[i, j] log sigmoid(s_i - s_j)
  - (l2 / 2) |s|^2`` (Bradley & Terry 1952, fitted on soft outcomes by Newton's method), centred
  to mean 0: a group-relative reward on a log-odds scale.

A group of G completions costs G (G - 1) judge questions with both orders (G (G - 1) / 2
without). Guarded master keys (:func:`rlvr.rewards.judged.master_key`) lose every comparison
unasked (a tie between two of them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlvr.data.base import Problem
from rlvr.reward_models.judges import Usage
from rlvr.reward_models.verdicts import parse_choice
from rlvr.rewards.judged import master_key, render, resolve_judge
from rlvr.rewards.protocol import RewardConfigError, Score
from rlvr.rewards.registry import register_reward

PAIRWISE_TEMPLATE = (
    "Here is a question and two responses to it.\n\n"
    "Question:\n{prompt}\n\n"
    "Response A:\n{first}\n\n"
    "Response B:\n{second}\n\n"
    "Which response is better? Answer A or B."
)
"""The default question (fields ``{prompt}``, ``{reference}``, ``{first}``, ``{second}``)."""


def bradley_terry(q: torch.Tensor, l2: float = 0.01, steps: int = 50) -> torch.Tensor:
    """``[G]`` strengths fitted to a ``[G, G]`` soft win matrix ``q`` (diagonal ignored) by
    Newton's method on the L2-regularised log-likelihood (see the module docstring), centred."""
    g = q.shape[0]
    q = q.double() * (1 - torch.eye(g, dtype=torch.double))
    s = torch.zeros(g, dtype=torch.double)
    for _ in range(steps):
        p = torch.sigmoid(s[:, None] - s[None, :])
        w = 1 - torch.eye(g, dtype=torch.double)
        n = q + q.T  # the gradient is sum_j (q_ij - n_ij p_ij)
        grad = (q - n * p).mul(w).sum(1) - l2 * s
        h = n * p * (1 - p) * w
        hess = torch.diag(h.sum(1)) - h + l2 * torch.eye(g, dtype=torch.double)
        delta = torch.linalg.solve(hess, grad)
        s = s + delta
        if delta.abs().max() < 1e-10:
            break
    return (s - s.mean()).float()


@register_reward("judge_pairwise", kind="group")
def judge_pairwise(
    completions: list[str],
    problem: Problem,
    judge: Any,
    template: str = PAIRWISE_TEMPLATE,
    verdict: str = "probability",
    scoring: str = "win_rate",
    both_orders: bool = True,
    labels: Sequence[str] = ("A", "B"),
    guard: bool = True,
) -> list[float]:
    """Rewards of ``[G]`` completions from the judge's pairwise preferences (see the module
    docstring).

    Args:
        judge: a ``reward.judges`` name (in a config) or a :class:`~rlvr.reward_models.Judge`.
        template: the question; ``{first}`` and ``{second}`` are the two completions.
        verdict: ``probability`` (P(labels[0]) against P(labels[1])) or ``text``.
        scoring: ``win_rate`` or ``bradley_terry``.
        both_orders: ask each pair in both orders (cancels position bias).
        labels: how the template names the first and the second response.
        guard: master keys lose unasked.
    """
    if verdict not in ("probability", "text"):
        raise RewardConfigError(f"judge_pairwise verdict {verdict!r}: probability or text")
    if scoring not in ("win_rate", "bradley_terry"):
        raise RewardConfigError(f"judge_pairwise scoring {scoring!r}: win_rate or bradley_terry")
    if len(labels) != 2:
        raise RewardConfigError(f"judge_pairwise labels {labels!r}: two labels")
    judge = resolve_judge(judge)
    g = len(completions)
    guarded = [guard and master_key(c) is not None for c in completions]
    orders = [
        (i, j)
        for i in range(g)
        for j in range(g)
        if i != j and (both_orders or i < j) and not (guarded[i] or guarded[j])
    ]
    chats = []
    for i, j in orders:
        text = render(template, problem, "", first=completions[i], second=completions[j])
        chats.append([{"role": "user", "content": text}])
    first_wins, usage = _first_wins(judge, chats, verdict, list(labels))
    wins = torch.zeros(g, g, dtype=torch.double)
    counts = torch.zeros(g, g, dtype=torch.double)
    for (i, j), p in zip(orders, first_wins, strict=True):
        wins[i, j] += p
        wins[j, i] += 1 - p
        counts[i, j] += 1
        counts[j, i] += 1
    q = torch.where(counts > 0, wins / counts.clamp(min=1), torch.full_like(wins, 0.5))
    for i in range(g):  # a guarded completion loses to every other, ties with guarded ones
        for j in range(g):
            if guarded[i] != guarded[j]:
                q[i, j] = 0.0 if guarded[i] else 1.0
    q.fill_diagonal_(0.5)
    if scoring == "win_rate":
        values = ((q.sum(1) - 0.5) / max(g - 1, 1)).tolist()
    else:
        values = bradley_terry(q).tolist()
    scores: list[float] = []
    for i, value in enumerate(values):
        shown = ", ".join(f"{q[i, j]:.2f}" for j in range(g) if j != i)
        events = ("judge/guarded",) if guarded[i] else ()
        scores.append(
            Score(
                value,
                f"preferred over the others: {shown}",
                events,
                usage=usage.metrics() if i == 0 else None,
            )
        )
    return scores


def _first_wins(
    judge: Any, chats: list[list[dict[str, str]]], verdict: str, labels: list[str]
) -> tuple[list[float], Usage]:
    """P(the first response wins) per question, and the usage."""
    if not chats:
        return [], Usage()
    if verdict == "probability":
        probs, usage = judge.probabilities(chats, labels)
        return [a / (a + b) if a + b > 0 else 0.5 for a, b in probs], usage
    replies, usage = judge.replies(chats)
    out = []
    for (reply,) in replies:
        picked = parse_choice(reply.text, labels)
        out.append(0.5 if picked is None else float(picked == 0))
    return out, usage
