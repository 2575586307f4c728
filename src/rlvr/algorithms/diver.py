"""DIVER's diversity-incentivised reward shaping (Hu et al. 2025, "Diversity-Incentivized
Exploration for Versatile Reasoning", arXiv:2509.26209), as the authors' code computes its
measures (``NJU-RL/DIVER``, ``verl/div_src/diversity_metric.py``, ``ray_trainer.py``).

A group's completions that all say the same thing explore nothing. DIVER gives each *correct*
completion an intrinsic reward for how much it differs from the rest of its group, a potential
whose shaping sums over a response to its final value, clipped, before GRPO's normalisation:

    r'_i = r_i + lambda * clip(d_i, 0, sigma) * 1[o_i correct]

with d one of two global diversities over the first 1000 characters of each response:

    textual   TD_i = 1 - mean_{j != i} (BLEU(o_i | o_j) + BLEU(o_j | o_i)) / 2
              (nltk's sentence BLEU, n-gram weights (0.02, 0.1, 0.15, 0.25, 0.38), no
              smoothing, whitespace tokens)
    equation  ED_i = |F_i minus the union of F_j, j != i| / |F_i|   (0 when F_i is empty)
              F the set of LaTeX formulas \\[..\\], \\(..\\) and $..$ in the response

Only correct responses get the bonus: the paper's ablation shows that a bonus on wrong or all
responses grows their length until accuracy collapses. The paper decays lambda over training;
its schedule was not found, and the authors' code switches the shaping off after step 100
(``until_step`` here). Their code's extra factors (the group's accuracy, a cosine whose sign is
negative for the first 50 steps) are left out.
"""

from __future__ import annotations

import re
import warnings

import torch

#: nltk sentence-BLEU weights of 1- to 5-grams in the authors' ``calculate_belu_matrix``.
BLEU_WEIGHTS = (0.02, 0.1, 0.15, 0.25, 0.38)
FORMULA = re.compile(r"\\\[(.+?)\\\]|\\\((.+?)\\\)|\$(.+?)\$", re.DOTALL)
MEASURES = ("textual", "equation")


def textual_diversity(texts: list[str], chars: int = 1000) -> torch.Tensor:
    """TD [G] of one group's ``texts`` (see the module); a group of one has 0."""
    from nltk.translate.bleu_score import sentence_bleu

    tokens = [t[:chars].split() for t in texts]
    g = len(tokens)
    if g < 2:
        return torch.zeros(g, dtype=torch.float64)
    bleu = torch.zeros(g, g, dtype=torch.float64)
    with warnings.catch_warnings():  # nltk warns of each zero n-gram overlap: BLEU 0, as theirs
        warnings.simplefilter("ignore", UserWarning)
        for i in range(g):
            for j in range(g):
                if i != j and tokens[i] and tokens[j]:
                    hypothesis, reference = tokens[i], [tokens[j]]
                    bleu[i, j] = float(sentence_bleu(reference, hypothesis, weights=BLEU_WEIGHTS))
    similarity = (bleu + bleu.T) / 2
    return 1 - similarity.sum(1) / (g - 1)


def formulas(text: str, chars: int = 1000) -> set[str]:
    """The LaTeX formulas of ``text``'s first ``chars`` characters, as strings."""
    return {next(m for m in match if m) for match in FORMULA.findall(text[:chars])}


def equation_diversity(texts: list[str], chars: int = 1000) -> torch.Tensor:
    """ED [G] of one group's ``texts`` (see the module)."""
    sets = [formulas(t, chars) for t in texts]
    out = torch.zeros(len(sets), dtype=torch.float64)
    for i, own in enumerate(sets):
        others = set().union(*(s for j, s in enumerate(sets) if j != i))
        if own:
            out[i] = len(own - others) / len(own)
    return out


def diver_rewards(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    texts: list[str],
    measure: str = "textual",
    lam: float = 1.0,
    sigma: float = 0.68,
    correct_at: float = 1.0,
    chars: int = 1000,
) -> torch.Tensor:
    """DIVER's shaped rewards [N] (see the module).

    Args:
        rewards: [N] the verifiable rewards.
        group_ids: [N] each sample's group.
        texts: the N responses.
        measure: ``textual`` (TD) or ``equation`` (ED).
        lam: the bonus's weight, >= 0.
        sigma: the bonus's clip, > 0 (0.68 in the authors' ``equ`` runs).
        correct_at: a response is correct when its reward is at least this.
        chars: the characters of each response the measures read (their 1000).
    """
    if measure not in MEASURES:
        raise ValueError(f"diver: measure must be one of {', '.join(MEASURES)}; got {measure!r}")
    if lam < 0 or sigma <= 0 or chars <= 0:
        raise ValueError(f"diver: lam >= 0, sigma > 0 and chars > 0, got {lam}, {sigma}, {chars}")
    if not rewards.shape == group_ids.shape == (len(texts),):
        raise ValueError("diver: rewards, group_ids and texts must agree on N")
    score = textual_diversity if measure == "textual" else equation_diversity
    bonus = torch.zeros(len(texts), dtype=torch.float64)
    for g in group_ids.unique():
        rows = (group_ids == g).nonzero().squeeze(-1)
        bonus[rows] = score([texts[int(i)] for i in rows], chars)
    correct = rewards.to(torch.float64) >= correct_at
    shaped = rewards.to(torch.float64) + lam * bonus.clamp(0.0, sigma) * correct
    return shaped.to(rewards.dtype if rewards.is_floating_point() else torch.float32)
