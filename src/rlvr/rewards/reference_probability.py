"""Verifier-free rewards: the policy's own probability of the reference answer after its reasoning.

The completion ``o`` is split into its reasoning ``z`` (everything before its final answer) and
its answer; the model's answer is replaced by the reference ``y*`` and the policy scores ``y*``
teacher-forced after ``prompt + z``. Two papers, two normalisations of the per-token
probabilities ``p_i = pi(y*_i | x, z, y*_<i)``:

- RLPR (Yu et al. 2025, "RLPR: Extrapolating RLVR to General Domains without Verifiers"):
  the mean ``r = (1/|y*|) sum_i p_i`` (robust to one low-probability token, unlike the
  product), debiased by the probability of ``y*`` with no reasoning at all,
  ``r_hat = clip(r - r_bare, 0, 1)``, so that only the reasoning's contribution is rewarded.
- VeriFree (Zhou et al. 2025, "Reinforcing General Reasoning without Verifiers"): the sequence
  likelihood ``r = prod_i p_i = pi(y* | x, z)``.

The trainer computes the log-probs (fields ``reference_logprobs`` and
``reference_logprobs_bare``, one list of per-token log-probs per sample) with the policy it is
training, through :func:`reference_answer_logprobs`; the rewards below are pure functions of
them. Not included: VeriFree's second gradient term (the supervised likelihood of ``y*``
weighted by ``r``) and RLPR's standard-deviation prompt filter.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Literal

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.data.base import Problem
from rlvr.policy import completion_logprobs, make_batch
from rlvr.rewards.registry import register_reward

Normalization = Literal["mean", "geometric", "product"]

# Where a completion's final answer starts: its last \boxed{ or "Answer:"-style marker.
_ANSWER_START = re.compile(
    r"\\boxed\s*\{|(?:the\s+)?(?:final\s+answer|answer)\s*(?::|is\b)", re.IGNORECASE
)


def split_reasoning(completion: str) -> str:
    """The reasoning ``z`` of a completion: the text before its final answer (its last
    ``\\boxed{`` or "Answer:" / "Final answer:" / "The answer is" marker); the whole completion
    when it has no such marker."""
    starts = list(_ANSWER_START.finditer(completion))
    return completion[: starts[-1].start()] if starts else completion


def answer_probe(
    reasoning: str, reference: str, answer_format: str = "Answer: {answer}"
) -> tuple[str, str]:
    """(context, answer) texts: the model is scored on ``answer`` teacher-forced after
    ``prompt + context``.

    ``answer_format`` is how the task asks for the answer (``"Answer: {answer}"``,
    ``"\\boxed{{{answer}}}"``...). The context is the reasoning, a newline, and the format's
    text before ``{answer}`` (trailing spaces moved into the answer, which is how BPE
    tokenizers attach them); the answer is the reference and the format's text after it.
    With empty reasoning (the debiasing baseline) the context is the format's prefix alone.
    """
    if "{answer}" not in answer_format:
        raise ValueError(f"answer_format must contain '{{answer}}', got {answer_format!r}")
    head, tail = answer_format.split("{answer}", 1)
    lead = head.rstrip(" ")
    reasoning = reasoning.rstrip()
    context = f"{reasoning}\n{lead}" if reasoning else lead
    return context, head[len(lead) :] + reference + tail


def _answer_logprobs(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt_ids: Sequence[list[int]],
    owners: list[int],
    probes: list[list[int]],
    answer_lens: list[int],
    micro_batch: int,
    dtype: torch.dtype,
) -> list[torch.Tensor]:
    """The log-probs [k_j] of the last ``answer_lens[j]`` tokens of each probe, teacher-forced
    after its prompt ``prompt_ids[owners[j]]`` (probes of one prompt share its KV: the
    shared-prefix forward, ``micro_batch`` probes at a time)."""
    device = next(model.parameters()).device
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    out: list[torch.Tensor] = []
    for lo in range(0, len(probes), micro_batch):
        hi = min(len(probes), lo + micro_batch)
        batch = make_batch(list(prompt_ids), probes[lo:hi], pad, owners[lo:hi])
        batch = batch.select(torch.arange(hi - lo)).to(device)
        with autocast:
            logp, _ = completion_logprobs(model, batch, shared_prefix=True)
        for row, probe, k in zip(logp, probes[lo:hi], answer_lens[lo:hi], strict=True):
            out.append(row[len(probe) - k : len(probe)].float())
    return out


@torch.no_grad()
def reference_answer_logprobs(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt_ids: Sequence[list[int]],
    group_ids: Sequence[int],
    completions: Sequence[str],
    references: Sequence[str],
    answer_format: str = "Answer: {answer}",
    micro_batch: int = 16,
    dtype: torch.dtype = torch.float32,
) -> dict[str, list[list[float]]]:
    """Per-token log-probs of the reference answer, with and without each sample's reasoning.

    Args:
        model: the policy (scored at temperature 1, no gradient).
        prompt_ids: P chat-templated prompts (token ids, ending where the completion starts).
        group_ids: N prompt indices, one per completion.
        completions: N completion texts.
        references: N reference answers (the sample's problem's answer).

    Returns:
        ``{"reference_logprobs": N lists, "reference_logprobs_bare": N lists}``: the log-probs
        of the reference answer's tokens after ``prompt + reasoning`` and after the prompt alone
        (computed once per prompt). Probes of one prompt share its KV (shared-prefix forward).
    """

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    # every probe continues its prompt: completion = context tokens + answer tokens, scored with
    # the shared-prefix forward (each prompt encoded once per micro-batch)
    owners: list[int] = []
    probes: list[list[int]] = []
    answer_lens: list[int] = []
    bare: dict[int, int] = {}  # prompt index -> row of its no-reasoning probe
    for g, text, ref in zip(group_ids, completions, references, strict=True):
        context, answer = answer_probe(split_reasoning(text), ref, answer_format)
        answer_ids = encode(answer)
        owners.append(g)
        probes.append(encode(context) + answer_ids)
        answer_lens.append(len(answer_ids))
    for g, ref in zip(group_ids, references, strict=True):
        if g not in bare:
            context, answer = answer_probe("", ref, answer_format)
            answer_ids = encode(answer)
            bare[g] = len(probes)
            owners.append(g)
            probes.append(encode(context) + answer_ids)
            answer_lens.append(len(answer_ids))
    if any(k == 0 for k in answer_lens):
        raise ValueError("a reference answer encodes to no tokens; check the problems' answers")
    scored = _answer_logprobs(
        model, tokenizer, prompt_ids, owners, probes, answer_lens, micro_batch, dtype
    )
    out = [row.tolist() for row in scored]
    n = len(completions)
    return {
        "reference_logprobs": out[:n],
        "reference_logprobs_bare": [out[bare[g]] for g in group_ids],
    }


def _action_starts(mask: Sequence[int]) -> list[int]:
    """Where each action (a maximal run of 1s of an episode's action mask) starts."""
    return [t for t, m in enumerate(mask) if m and (t == 0 or not mask[t - 1])]


@torch.no_grad()
def turn_answer_probabilities(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt_ids: Sequence[list[int]],
    group_ids: Sequence[int],
    completion_ids: Sequence[list[int]],
    action_masks: Sequence[Sequence[int]],
    references: Sequence[str],
    answer_format: str = "Answer: {answer}",
    micro_batch: int = 16,
    dtype: torch.dtype = torch.float32,
) -> list[list[float]]:
    """The policy's probability of the reference answer at the start of each turn of agent
    episodes: IGPO's P_{i,k} (Wang et al. 2025, :func:`rlvr.algorithms.credit.
    information_gain_rewards`).

    Turn k of episode i starts where its k-th action starts (the k-th run of 1s of its action
    mask): the prompt and everything before it (earlier actions, their observations and the
    chat template's tokens that open the next assistant turn) are the context, the answer in
    the task's format (:func:`answer_probe` with no reasoning: ``"Answer:"`` then
    ``" <reference>"``) is teacher-forced after it, and
    ``P_{i,k} = exp(mean_j log pi(y*_j | context, y*_<j))``, the geometric mean of the answer's
    token probabilities, as the authors' code scores it. Probes of one prompt share its KV.

    Args:
        model: the policy (temperature 1, no gradient).
        prompt_ids: P chat-templated prompts (token ids).
        group_ids: N prompt indices, one per episode.
        completion_ids: N episodes' tokens after the prompt (actions and observations).
        action_masks: N masks, 1 on the sampled tokens.
        references: N reference answers.
    Returns:
        N lists of K_i probabilities, K_i the episode's number of actions.
    """

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    # each distinct (prompt, probe) is scored once: the episodes of a group share their first
    # probe (the prompt alone), and episodes that start alike share more
    unique: dict[tuple[int, tuple[int, ...]], int] = {}
    owners: list[int] = []
    probes: list[list[int]] = []
    answer_lens: list[int] = []
    rows: list[list[int]] = []  # each episode's probes, as indices into ``probes``
    for g, ids, mask, ref in zip(group_ids, completion_ids, action_masks, references, strict=True):
        context, answer = answer_probe("", ref, answer_format)
        context_ids, answer_ids = encode(context), encode(answer)
        if not answer_ids:
            raise ValueError("a reference answer encodes to no tokens; check the problems' answers")
        rows.append([])
        for start in _action_starts(mask):
            probe = list(ids[:start]) + context_ids + answer_ids
            key = (g, tuple(probe))
            if key not in unique:
                unique[key] = len(probes)
                owners.append(g)
                probes.append(probe)
                answer_lens.append(len(answer_ids))
            rows[-1].append(unique[key])
    scored = _answer_logprobs(
        model, tokenizer, prompt_ids, owners, probes, answer_lens, micro_batch, dtype
    )
    probs = [math.exp(row.mean().item()) for row in scored]  # geometric mean of p
    return [[probs[j] for j in row] for row in rows]


def sequence_score(logprobs: Sequence[float], normalization: Normalization) -> float:
    """Probability score of one token sequence from its per-token log-probs ``log p_i``.

    ``mean``: ``(1/L) sum_i p_i`` (RLPR); ``geometric``: ``exp((1/L) sum_i log p_i)``;
    ``product``: ``exp(sum_i log p_i)`` (VeriFree's ``pi(y* | x, z)``).
    """
    if not logprobs:
        raise ValueError("no tokens to score")
    if normalization == "mean":
        return math.fsum(math.exp(lp) for lp in logprobs) / len(logprobs)
    if normalization == "geometric":
        return math.exp(math.fsum(logprobs) / len(logprobs))
    if normalization == "product":
        return math.exp(math.fsum(logprobs))
    raise ValueError(f"normalization must be mean, geometric or product, got {normalization!r}")


@register_reward("reference_probability")
def reference_probability(
    completion: str,
    problem: Problem,
    reference_logprobs: list[float],
    reference_logprobs_bare: list[float] | None = None,
    normalization: Normalization = "mean",
    debias: bool = True,
) -> float:
    """The policy's probability of the reference answer after this completion's reasoning.

    ``debias`` (RLPR): ``clip(r - r_bare, 0, 1)`` with ``r_bare`` the same score without
    reasoning. Defaults are RLPR's; ``rlpr`` and ``verifree`` name the two papers' settings.
    """
    score = sequence_score(reference_logprobs, normalization)
    if not debias:
        return score
    if reference_logprobs_bare is None:
        raise ValueError("debias needs the reference_logprobs_bare field")
    return min(1.0, max(0.0, score - sequence_score(reference_logprobs_bare, normalization)))


@register_reward("rlpr")
def rlpr(
    completion: str,
    problem: Problem,
    reference_logprobs: list[float],
    reference_logprobs_bare: list[float],
) -> float:
    """RLPR's reward: mean token probability of the reference answer, debiased by its
    probability without reasoning, clipped to [0, 1] (Yu et al. 2025)."""
    return reference_probability(
        completion, problem, reference_logprobs, reference_logprobs_bare, "mean", True
    )


@register_reward("verifree")
def verifree(completion: str, problem: Problem, reference_logprobs: list[float]) -> float:
    """VeriFree's reward: the likelihood ``pi(y* | x, z)`` of the reference answer after the
    completion's reasoning (Zhou et al. 2025)."""
    return sequence_score(reference_logprobs, "product")
