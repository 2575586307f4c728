"""Named algorithm presets: which advantage, aggregation, clipping and KL term each paper uses.

The names refer to the registries :data:`~rlvr.algorithms.advantages.ADVANTAGES`,
:data:`~rlvr.algorithms.losses.AGGREGATIONS` and :data:`~rlvr.algorithms.kl.KL_ESTIMATORS`.
The per-token loss is L_t = clipped_policy_loss_t + beta * KL_t (KL_t by ``kl_estimator``
against the reference policy; beta = 0 drops the reference model).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    """One algorithm's loss configuration.

    Attributes:
        name: key in :data:`PRESETS`.
        advantage: advantage estimator name.
        aggregation: loss aggregation mode.
        clip_low: eps_low, ratio clipped below at 1 - clip_low.
        clip_high: eps_high, ratio clipped above at 1 + clip_high.
        dual_clip: dual-clip bound c (> 1) for negative advantages, or None.
        beta: weight of the per-token KL penalty to the reference policy.
        kl_estimator: KL estimator name (k1, k2, k3); unused when beta = 0.
        citation: the paper.
        summary: one paragraph on what the preset does and does not include.
    """

    name: str
    advantage: str
    aggregation: str
    clip_low: float
    clip_high: float
    dual_clip: float | None
    beta: float
    kl_estimator: str
    citation: str
    summary: str


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            name="grpo",
            advantage="grpo",
            aggregation="seq-mean-token-mean",
            clip_low=0.2,
            clip_high=0.2,
            dual_clip=None,
            beta=0.04,
            kl_estimator="k3",
            citation=(
                "Shao et al. 2024, DeepSeekMath: Pushing the Limits of Mathematical Reasoning "
                "in Open Language Models, arXiv:2402.03300"
            ),
            summary=(
                "Group-normalised advantages (r - mean) / (std + eps), PPO clip 0.2, per-sequence "
                "token-mean aggregation, and the paper's k3 KL penalty to the reference policy "
                "with beta = 0.04 in the loss. Many recent setups use beta = 0 (no reference "
                "model); this preset keeps the paper's value."
            ),
        ),
        Preset(
            name="dr_grpo",
            advantage="dr_grpo",
            aggregation="seq-mean-token-sum-norm",
            clip_low=0.2,
            clip_high=0.2,
            dual_clip=None,
            beta=0.0,
            kl_estimator="k3",
            citation=(
                "Liu et al. 2025, Understanding R1-Zero-Like Training: A Critical Perspective, "
                "arXiv:2503.20783"
            ),
            summary=(
                "GRPO without its two biases: advantages r - mean (no std division) and token "
                "sums divided by a constant (the max response length, passed as max_len) instead "
                "of each sequence's length. PPO clip 0.2, no KL penalty."
            ),
        ),
        Preset(
            name="dapo",
            advantage="grpo",
            aggregation="token-mean",
            clip_low=0.2,
            clip_high=0.28,
            dual_clip=None,
            beta=0.0,
            kl_estimator="k3",
            citation=(
                "Yu et al. 2025, DAPO: An Open-Source LLM Reinforcement Learning System at "
                "Scale, arXiv:2503.14476"
            ),
            summary=(
                "DAPO's loss only: GRPO advantages, clip-higher (eps_low 0.2, eps_high 0.28), "
                "token-level mean over the batch, no KL penalty. DAPO's dynamic sampling "
                "(dropping groups whose rewards are all equal and resampling) and overlong "
                "reward shaping are not part of this preset yet."
            ),
        ),
        Preset(
            name="rloo",
            advantage="rloo",
            aggregation="seq-mean-token-mean",
            clip_low=0.2,
            clip_high=0.2,
            dual_clip=None,
            beta=0.0,
            kl_estimator="k3",
            citation=(
                "Ahmadian et al. 2024, Back to Basics: Revisiting REINFORCE Style Optimization "
                "for Learning from Human Feedback in LLMs, arXiv:2402.14740"
            ),
            summary=(
                "Leave-one-out baseline r_i - mean_{j != i} r_j, PPO clip 0.2, per-sequence "
                "token-mean aggregation, no KL penalty. The paper puts the KL penalty into the "
                "reward and takes one on-policy step per batch (no clipping needed); this preset "
                "keeps the clipped loss so several steps per batch remain safe."
            ),
        ),
    )
}


def get_preset(name: str) -> Preset:
    """The preset registered as ``name``; ValueError listing the accepted names otherwise."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; accepted: {', '.join(sorted(PRESETS))}")
    return PRESETS[name]
