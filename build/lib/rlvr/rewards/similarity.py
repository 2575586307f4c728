"""Reference-similarity rewards: sentence BLEU and chrF with ``sacrebleu``, scaled to [0, 1].

BLEUBERI (Chang et al., 2025, "BLEUBERI: BLEU is a surprisingly effective reward for
instruction following") trains with GRPO on BLEU against reference answers. The references
are the ``references`` field (a string or list of strings), else ``problem.answer``. A leading
``<think>...</think>`` block is dropped from the completion when ``strip_think`` is set.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rlvr.rewards.registry import register_reward

if TYPE_CHECKING:
    from rlvr.data.base import Problem

_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)
_METRICS = threading.local()


def _metric(kind: str) -> Any:
    """One sacrebleu metric object per thread (they keep tokenizer caches)."""
    cache = _METRICS.__dict__
    if kind not in cache:
        from sacrebleu.metrics import BLEU, CHRF

        cache[kind] = BLEU(effective_order=True) if kind == "bleu" else CHRF()
    return cache[kind]


def _references(references: Sequence[str] | str | None, problem: Problem) -> list[str]:
    refs = [problem.answer] if references is None else references
    refs = [refs] if isinstance(refs, str) else list(refs)
    if not refs or not all(isinstance(r, str) for r in refs):
        raise ValueError(f"problem {problem.id!r}: references must be a non-empty list of str")
    return refs


def _hypothesis(completion: str, strip_think: bool) -> str:
    return (_THINK.sub("", completion, count=1) if strip_think else completion).strip()


def sentence_bleu(hypothesis: str, references: Sequence[str]) -> float:
    """Sentence BLEU in [0, 1] (sacrebleu, 13a tokenizer, exponential smoothing, effective
    order so short sentences can score 1)."""
    score = _metric("bleu").sentence_score(hypothesis, list(references)).score
    return min(max(score / 100.0, 0.0), 1.0)


def sentence_chrf(hypothesis: str, references: Sequence[str]) -> float:
    """Sentence chrF (character 6-grams, beta 2) in [0, 1] (sacrebleu)."""
    score = _metric("chrf").sentence_score(hypothesis, list(references)).score
    return min(max(score / 100.0, 0.0), 1.0)


@register_reward("bleu")
def bleu_reward(
    completion: str,
    problem: Problem,
    references: Sequence[str] | str | None = None,
    strip_think: bool = True,
) -> float:
    """BLEUBERI reward: sentence BLEU of the completion against the references, in [0, 1]."""
    return sentence_bleu(_hypothesis(completion, strip_think), _references(references, problem))


@register_reward("chrf")
def chrf_reward(
    completion: str,
    problem: Problem,
    references: Sequence[str] | str | None = None,
    strip_think: bool = True,
) -> float:
    """Sentence chrF of the completion against the references, in [0, 1]."""
    return sentence_chrf(_hypothesis(completion, strip_think), _references(references, problem))
