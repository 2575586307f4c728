"""Process rewards: a score for each reasoning step of a completion (its non-empty lines,
:func:`rlvr.algorithms.process.step_spans`), reported as :attr:`Score.steps` for the
``process_grpo`` advantage (DeepSeekMath's process supervision, :mod:`rlvr.algorithms.process`).

* ``judge_steps``: a judge's verdict on each step given the question, its reference answer and
  the steps before it (P(Yes) as the step's reward), the per-step verdicts of a generative
  process reward model (as ThinkPRM / GenPRM ask an LLM about each step; Zhao et al. 2025,
  arXiv:2504.16828);
* ``prm_steps``: a process reward model trained with ``rlvr rm train`` on pairs of solution
  prefixes, one whose last step is right and one whose last step is wrong (step labels from
  arithmetic's worked solutions: :func:`prm_pairs`, Math-Shepherd-style automatic step labels,
  Wang et al. 2024, arXiv:2312.08935); a step's reward is ``sigmoid(r(x, steps_1..k))``.

The term's own value (what ``reward/*`` logs) is the minimum over the steps, the usual
reduction of a PRM's step scores to an outcome (Lightman et al. 2023, arXiv:2305.20050); an
empty completion has no step and scores 0. Each step's reward, weighted by the term's weight,
goes on the token where the step ends.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rlvr.algorithms.process import step_spans
from rlvr.data.base import Problem
from rlvr.rewards.judged import Verdict, resolve_judge
from rlvr.rewards.protocol import Score
from rlvr.rewards.registry import register_reward
from rlvr.rewards.reward_model import cached_reward_model

STEP_TEMPLATE = (
    "Here is a question and the first steps of a solution to it.\n\n"
    "Question:\n{prompt}\n\n"
    "Reference answer: {reference}\n\n"
    "Steps so far:\n{previous}\n\n"
    "New step:\n{step}\n\n"
    "Is the new step correct? Answer Yes or No."
)
"""The ``judge_steps`` question about step k (``{previous}``: steps 1..k-1, or "(none)")."""

_FORWARD_LOCK = threading.Lock()


def _stepped(text: str, values: Sequence[float], reason: str, usage: Any = None) -> Score:
    spans = step_spans(text)
    steps = [(end, v) for (_, end), v in zip(spans, values, strict=True)]
    return Score(min(values) if values else 0.0, reason, usage=usage, steps=steps)


@register_reward("judge_steps", kind="group")
def judge_steps(
    completions: list[str],
    problem: Problem,
    judge: Any,
    template: str = STEP_TEMPLATE,
    unparsed: float | None = None,
) -> list[Score]:
    """A judge's P(Yes) that each step of each of ``[G]`` completions is correct, given the
    steps before it (module docstring); the term's value is the least step's.

    Args:
        judge: a ``reward.judges`` name (in a config) or a :class:`~rlvr.reward_models.judges.
            Judge`.
        template: the question; fields ``{prompt}``, ``{reference}``, ``{previous}``, ``{step}``.
        unparsed: the score of a step the judge gave neither Yes nor No (None: the reward fails).
    """
    judge = resolve_judge(judge)
    questions, owners = [], []
    for i, text in enumerate(completions):
        lines = [text[a:b] for a, b in step_spans(text)]
        for k, step in enumerate(lines):
            previous = "\n".join(lines[:k]) or "(none)"
            questions.append(
                template.format(
                    prompt=problem.prompt, reference=problem.answer, previous=previous, step=step
                )
            )
            owners.append(i)
    answers, usage = (
        Verdict("probability").ask(judge, questions, unparsed) if questions else ([], None)
    )
    values: list[list[float]] = [[] for _ in completions]
    for i, (value, _) in zip(owners, answers, strict=True):
        values[i].append(value)
    scores = [
        _stepped(text, v, "steps: " + ", ".join(f"{x:.2f}" for x in v))
        for text, v in zip(completions, values, strict=True)
    ]
    if scores and usage is not None:
        first = scores[0]
        scores[0] = Score(float(first), first.reason, usage=usage.metrics(), steps=first.steps)
    return scores


@register_reward("prm_steps", kind="group")
def prm_steps(
    completions: list[str],
    problem: Problem,
    path: str,
    batch_size: int = 16,
    device: str = "cpu",
) -> list[Score]:
    """A trained process reward model's ``sigmoid(r(x, steps_1..k))`` for each step k of each of
    ``[G]`` completions (module docstring); the term's value is the least step's.

    Args:
        path: a reward model directory written by ``rlvr rm train`` (trained on
            :func:`prm_pairs`).
        batch_size: prefixes per forward.
        device: where the model runs (loaded once per process and device).
    """
    model = cached_reward_model(path, device)
    prefixes, owners = [], []
    for i, text in enumerate(completions):
        for _, end in step_spans(text):
            prefixes.append(text[:end])
            owners.append(i)
    values: list[list[float]] = [[] for _ in completions]
    if prefixes:
        with _FORWARD_LOCK:
            scores = model.score([problem.prompt] * len(prefixes), prefixes, batch_size)
        for i, value in zip(owners, torch.sigmoid(scores.float()).tolist(), strict=True):
            values[i].append(value)
    return [
        _stepped(text, v, "steps: " + ", ".join(f"{x:.2f}" for x in v))
        for text, v in zip(completions, values, strict=True)
    ]


def corrupt_step(step: str, rng: random.Random) -> str | None:
    """``step`` ("a op b = c" or "Answer: c") with its result changed by 1..9 (either sign), or
    None when it states no result."""
    head, sep, tail = step.rpartition("=") if "=" in step else step.rpartition(":")
    try:
        value = int(tail.strip())
    except ValueError:
        return None
    wrong = value + rng.choice([-1, 1]) * rng.randint(1, 9)
    return f"{head}{sep} {wrong}"


def prm_pairs(problems: Sequence[Problem], seed: int = 0) -> list[dict[str, str]]:
    """Preference pairs that train a process reward model with ``rlvr rm train``: for each
    problem's worked solution and each of its steps k, the prefix of steps 1..k (chosen) against
    the same prefix with step k's result wrong (rejected); rows ``{prompt, chosen, rejected}``."""
    rng = random.Random(f"prm-pairs-{seed}")
    rows = []
    for problem in problems:
        solutions = [d.text for d in problem.demonstrations if d.reward > 0 and d.text]
        if not solutions:
            continue
        lines = [solutions[0][a:b] for a, b in step_spans(solutions[0])]
        for k, step in enumerate(lines):
            wrong = corrupt_step(step, rng)
            if wrong is None:
                continue
            before = lines[:k]
            rows.append(
                {
                    "prompt": problem.prompt,
                    "chosen": "\n".join([*before, step]),
                    "rejected": "\n".join([*before, wrong]),
                }
            )
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m rlvr.rewards.process OUT.jsonl``: the step-label pairs of :func:`prm_pairs` on
    arithmetic's training problems, for ``rlvr rm train --data OUT.jsonl``."""
    from rlvr.data.arithmetic import ArithmeticTask

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("out", type=Path)
    ap.add_argument("--level", type=int, default=5, help="arithmetic level (5, 6: several steps)")
    ap.add_argument("--problems", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    task = ArithmeticTask(level=args.level, seed=args.seed, n_eval=0)
    rows = prm_pairs([task.train_problem(i) for i in range(args.problems)], args.seed)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} pairs from {args.problems} problems: {args.out}")


if __name__ == "__main__":
    main()
