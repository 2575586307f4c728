"""DRA-GRPO's diversity-aware reward adjustment.

Chen et al. 2025, "DRA-GRPO: Exploring Diversity-Aware Reward Adjustment for R1-Zero-Like
Training of Large Language Models" (arXiv:2505.09655). A group's scalar rewards do not see
that several completions say the same thing; DRA divides each completion's reward by how much
of the group it resembles, before GRPO's group normalisation:

    R~(q, o_i) = R(q, o_i) / (1 + SMI({o_i}, C \\ {o_i}))
    SMI({o_i}, C \\ {o_i}) = sum_{j in C, j != i} s(o_i, o_j)      (graph-cut mutual information)

with ``s`` the cosine similarity of the completions' sentence embeddings and C the prompt's G
completions. Read in the authors' code (``SMI_reweighting`` in their ``grpo_trainer.py``): the
weight is ``1 / (sum_j S_ij + 1e-6)`` over the L2-normalised embeddings' similarity matrix, the
diagonal (1) included, applied to every sample's total reward, correct or not, with no clamp.
Their code forms the matrix over one device's micro-batch; here it is the prompt's group, as the
paper's equation states.
"""

from __future__ import annotations

import torch

#: The authors' epsilon in the weight's denominator.
EPS = 1e-6


def graph_cut_smi(similarity: torch.Tensor) -> torch.Tensor:
    """Graph-cut submodular mutual information of each member with the rest of its group.

    Args:
        similarity: [G, G] pairwise similarities of one group's completions.
    Returns:
        [G] ``SMI_i = sum_{j != i} S_ij``.
    """
    if similarity.dim() != 2 or similarity.shape[0] != similarity.shape[1]:
        raise ValueError(f"similarity must be a square [G, G] matrix, got {list(similarity.shape)}")
    return similarity.sum(1) - similarity.diagonal()


def diversity_adjusted_rewards(
    rewards: torch.Tensor, group_ids: torch.Tensor, embeddings: torch.Tensor
) -> torch.Tensor:
    """DRA-GRPO's adjusted rewards ``R_i / (1 + SMI_i + 1e-6)``, each SMI over the sample's group.

    Args:
        rewards: [N] each sample's total reward.
        group_ids: [N] long, the prompt group of each sample.
        embeddings: [N, D] the completions' embeddings, rows L2-normalised (cosine = dot).
    Returns:
        [N] the adjusted rewards (float64). A sample alone in its group keeps its reward (up to
        the epsilon). With cosines in [-1, 1] the denominator is at most G; it is at least 1
        when no two completions point apart (non-negative embeddings, e.g. the lexical one).
    """
    n = len(rewards)
    if group_ids.shape != (n,) or embeddings.dim() != 2 or embeddings.shape[0] != n:
        raise ValueError(
            f"rewards [N], group_ids [N] and embeddings [N, D] must agree on N; got "
            f"{list(rewards.shape)}, {list(group_ids.shape)} and {list(embeddings.shape)}"
        )
    adjusted = rewards.to(torch.float64).clone()
    emb = embeddings.to(torch.float64)
    for g in torch.unique(group_ids):
        rows = (group_ids == g).nonzero().squeeze(1)
        smi = graph_cut_smi(emb[rows] @ emb[rows].T)  # [G]
        adjusted[rows] = adjusted[rows] / (1.0 + smi + EPS)
    return adjusted
