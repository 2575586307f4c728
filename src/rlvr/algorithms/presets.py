"""Named algorithm presets: one choice per part of the update, with the paper it comes from.

A preset is an :class:`~rlvr.algorithms.schema.Algorithm`, written in the shape of a config's
``algorithm:`` section; its names are entries of the registries of the parts it selects.
:func:`validate` rejects contradictory combinations (:mod:`rlvr.algorithms.checks`);
:func:`resolve` applies a config's parts to a preset and validates the result.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

from rlvr.algorithms import (  # noqa: F401
    aapo,
    distillation,
    dppo,
    edge,
    gdpo,
    imitation,
    mapo,
    mpo,
    ngrpo,
    noise_aware,
    passk,
    pvpo,
    rlsc,
    sapo,
    tgdpo,
)
from rlvr.algorithms.advantages import (
    ADVANTAGES,
    AdvantageInputs,
    AdvantageOutput,
    compute_advantages,
    normalize_batch,
    weight_by_sign,
)
from rlvr.algorithms.checks import NAMED, problems
from rlvr.algorithms.losses import POLICY_LOSSES
from rlvr.algorithms.schema import (
    PARTS,
    SCALARS,
    AdvantagePart,
    AggregationPart,
    Algorithm,
    EntropyPart,
    ExpertPart,
    KLPart,
    ObjectivePart,
    OverlongPart,
    PolicyLossPart,
    ReferencePart,
    SelectPart,
    StageEntry,
    ValuePart,
    part_fields,
)
from rlvr.registry import Registry

Preset = Algorithm
"""A preset is an algorithm with a name, a citation and a summary."""


def validate(algorithm: Algorithm) -> None:
    """Raise ValueError listing every contradictory or out-of-range choice of ``algorithm``."""
    found = problems(algorithm)
    if found:
        raise ValueError(f"algorithm {algorithm.name!r}: " + "; ".join(found))


PRESETS: Registry[Algorithm] = Registry("preset")


def register_preset(preset: Algorithm) -> Algorithm:
    """Add ``preset`` (validated) to :data:`PRESETS` under ``preset.name``: a config selects it
    with ``algorithm.preset`` and ``rlvr algorithms`` lists it."""
    validate(preset)
    return PRESETS.add(preset.name, preset)


for _preset in (
    Algorithm(
        name="grpo",
        advantage=AdvantagePart(name="grpo"),
        kl=KLPart(beta=0.04, estimator="k3"),
        citation="Shao et al. 2024, DeepSeekMath: Pushing the Limits of Mathematical Reasoning "
        "in Open Language Models, arXiv:2402.03300",
        summary="Group-normalised advantages (r - mean) / (std + eps), PPO clip 0.2, per-sequence "
        "token-mean aggregation, and the paper's k3 KL penalty to the reference policy "
        "with beta = 0.04 in the loss. Many recent setups use beta = 0 (no reference "
        "model); this preset keeps the paper's value.",
    ),
    Algorithm(
        name="dr_grpo",
        advantage=AdvantagePart(name="dr_grpo"),
        aggregation=AggregationPart(name="seq-mean-token-sum-norm"),
        citation="Liu et al. 2025, Understanding R1-Zero-Like Training: A Critical Perspective, "
        "arXiv:2503.20783",
        summary="GRPO without its two biases: advantages r - mean (no std division) and token "
        "sums divided by a constant (the max response length, passed as max_len) instead "
        "of each sequence's length. PPO clip 0.2, no KL penalty.",
    ),
    Algorithm(
        name="dapo",
        advantage=AdvantagePart(name="grpo"),
        policy_loss=PolicyLossPart(clip_high=0.28),
        aggregation=AggregationPart(name="token-mean"),
        overlong=OverlongPart(buffer_frac=0.2),
        select=SelectPart(name="informative", max_draws=10),
        citation="Yu et al. 2025, DAPO: An Open-Source LLM Reinforcement Learning System at "
        "Scale, arXiv:2503.14476",
        summary="GRPO advantages with DAPO's four techniques: clip-higher (eps_low 0.2, "
        "eps_high 0.28), dynamic sampling (groups whose rewards are all equal are "
        "dropped and the batch refilled, at most 10 rollout draws per step), token-level "
        "mean over the batch, and the soft overlong penalty (L_cache = 0.2 * budget, "
        "4096 / 20480 in the paper); no KL penalty.",
    ),
    Algorithm(
        name="ngrpo",
        advantage=AdvantagePart(name="ngrpo"),
        policy_loss=PolicyLossPart(clip_low=0.16, clip_high=0.24),
        aggregation=AggregationPart(name="token-mean"),
        entropy=EntropyPart(coef=0.001),
        select=SelectPart(name="not_all_correct", max_draws=10),
        citation="Nan et al. 2025, NGRPO: Negative-enhanced Group Relative Policy Optimization, "
        "arXiv:2509.18851",
        summary="GRPO advantages over each group plus a virtual sample of the largest reward "
        "(never trained), so all-wrong groups are pushed down; decoupled clip 0.16 / 0.24, "
        "all-correct groups dropped and the batch refilled (at most 10 draws), token-level "
        "mean, entropy bonus 0.001, no KL penalty, as the authors' runs.",
    ),
    Algorithm(
        name="noise_aware_grpo",
        advantage=AdvantagePart(name="noise_aware"),
        kl=KLPart(beta=0.0),
        citation="Shen et al. 2025, Mitigating Think-Answer Mismatch in LLM Reasoning Through "
        "Noise-Aware Advantage Reweighting, arXiv:2508.05928",
        summary="GRPO advantages (unbiased std) of each group scaled by w*, the share of its "
        "spread that a reward flipped with probability p (0.1) leaves as signal: 0 where the "
        "success rate is within p of 0 or 1, 1 - 2p at one half; no KL penalty, as the "
        "authors' runs (the paper's S-GRPO).",
    ),
    Algorithm(
        name="pvpo",
        advantage=AdvantagePart(name="pvpo"),
        citation="PVPO: Pre-Estimated Value-Based Policy Optimization for Agentic Reasoning, "
        "2025, arXiv:2508.21104",
        summary="A_i = r_i minus the mean reward of the frozen initial policy's G rollouts of "
        "the prompt (the static value V_sta as the baseline, no std normalisation), in GRPO's "
        "clipped surrogate with its KL penalty; V_sta estimated every draw, no pre-filtering.",
    ),
    Algorithm(
        name="rlsc",
        advantage=AdvantagePart(name="rlsc"),
        policy_loss=PolicyLossPart(name="none"),
        aggregation=AggregationPart(name="seq-mean-token-sum"),
        kl=KLPart(beta=0.0),
        citation="Confidence Is All You Need: Few-Shot RL Fine-Tuning of Language Models, "
        "2025, arXiv:2506.06395",
        summary="Self-confidence without a reward: -(p_old(y|x) + alpha) log pi(y|x) over each "
        "sampled completion, p_old its probability under the sampler, alpha 0.1 (the "
        "paper's smoothed loss L2); REINFORCE on the sequence log-probability, no KL.",
    ),
    Algorithm(
        name="mapo",
        advantage=AdvantagePart(name="mapo"),
        policy_loss=PolicyLossPart(clip_high=0.3, dual_clip=3.0),
        aggregation=AggregationPart(name="token-mean"),
        kl=KLPart(beta=0.01, estimator="k3"),
        citation="Huang et al. 2025, MAPO: Mixed Advantage Policy Optimization, arXiv:2509.18849",
        summary="GRPO's std-normalised advantage mixed with the percent deviation (r - mean) / "
        "mean by the group's certainty, lambda = 1 - 4 p (1 - p) on the latter (p: its success "
        "rate); clip 0.2 / 0.3 with dual clip 3, token-level mean, k3 KL 0.01 in the loss, as "
        "the authors' config.",
    ),
    Algorithm(
        name="gspo",
        advantage=AdvantagePart(name="grpo"),
        policy_loss=PolicyLossPart(name="sequence", clip_low=0.0003, clip_high=0.0004),
        citation="Zheng et al. 2025, Group Sequence Policy Optimization, arXiv:2507.18071",
        summary="GRPO advantages with the length-normalised sequence ratio s_i = exp(mean_t "
        "log rho) clipped at 3e-4 / 4e-4 (token form, sg[s_i] * pi / sg[pi]), "
        "seq-mean-token-mean aggregation, no KL penalty.",
    ),
    Algorithm(
        name="gmpo",
        advantage=AdvantagePart(name="grpo"),
        policy_loss=PolicyLossPart(name="geometric", clip_low=0.4, clip_high=0.4),
        citation="Zhao et al. 2025, Geometric-Mean Policy Optimization, arXiv:2507.20673",
        summary="GRPO advantages with the geometric mean of token ratios instead of their "
        "arithmetic mean, each clipped in log space to (-0.4, 0.4), one value per "
        "sequence averaged over sequences, no KL penalty.",
    ),
    Algorithm(
        name="gpg",
        advantage=AdvantagePart(name="gpg"),
        policy_loss=PolicyLossPart(name="none"),
        aggregation=AggregationPart(name="token-mean"),
        citation="Chu et al. 2025, GPG: A Simple and Strong Reinforcement Learning Baseline for "
        "Model Reasoning, arXiv:2504.02546",
        summary="Plain policy gradient -A log pi (no ratio, no clip, no KL, no reference) with "
        "A = alpha * (r - group mean), alpha = N / N_valid rescaling for groups of "
        "equal rewards; token-mean aggregation. One update per batch (ppo_epochs = 1).",
    ),
    Algorithm(
        name="rloo",
        advantage=AdvantagePart(name="rloo"),
        citation="Ahmadian et al. 2024, Back to Basics: Revisiting REINFORCE Style Optimization "
        "for Learning from Human Feedback in LLMs, arXiv:2402.14740",
        summary="Leave-one-out baseline r_i - mean_{j != i} r_j, PPO clip 0.2, per-sequence "
        "token-mean aggregation, no KL penalty. The paper puts the KL penalty into the "
        "reward and takes one on-policy step per batch (no clipping needed); this preset "
        "keeps the clipped loss so several steps per batch remain safe.",
    ),
    Algorithm(
        name="reinforce_pp",
        advantage=AdvantagePart(name="reinforce_pp"),
        aggregation=AggregationPart(name="token-mean"),
        kl=KLPart(beta=0.01, estimator="k1", placement="reward"),
        citation="Hu 2025, REINFORCE++: A Simple and Efficient Approach for Aligning Large "
        "Language Models, arXiv:2501.03262",
        summary="No critic, no group baseline: token rewards -beta * k1_t plus r at the last "
        "token (beta = 0.01), undiscounted returns whitened over the whole batch, PPO "
        "clip 0.2, token-mean aggregation.",
    ),
    Algorithm(
        name="reinforce_pp_baseline",
        advantage=AdvantagePart(name="reinforce_pp_baseline"),
        aggregation=AggregationPart(name="token-mean"),
        kl=KLPart(beta=0.01, estimator="k1", placement="reward"),
        citation="Hu 2025, REINFORCE++: A Simple and Efficient Approach for Aligning Large "
        "Language Models, arXiv:2501.03262 (REINFORCE++-baseline)",
        summary="REINFORCE++ with the group mean reward subtracted first (r - mean_g r at the "
        "last token, -beta * k1_t on every token, beta = 0.01), returns whitened over "
        "the batch, PPO clip 0.2, token-mean aggregation.",
    ),
    Algorithm(
        name="remax",
        advantage=AdvantagePart(name="remax"),
        policy_loss=PolicyLossPart(name="none"),
        aggregation=AggregationPart(name="seq-mean-token-sum"),
        citation="Li et al. 2023, ReMax: A Simple, Effective, and Efficient Reinforcement "
        "Learning Method for Aligning Large Language Models, arXiv:2310.10505",
        summary="REINFORCE -A log pi(y) summed over tokens with the greedy completion's reward as "
        "baseline, A = r - r_greedy: the rollout adds one greedy completion per prompt. "
        "No clip, no KL; one update per batch (ppo_epochs = 1).",
    ),
    Algorithm(
        name="cispo",
        advantage=AdvantagePart(name="grpo"),
        policy_loss=PolicyLossPart(name="cispo", clip_low=1.0, clip_high=0.28),
        aggregation=AggregationPart(name="token-mean"),
        citation="MiniMax 2025, MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning "
        "Attention, arXiv:2506.13585",
        summary="GRPO advantages with -sg[clip(rho, 0, 1 + eps_high)] * A * log pi: the IS "
        "weight is clipped and detached so no token loses its gradient; no lower bound "
        "as in the paper, eps_high 0.28 (the paper does not publish its tuned value), "
        "token-mean aggregation, no KL penalty.",
    ),
    Algorithm(
        name="sapo",
        advantage=AdvantagePart(name="grpo"),
        policy_loss=PolicyLossPart(name="sapo", params={"tau_pos": 1.0, "tau_neg": 1.05}),
        aggregation=AggregationPart(name="seq-mean-token-mean"),
        citation="Qwen Team 2025, Soft Adaptive Policy Optimization, arXiv:2511.20347",
        summary="GRPO advantages with the hard clip replaced by a soft gate: L = -(4 / tau) "
        "sigmoid(tau (rho - 1)) A, whose gradient is the vanilla one at rho = 1 and decays "
        "smoothly off-policy; tau_pos 1.0, tau_neg 1.05 (negative advantages gated faster) "
        "as in the paper, seq-mean-token-mean aggregation, no KL penalty.",
    ),
    Algorithm(
        name="aapo",
        advantage=AdvantagePart(name="aapo"),
        policy_loss=PolicyLossPart(name="none"),
        aggregation=AggregationPart(name="token-mean"),
        citation="Xiong et al. 2025, AAPO: Enhancing the Reasoning Capabilities of LLMs with "
        "Advantage Momentum, arXiv:2505.14264",
        summary="GRPO advantages plus clip(r_i - r_ref_i, -0.2, 0.28), the margin over the frozen "
        "reference model's completion of the same prompt (the rollouts sample each group "
        "from the initial policy too); plain -A log pi loss, token mean, no clip, no KL.",
    ),
    Algorithm(
        name="alol",
        objective=ObjectivePart(name="policy_gradient", samples="data"),
        advantage=AdvantagePart(name="alol"),
        policy_loss=PolicyLossPart(name="alol", clip_low=0.9, clip_high=0.9),
        aggregation=AggregationPart(name="seq-mean-token-sum"),
        citation="Baheti et al. 2023, Improving Language Models with Advantage-based Offline "
        "Policy Gradients (A-LoL), arXiv:2305.14718; the authors' code (abaheti95/LoL-RL)",
        summary="Offline policy gradient on the data's completions, each scored by the run's "
        "reward: A = max(R(x, y) - V_ref(x), 0) with V_ref(x) the reward of the frozen "
        "reference's greedy completion of x, loss -A x sg[clip(pi(y|x) / pi_ref(y|x), 0.1, "
        "1.9)] x log pi(y|x), summed over tokens, mean over rows; policy_loss.ratio: token "
        "(A-LoL seq) or none (ref-free), kl_beta (A-LoL KL).",
    ),
    Algorithm(
        name="hbpo",
        advantage=AdvantagePart(name="hbpo"),
        policy_loss=PolicyLossPart(name="token", clip_low=0.2, clip_high=0.28, dual_clip=3.0),
        aggregation=AggregationPart(name="token-mean"),
        stages=(StageEntry(name="budgets"),),
        citation="Lyu et al. 2025, Hierarchical Budget Policy Optimization for Adaptive "
        "Reasoning, arXiv:2507.15844; the authors' code (ZJU-REAL/HBPO)",
        summary="Each group split into subgroups of token budgets 512 / 1024 / 2048 / 2560, "
        "each reply starting with its budget's statement (the budgets stage); advantage "
        "GRPO's over the group + (the subgroup's mean reward - f2(b)); with reward.terms: "
        "hbpo_budget (min(beta cos(pi n / 2L) - |n - b| / L, beta cos(pi b / 2L)) for a right "
        "reply, beta 4, L 4096); clip 0.2 / 0.28, dual clip 3, token mean, no KL.",
    ),
    Algorithm(
        name="sgrpo",
        advantage=AdvantagePart(name="dr_grpo"),
        aggregation=AggregationPart(name="seq-mean-token-mean"),
        stages=(StageEntry(name="early_exit"),),
        citation="Dai et al. 2025, S-GRPO: Early Exit via Reinforcement Learning in Reasoning "
        "Models, arXiv:2505.07686",
        summary="Serial groups (the early_exit stage): one reasoning path per prompt and "
        "group_size - 1 early exits cut from it at uniform token positions, each answering "
        "after the exit phrase; in serial order a right answer scores 1 / 2^(N_right - 1), a "
        "wrong one 0; advantage r - mean (no std), PPO clip 0.2, sequence mean of token "
        "means, no KL.",
    ),
    Algorithm(
        name="ppo",
        advantage=AdvantagePart(name="gae", normalize="batch", params={"gamma": 1.0, "lam": 0.95}),
        aggregation=AggregationPart(name="token-mean"),
        kl=KLPart(beta=0.02, estimator="k1", placement="reward"),
        value=ValuePart(coef=0.1, clip=0.2),
        citation="Schulman et al. 2017, Proximal Policy Optimization Algorithms, "
        "arXiv:1707.06347; token rewards with a k1 KL penalty as in Ouyang et al. 2022, "
        "Training language models to follow instructions with human feedback, "
        "arXiv:2203.02155",
        summary="Actor-critic PPO: token rewards -beta * k1_t plus r at the last token "
        "(beta = 0.02), GAE(gamma 1, lambda 0.95) from a value head, advantages whitened "
        "over the batch, PPO clip 0.2, clipped value loss (0.2) weighted 0.1, token-mean.",
    ),
    Algorithm(
        name="nsr",
        advantage=AdvantagePart(name="reinforce", pos_weight=0.0, params={"baseline": 0.5}),
        aggregation=AggregationPart(name="token-mean"),
        citation="Zhu et al. 2025, The Surprising Effectiveness of Negative Reinforcement in LLM "
        "Reasoning, arXiv:2506.01347",
        summary="Negative sample reinforcement: REINFORCE advantages r - 0.5 (+-0.5 for 0/1 "
        "rewards, the paper's +-1 up to scale) with positive advantages weighted 0, so "
        "only wrong completions are pushed down; PPO clip 0.2, token-mean, no KL. "
        "pos_weight = 0.1 gives W-REINFORCE.",
    ),
    Algorithm(
        name="sft",
        advantage=AdvantagePart(name="verified"),
        objective=ObjectivePart(name="imitation", samples="data"),
        aggregation=AggregationPart(name="token-mean"),
        citation="Ouyang et al. 2022, Training language models to follow instructions with "
        "human feedback (InstructGPT), arXiv:2203.02155, Sec. 3.5 (SFT)",
        summary="Supervised fine-tuning on the data's demonstrations (a completion column, or the "
        "assistant turns of a chat): negative log-likelihood of the assistant tokens, "
        "token mean over the batch, no sampling.",
    ),
    Algorithm(
        name="rft",
        advantage=AdvantagePart(name="verified"),
        objective=ObjectivePart(name="imitation"),
        aggregation=AggregationPart(name="token-mean"),
        citation="Yuan et al. 2023, Scaling Relationship on Learning Mathematical Reasoning "
        "with Large Language Models (RFT), arXiv:2308.01825; Zelikman et al. 2022, STaR, "
        "arXiv:2203.14465",
        summary="Rejection-sampling fine-tuning (expert iteration): sample G per prompt, keep the "
        "verified ones (reward >= advantage.threshold, 1), and fine-tune on them "
        "with the SFT loss; the wrong ones are not pushed down.",
    ),
    Algorithm(
        name="dpo",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(name="dpo", samples="data"),
        citation="Rafailov et al. 2023, Direct Preference Optimization: Your Language Model is "
        "Secretly a Reward Model, arXiv:2305.18290",
        summary="Offline DPO on preference pairs of the data (chosen, rejected columns): "
        "-log sigmoid(beta h), beta = 0.1 (objective.beta), h the log-ratio to the "
        "reference (the initial policy) of the chosen minus the rejected.",
    ),
    Algorithm(
        name="tgdpo",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(name="tgdpo", samples="data", params={"beta": 0.1, "alpha": 0.5}),
        citation="Zhu et al. 2025, TGDPO: Harnessing Token-Level Reward Guidance for Enhancing "
        "Direct Preference Optimization, arXiv:2506.14574",
        summary="Offline DPO on the data's pairs with each token's beta set by a token-level "
        "reward r = beta log(pi_r / pi_ref) of model.teacher (e.g. a DPO-trained checkpoint): "
        "beta (1 + alpha r) on the chosen, beta (1 - alpha r) on the rejected, beta = 0.1, "
        "alpha = 0.5.",
    ),
    Algorithm(
        name="exo",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(name="exo", samples="data"),
        citation="Ji et al. 2024, Towards Efficient Exact Optimization of Language Model "
        "Alignment, arXiv:2402.00856",
        summary="Offline EXO on the data's preference pairs: the reverse KL from the policy's "
        "pair distribution sigmoid(+-beta h) to the labels' (1 - eps, eps), beta = 0.1, "
        "eps = 1e-3 (objective.label_smoothing); DPO is the forward KL.",
    ),
    Algorithm(
        name="tpo",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(name="tpo", samples="data"),
        citation="Saeidi et al. 2024, Triple Preference Optimization: Achieving Better "
        "Alignment using a Single Step Optimization, arXiv:2405.16681",
        summary="Offline TPO on the data's preference pairs, in one step and without a "
        "reference: -log sigmoid(beta [log pi(y_c) - log pi(y_r)]) + alpha x the chosen "
        "(gold) completion's NLL per token, beta = 0.1, alpha = 0.5 (objective.alpha).",
    ),
    Algorithm(
        name="rpo",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(name="dpo", samples="data", sft_coef=1.0),
        citation="Pang et al. 2024, Iterative Reasoning Preference Optimization, arXiv:2404.19733",
        summary="Offline DPO plus the chosen completion's length-normalised NLL (alpha = 1, "
        "objective.sft_coef): -log sigmoid(beta h) - alpha log pi(y_c | x) / |y_c|.",
    ),
    Algorithm(
        name="luffy",
        advantage=AdvantagePart(name="grpo"),
        aggregation=AggregationPart(name="token-mean"),
        expert=ExpertPart(traces=1, shaping="luffy", params={"gamma": 0.1}),
        citation="Yan et al. 2025, Learning to Reason under Off-Policy Guidance (LUFFY), "
        "arXiv:2504.14945",
        summary="Mixed-policy GRPO: each group holds the policy's samples and one worked "
        "solution of its problem (expert.traces), advantages normalised over the whole group; "
        "the samples' PPO clip 0.2, the traces' -A p / (p + 0.1) unclipped (policy shaping, "
        "pi_phi = 1); token mean over all tokens; no KL.",
    ),
    Algorithm(
        name="dpo_norm",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(name="dpo_norm", samples="data"),
        citation="Lambert et al. 2024, Tulu 3: Pushing Frontiers in Open Language Model "
        "Post-Training, arXiv:2411.15124",
        summary="Offline length-normalised DPO on the data's preference pairs: -log sigmoid(beta "
        "(h_c / |y_c| - h_r / |y_r|)), h the log-ratio to the reference, beta = 5.",
    ),
    Algorithm(
        name="ipo",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(name="ipo", samples="data"),
        citation="Azar et al. 2023, A General Theoretical Paradigm to Understand Learning from "
        "Human Preferences, arXiv:2310.12036",
        summary="Offline IPO on the data's preference pairs: (h - 1/(2 tau))^2, tau = 0.1, with "
        "DPO's log-ratio margin h; no sigmoid, so the margin does not grow without bound.",
    ),
    Algorithm(
        name="online_dpo",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(name="dpo", pairing="best_worst"),
        citation="Guo et al. 2024, Direct Language Model Alignment from Online AI Feedback, "
        "arXiv:2402.04792",
        summary="DPO on the policy's own groups: chosen = the best, rejected = the worst sample "
        "of each group by the reward (groups of equal rewards skipped and counted), "
        "beta = 0.1, the reference the initial policy; fresh samples every step.",
    ),
    Algorithm(
        name="semi_online_dpo",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(name="dpo", pairing="best_worst", sync_every=5),
        citation="Lanchantin et al. 2025, Bridging Offline and Online Reinforcement Learning "
        "for LLMs, arXiv:2506.21495",
        summary="Online DPO whose sampler gets the trained weights only every s = 5 updates "
        "(sync_every): pairs come from a snapshot between syncs, between offline (s = "
        "inf) and online (s = 1) DPO.",
    ),
    Algorithm(
        name="hapo",
        advantage=AdvantagePart(name="hapo"),
        policy_loss=PolicyLossPart(name="hapo", clip_low=0.2, clip_high=0.2, dual_clip=10.0),
        aggregation=AggregationPart(name="token-mean"),
        kl=KLPart(beta=0.0),
        citation="Liu et al. 2025, From Uniform to Heterogeneous: Tailoring Policy Optimization "
        "to Every Token's Nature (HAPO), arXiv:2509.16591",
        summary="Token Level Group Average advantages (GRPO's past |A| >= 5); each token's clip "
        "bounds and advantage adapted to its current entropy against the micro-batch's "
        "0.8-quantile (AAC: eps 0.2 widened up to 0.4; DAR: A (1 + h_hat)), dual clip 10, "
        "token-mean; adaptive temperature sampling not built.",
    ),
    Algorithm(
        name="dno",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(
            name="dpo", pairing="margin", margin=1.0, sync_every=5, params={"beta": 0.1}
        ),
        reference=ReferencePart(reset_every=5),
        citation="Rosset et al. 2024, Direct Nash Optimization: Teaching Language Models to "
        "Self-Improve with General Preferences, arXiv:2404.03715",
        summary="DNO-Prct: iterations of 5 updates, each on pairs sampled from pi_t (the "
        "sampler synced every 5 updates) with pi_t the reference (reset every 5 steps); every "
        "pair of a group whose rewards differ by at least objective.margin (1), DPO's loss "
        "with beta = 0.1. For a judge's 6-point scores: objective {margin: 2, min_chosen: 5, "
        "student_margin: 1}.",
    ),
    Algorithm(
        name="disco",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(
            name="disco", params={"score": "logL", "tau": 10.0, "delta": 1e-4, "beta": 1e3}
        ),
        kl=KLPart(beta=0.0),
        minibatches=4,
        citation="Li et al. 2025, DisCO: Reinforcing Large Reasoning Models with Discriminative "
        "Constrained Optimization, arXiv:2505.12366",
        summary="Per question, the correct answers' mean log-likelihood score raised above tau "
        "log mean exp of the wrong answers' (tau = 10), KL(pi_old || pi) <= 1e-4 by a squared-"
        "hinge penalty (beta = 1e3); no clip, no advantage; 4 minibatches per step, as the "
        "authors' runs.",
    ),
    Algorithm(
        name="drpo",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(
            name="drpo", params={"lam": 0.1, "tau": 10.0, "delta": 1e-4, "beta": 1e3}
        ),
        kl=KLPart(beta=0.0),
        minibatches=4,
        citation="Li et al. 2025, DRPO: Efficient Reasoning via Decoupled Reward Policy "
        "Optimization, arXiv:2510.04474",
        summary="DisCO with each question's correct answers weighed by softmax((1 - length / "
        "max_new_tokens) / lambda), lambda = 0.1: shorter correct answers are raised more, the "
        "wrong ones pushed down as DisCO does; 4 minibatches per step, as the authors' runs.",
    ),
    Algorithm(
        name="gvpo",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(name="gvpo", params={"beta": 0.1}),
        kl=KLPart(beta=0.0),
        minibatches=4,
        citation="Zhang et al. 2025, GVPO: Group Variance Policy Optimization for Large "
        "Language Model Post-Training, arXiv:2504.19599",
        summary="Per group, the centred implicit rewards beta log(pi / pi_old) regressed on the "
        "centred rewards (beta = 0.1): on-policy Dr. GRPO's gradient, off-policy a pull back "
        "to the rewards instead of a clip; no std normalisation, no reference; 4 minibatches "
        "per step, as the authors' runs.",
    ),
    Algorithm(
        name="mpo",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(name="mpo", params={"beta": 0.1, "alpha": 1.0}),
        kl=KLPart(beta=0.0),
        citation="Gupta et al. 2025, Multi-Preference Optimization: Generalizing DPO via "
        "Set-Level Contrasts, arXiv:2412.04628",
        summary="Per prompt, the set of above-mean answers contrasted with all of them: -log "
        "of Y+'s share of sum_y w_y exp(beta log(pi / pi_ref)(y)), w_y = exp(alpha (r_y - "
        "mean r)), beta = 0.1, alpha = 1; a set-level DPO on sampled groups, any reward.",
    ),
    Algorithm(
        name="inpo",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(name="inpo", pairing="best_worst", sync_every=5),
        citation="Zhang et al. 2024, Iterative Nash Policy Optimization: Aligning LLMs with "
        "General Preferences via No-Regret Learning, arXiv:2407.00617",
        summary="Iterative preference optimisation towards the Nash policy: pairs (best, worst "
        "of a group by the reward) from the snapshot pi_t the sampler holds between syncs "
        "(an iteration, s = 5 updates), loss (h - h_ref/3 - 2 h_t/3 - 1/(2 eta))^2, eta = 0.005.",
    ),
    Algorithm(
        name="rebel",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(name="rebel", pairing="adjacent"),
        citation="Gao et al. 2024, REBEL: Reinforcement Learning via Regressing Relative "
        "Rewards, arXiv:2404.16767",
        summary="Least-squares regression of reward differences on differences of log-ratios to "
        "the sampling policy, (1/eta) [log-ratio(y) - log-ratio(y')] ~ r(y) - r(y'), on "
        "adjacent pairs of each group, eta = 1 (objective.eta); no reference, no clip.",
    ),
    Algorithm(
        name="copg",
        advantage=AdvantagePart(name="grpo"),
        objective=ObjectivePart(name="copg", pairing="adjacent"),
        citation="Flet-Berliac et al. 2024, Contrastive Policy Gradient: Aligning LLMs on "
        "sequence-level scores in a supervised-friendly fashion, arXiv:2406.19185",
        summary="Contrastive policy gradient on adjacent pairs of each group: (r(y) - r(y') - "
        "beta [log-ratio(y) - log-ratio(y')])^2 with log-ratios to the reference (the "
        "initial policy), beta = 0.1 (objective.beta); no importance weights, no clip.",
    ),
    Algorithm(
        name="on_policy_distillation",
        advantage=AdvantagePart(name="reverse_kl"),
        aggregation=AggregationPart(name="token-mean"),
        citation="Agarwal et al. 2024, On-Policy Distillation of Language Models (GKD), "
        "arXiv:2306.13649; Lu & Thinking Machines Lab 2025, On-Policy Distillation",
        summary="A teacher (model.teacher) scores the student's own samples token by token; the "
        "per-token reverse KL log pi_s - log pi_T is the negative advantage (task reward "
        "mixed in with advantage.task_weight), PPO clip 0.2, token mean, no KL.",
    ),
):
    register_preset(_preset)


def get_preset(name: str) -> Algorithm:
    """The preset registered as ``name``; ValueError listing the accepted names otherwise."""
    return PRESETS.get_or_raise(name)


def _loss_bounds(preset: Algorithm, loss: object) -> dict[str, Any]:
    """The clip_low / clip_high defaults of the policy loss ``loss`` (its function's signature)
    when its clip space differs from that of the preset's loss: the preset's bounds are in its
    own loss's space (a PPO ratio offset of 0.2 is no DPPO-KL threshold in nats). Empty when
    the spaces agree, ``loss`` is not registered, or it clips nothing."""
    spec = POLICY_LOSSES.get(loss) if isinstance(loss, str) else None
    if spec is None or spec.clip_space in (None, POLICY_LOSSES[preset.policy_loss.name].clip_space):
        return {}
    parameters = inspect.signature(spec.fn).parameters
    return {
        name: parameters[name].default
        for name in ("clip_low", "clip_high")
        if name in parameters and parameters[name].default is not inspect.Parameter.empty
    }


def _merge_part(base: Any, part: str, given: Mapping[str, Any]) -> Any:
    """``base`` (a part of a preset) with the keys ``given`` set: the part's own fields by
    name, any other key as a keyword argument of its function. A part that names another
    function than the preset's drops the preset's params (they were that function's)."""
    if not isinstance(given, Mapping):
        raise ValueError(f"{part} must be a mapping of its keys, got {given!r}")
    fields = part_fields(part)
    own = {k: v for k, v in given.items() if k in fields}
    extra = {k: v for k, v in given.items() if k not in fields}
    if not hasattr(base, "params"):
        if extra:
            raise ValueError(
                f"{part}: unknown key(s) {', '.join(sorted(extra))}; accepted: {', '.join(fields)}"
            )
        return dataclasses.replace(base, **own)
    field = NAMED[part][0] if part in NAMED else "name"  # the field naming its function
    same = own.get(field, getattr(base, field, None)) == getattr(base, field, None)
    params = {**(base.params if same else {}), **extra}
    return dataclasses.replace(base, **own, params=params)


def resolve(preset_name: str, **overrides: Any) -> Algorithm:
    """The preset ``preset_name`` with ``overrides`` applied, validated.

    Each override is a part given as a mapping (``kl={"beta": 0.0}``,
    ``advantage={"name": "rloo"}``), ``stages`` as a list of ``{name, **settings}`` (it
    replaces the preset's), or ``ppo_epochs`` / ``minibatches``. A ``policy_loss`` of another
    clip space than the preset's loss (e.g. ``dppo_kl``, nats, on the ``grpo`` preset, a
    ratio) takes that loss's own clip_low / clip_high defaults for the bounds not given.

    Returns:
        The resolved :class:`Algorithm` (named as the preset).
    Raises:
        ValueError: unknown preset or key, or an invalid combination (:func:`validate`).
    """
    preset = get_preset(preset_name)
    accepted = [*PARTS, "stages", *SCALARS]
    unknown = sorted(set(overrides) - set(accepted))
    if unknown:
        raise ValueError(f"unknown algorithm keys {unknown}; accepted: {', '.join(accepted)}")
    changes: dict[str, Any] = {k: v for k, v in overrides.items() if k in SCALARS}
    for part in PARTS:
        if part in overrides:
            given = dict(overrides[part])
            if part == "policy_loss":
                given = {**_loss_bounds(preset, given.get("name")), **given}
            changes[part] = _merge_part(getattr(preset, part), part, given)
    if "stages" in overrides:
        changes["stages"] = tuple(_stage(entry) for entry in overrides["stages"])
    resolved = dataclasses.replace(preset, **changes)
    validate(resolved)
    return resolved


def _stage(entry: Any) -> StageEntry:
    """A stage from its config entry ``{name, **settings}`` (or just its name)."""
    if isinstance(entry, StageEntry):
        return entry
    if isinstance(entry, str):
        return StageEntry(name=entry)
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
        raise ValueError(f"stages: each entry is {{name: STAGE, ...settings}}, got {entry!r}")
    return StageEntry(name=entry["name"], params={k: v for k, v in entry.items() if k != "name"})


def as_overrides(algorithm: Algorithm) -> dict[str, Any]:
    """The parts of ``algorithm`` as a config writes them (each part's fields, its params
    beside them), the inverse of :func:`resolve` on its preset."""
    out: dict[str, Any] = {}
    for part in PARTS:
        value = getattr(algorithm, part)
        fields = {f: getattr(value, f) for f in part_fields(part)}
        out[part] = {**fields, **dict(getattr(value, "params", {}))}
    out["stages"] = [{"name": s.name, **dict(s.params)} for s in algorithm.stages]
    out.update({k: getattr(algorithm, k) for k in SCALARS})
    return out


def advantage_kwargs(algorithm: Algorithm) -> dict[str, Any]:
    """The keyword arguments of the advantage estimator: its params, and the KL's beta when
    the KL is in the reward (0 otherwise) if it takes one."""
    kwargs = dict(algorithm.advantage.params)
    if "beta" in ADVANTAGES[algorithm.advantage.name].hyperparams:
        kwargs["beta"] = algorithm.kl.beta if algorithm.kl.placement == "reward" else 0.0
    return kwargs


def preset_advantages(algorithm: Algorithm, inputs: AdvantageInputs) -> AdvantageOutput:
    """The algorithm's advantages: estimator, then batch normalisation, then sign weights.

    A = weight_by_sign(normalize_batch?(compute_advantages(advantage, inputs, **kwargs)),
    pos_weight, neg_weight); returns pass through unchanged.

    Args:
        algorithm: a validated algorithm.
        inputs: the estimator's inputs (mask required for token-level estimators).
    Returns:
        :class:`AdvantageOutput` with advantages [N] or [N, T] and returns [N, T] or None.
    """
    adv = algorithm.advantage
    out = compute_advantages(adv.name, inputs, **advantage_kwargs(algorithm))
    advantages = out.advantages
    if adv.normalize == "batch":
        advantages = normalize_batch(advantages, inputs.mask if advantages.dim() == 2 else None)
    advantages = weight_by_sign(advantages, adv.pos_weight, adv.neg_weight)
    return AdvantageOutput(advantages, out.returns)
