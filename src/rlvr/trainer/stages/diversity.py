"""DRA-GRPO's diversity-aware reward adjustment as a draw stage (Chen et al. 2025,
arXiv:2505.09655; :func:`rlvr.algorithms.diversity_adjusted_rewards`): each sample's reward is
divided by one plus its summed cosine similarity to the rest of its group, before the
advantages. The prompt sampler and the logged reward terms (``reward/<term>/mean``) see the
unadjusted rewards; ``reward/mean``, the group selector and the advantages see the adjusted
ones."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr import algorithms
from rlvr.rewards.embeddings import get_embedder
from rlvr.trainer.stages.base import DrawState, register_stage

EMBEDDINGS = ("auto", "semantic", "lexical")


@dataclass(frozen=True)
class DiversityReweight:
    """Settings of ``{name: dra, embedding, device}``.

    Attributes:
        embedding: "semantic" (all-MiniLM-L6-v2; the authors used jina-embeddings-v2-small-en,
            not shipped offline), "lexical" (hashed word n-grams) or "auto" (semantic when
            installed, else lexical).
        device: torch device of the semantic model.
    """

    embedding: str = "auto"
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.embedding not in EMBEDDINGS:
            raise ValueError(
                f"embedding must be one of {', '.join(EMBEDDINGS)}; got {self.embedding!r}"
            )


@register_stage("dra", DiversityReweight)
def dra(state: DrawState, settings: DiversityReweight) -> None:
    """Replace the draw's rewards by DRA's: ``r_i / (1 + sum_{j != i} cos(e_i, e_j))`` within
    each group, ``e`` the embedding of the sample's text (an episode's last action)."""
    table = state.table
    embeddings = get_embedder(settings.embedding, settings.device).embed(list(table.texts))
    adjusted = algorithms.diversity_adjusted_rewards(table.rewards, table.group_ids, embeddings)
    state.table = table.with_columns(rewards=adjusted.to(table.rewards.dtype))
