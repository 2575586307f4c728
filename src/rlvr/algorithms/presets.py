"""Named algorithm presets: one choice per part of the objective, with the paper it comes from.

A :class:`Preset` is data. Its string fields name entries of the registries
:data:`~rlvr.algorithms.advantages.ADVANTAGES`, :data:`~rlvr.algorithms.losses.POLICY_LOSSES`,
:data:`~rlvr.algorithms.losses.AGGREGATIONS`, :data:`~rlvr.algorithms.kl.KL_ESTIMATORS` and
:data:`~rlvr.algorithms.filters.GROUP_FILTERS`. :func:`validate` rejects contradictory
combinations; :func:`resolve` applies overrides (a config) to a preset and validates the result.

The per-token loss a preset describes is

    L_t = policy_loss_t(policy_loss, clip_low, clip_high, dual_clip)      on kept tokens
          + beta * KL_t(kl_estimator)                                      if kl_in == "loss"
          - entropy_coef * H_t
          + vf_coef * value_loss_t(value_clip)                             if advantage == "gae"

aggregated with ``aggregation``; with kl_in == "reward" the KL enters the advantages instead.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlvr.algorithms import aapo, distillation, dppo, gdpo, imitation, passk, sapo  # noqa: F401
from rlvr.algorithms.advantages import (
    ADVANTAGES,
    AdvantageInputs,
    AdvantageOutput,
    compute_advantages,
    normalize_batch,
    weight_by_sign,
)
from rlvr.algorithms.filters import GROUP_FILTERS, GROUP_SELECTORS
from rlvr.algorithms.kl import KL_ESTIMATORS
from rlvr.algorithms.losses import AGGREGATIONS, POLICY_LOSSES
from rlvr.algorithms.objectives import OBJECTIVES
from rlvr.algorithms.preference import PAIRINGS
from rlvr.registry import Registry, check_params

KL_PLACEMENTS = ("loss", "reward")
SAMPLE_SOURCES = ("policy", "data")
NORMALIZATIONS = ("group", "batch")


@dataclass(frozen=True, kw_only=True)
class Preset:
    """One algorithm: a choice for every part of the update.

    Attributes:
        name: key in :data:`PRESETS`.
        advantage: advantage estimator (:data:`ADVANTAGES`).
        policy_loss: policy loss kind (:data:`POLICY_LOSSES`): token, sequence, geometric,
            cispo, none.
        clip_low: eps_low (ratio clipped below at 1 - clip_low; log-space bound -clip_low for
            geometric; weight bound for cispo; delta_low for dppo_tv / dppo_kl), in the clip
            space of ``policy_loss`` (:func:`resolve` on switching to another space).
        clip_high: eps_high (1 + clip_high; log-space clip_high for geometric; delta_high for
            dppo_tv / dppo_kl).
        dual_clip: dual-clip bound c (> 1) for negative advantages (token, sequence), or None.
        aggregation: loss aggregation (:data:`AGGREGATIONS`).
        beta: weight of the KL to the reference policy (0: no reference model).
        kl_estimator: KL estimator (:data:`KL_ESTIMATORS`): k1, k2, k3, k3+.
        kl_in: "loss" (beta * KL_t added to the per-token loss) or "reward" (-beta * KL_t in the
            token rewards of a token-level advantage estimator).
        entropy_coef: entropy bonus weight (0: none).
        normalize: "group": the estimator's own (group-level) advantages; "batch": then
            whitened over the whole batch (:func:`normalize_batch`).
        pos_weight: weight of positive advantages (W-REINFORCE lambda; 0: NSR).
        neg_weight: weight of negative advantages (0: PSR).
        reward_baseline: the constant baseline b of the "reinforce" estimator.
        top_entropy_rho: keep only the top rho fraction of tokens by entropy, or None (all).
        overlong_buffer_frac: DAPO's L_cache as a fraction of the generation budget L_max
            (L_cache = round(frac * max_new_tokens)), or None (no overlong penalty).
        dynamic_sampling: keep only groups whose rewards differ, refilling the batch.
        max_draws: rollout draws per step at most, the first included (dynamic sampling).
        group_filter: GFPO criterion (:data:`GROUP_FILTERS`), or None.
        group_filter_oversample: GFPO samples oversample * G completions per prompt and keeps
            G (None without group_filter).
        group_selector: which whole groups train (:data:`GROUP_SELECTORS`), or None: all, or
            ``informative`` with ``dynamic_sampling``.
        reference_mix: at each reference reset, theta_ref <- alpha theta + (1 - alpha)
            theta_ref with alpha this (1: ProRL's hard reset; < 1: TR-DPO's soft update).
        reference_reset_every: ProRL: reset the reference policy to the current one every N
            steps (0: never).
        vf_coef: value loss weight (gae only; 0 otherwise).
        value_clip: value clip range (gae only), or None.
        gamma: GAE discount (gae only; 1 otherwise).
        lam: GAE lambda (gae only; 1 otherwise).
        objective: what the learner minimises (:data:`~rlvr.algorithms.objectives.OBJECTIVES`):
            policy_gradient (the parts above), imitation (SFT, RFT), or a pair objective (dpo,
            ipo, rebel).
        samples: where a step's completions come from: ``policy`` (sampled, G per prompt) or
            ``data`` (the problems' own demonstrations or preference pairs: SFT, offline DPO).
        pairing: how a pair objective forms pairs in a group (``best_worst``, ``adjacent``;
            None: the objective's default).
        sync_every: the rollouts get the trained weights every this many updates (1: online;
            s > 1: semi-online, Lanchantin et al. 2025).
        sft_coef: weight of an SFT term on the problems' demonstrations beside the RL loss
            (0: none).
        params: each selected part's own keyword arguments, by part: ``advantage``,
            ``policy_loss``, ``aggregation``, ``kl_estimator``, ``group_filter``,
            ``group_selector``, ``objective`` (checked against the part's signature).
        citation: the paper.
        summary: one line on what the preset does.
    """

    name: str
    advantage: str
    policy_loss: str = "token"
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    aggregation: str = "seq-mean-token-mean"
    beta: float = 0.0
    kl_estimator: str = "k3"
    kl_in: str = "loss"
    entropy_coef: float = 0.0
    normalize: str = "group"
    pos_weight: float = 1.0
    neg_weight: float = 1.0
    reward_baseline: float = 0.0
    top_entropy_rho: float | None = None
    overlong_buffer_frac: float | None = None
    dynamic_sampling: bool = False
    max_draws: int = 1
    group_filter: str | None = None
    group_filter_oversample: int | None = None
    group_selector: str | None = None
    reference_reset_every: int = 0
    reference_mix: float = 1.0
    vf_coef: float = 0.0
    value_clip: float | None = None
    gamma: float = 1.0
    lam: float = 1.0
    objective: str = "policy_gradient"
    samples: str = "policy"
    pairing: str | None = None
    sync_every: int = 1
    sft_coef: float = 0.0
    params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, hash=False)
    citation: str
    summary: str

    @property
    def selector(self) -> str | None:
        """The group selector a step applies: ``group_selector``, else DAPO's ``informative``
        with ``dynamic_sampling``, else None (every group trains)."""
        return self.group_selector or ("informative" if self.dynamic_sampling else None)

    @property
    def pairs(self) -> str:
        """The pairing of a pair objective (``pairing``, or the objective's default)."""
        return self.pairing or OBJECTIVES[self.objective].pairing or "best_worst"

    @property
    def needs_reference(self) -> bool:
        """The run keeps a reference policy: a KL term (beta > 0) or an objective that reads
        it (DPO, IPO)."""
        return self.beta > 0 or OBJECTIVES[self.objective].needs_reference

    @property
    def learns_from_reward_differences(self) -> bool:
        """Its updates come from how the rewards of a group's sampled completions differ: a
        group-relative advantage (GRPO, RLOO, ...) or pairs ranked by reward (online DPO,
        REBEL). Such a run needs groups of two or more, and learns nothing while every group's
        rewards are equal. Not so SFT and offline DPO (the data's completions), rejection
        sampling (it imitates every verified sample), on-policy distillation (the teacher's
        log-probs) or an estimator with its own baseline (REINFORCE, ReMax, SPO, PPO's GAE)."""
        if self.samples != "policy":
            return False
        kind = OBJECTIVES[self.objective].kind
        return kind == "pairs" or (
            kind == "policy_gradient" and ADVANTAGES[self.advantage].group_relative
        )


FIXED_FIELDS = ("name", "citation", "summary")

ARGUMENTS_FILLED = {
    "advantage": ("inputs", "beta", "gamma", "lam", "baseline"),
    "policy_loss": (
        "logp",
        "old_logp",
        "sampler_logp",
        "advantages",
        "mask",
        "clip_low",
        "clip_high",
        "dual_clip",
        "seed",
    ),
    "aggregation": ("loss", "mask", "total_tokens", "total_seqs", "max_len"),
    "kl_estimator": ("logp", "ref_logp"),
    "group_filter": ("rewards", "lengths"),
    "group_selector": ("rewards", "group_ids"),
    "objective": ("pairs",),
}
"""The parts ``params`` configures, with the arguments rlvr fills itself (the advantage's
beta, gamma, lam and baseline come from the preset's fields)."""

# estimators that already normalise by a std, so normalize="batch" would normalise twice
_SELF_NORMALISED = ("grpo", "reinforce_pp", "reinforce_pp_baseline")


def _problems(p: Preset) -> list[str]:
    """Every contradiction or out-of-range value of ``p``, as messages naming the fields."""
    problems = []
    for key, registry in (
        ("advantage", ADVANTAGES),
        ("policy_loss", POLICY_LOSSES),
        ("aggregation", AGGREGATIONS),
        ("kl_estimator", KL_ESTIMATORS),
    ):
        value = getattr(p, key)
        if value not in registry:
            problems.append(f"{key}: {registry.unknown(value)}")
    if p.kl_in not in KL_PLACEMENTS:
        problems.append(f"kl_in must be one of {KL_PLACEMENTS}, got {p.kl_in!r}")
    if p.normalize not in NORMALIZATIONS:
        problems.append(f"normalize must be one of {NORMALIZATIONS}, got {p.normalize!r}")
    for name, registry in (("group_filter", GROUP_FILTERS), ("group_selector", GROUP_SELECTORS)):
        value = getattr(p, name)
        if value is not None and value not in registry:
            problems.append(f"{name}: {registry.unknown(value)}")
    if p.objective not in OBJECTIVES:
        problems.append(f"objective: {OBJECTIVES.unknown(p.objective)}")
    if problems:
        return problems  # the checks below look the names up
    estimator, loss = ADVANTAGES[p.advantage], POLICY_LOSSES[p.policy_loss]
    problems += _objective_problems(p)

    # clipping
    if p.clip_low < 0 or p.clip_high < 0:
        problems.append(f"clip_low and clip_high must be >= 0, got {p.clip_low}, {p.clip_high}")
    if loss.clip_space == "ratio" and p.clip_low > 1:
        problems.append(
            f"clip_low = {p.clip_low} > 1 puts the ratio's lower bound 1 - clip_low below 0 "
            f"(policy_loss {p.policy_loss!r} clips the ratio; 1 means no lower bound)"
        )
    if p.dual_clip is not None:
        if p.dual_clip <= 1:
            problems.append(f"dual_clip must be > 1, got {p.dual_clip}")
        if not loss.dual_clip:
            dual = ", ".join(k for k, s in POLICY_LOSSES.items() if s.dual_clip)
            problems.append(f"dual_clip applies to the {dual} policy losses, not {p.policy_loss!r}")

    # ratio level vs advantage level
    if loss.sequence_level and estimator.token_level:
        problems.append(
            f"policy_loss {p.policy_loss!r} uses a sequence-level ratio but advantage "
            f"{p.advantage!r} gives token-level advantages; use a per-sequence estimator "
            f"(grpo, dr_grpo, rloo, gpg, remax, reinforce) or policy_loss 'token'"
        )
    if loss.sequence_level and p.top_entropy_rho is not None:
        problems.append(
            f"top_entropy_rho selects tokens, but policy_loss {p.policy_loss!r} is sequence-level"
        )

    # KL
    if p.beta < 0:
        problems.append(f"beta must be >= 0, got {p.beta}")
    if p.kl_in == "reward" and p.beta > 0 and not estimator.uses_token_kl:
        users = ", ".join(k for k, e in ADVANTAGES.items() if e.uses_token_kl)
        problems.append(
            f"kl_in='reward' but advantage {p.advantage!r} ignores token_kl: put the KL in the "
            f"loss (kl_in='loss') or use one of {users}"
        )
    if p.kl_in == "reward" and p.kl_estimator == "k3+":
        problems.append(
            "kl_estimator 'k3+' differs from k3 only in its gradient, which a reward does not "
            "carry: use k1 (unbiased) in the reward"
        )
    if p.reference_reset_every < 0:
        problems.append(f"reference_reset_every must be >= 0, got {p.reference_reset_every}")
    if p.reference_reset_every > 0 and not p.needs_reference:
        problems.append("reference_reset_every > 0 but beta = 0: there is no reference to reset")
    if not 0 < p.reference_mix <= 1:
        problems.append(f"reference_mix must be in (0, 1], got {p.reference_mix}")
    if p.reference_mix < 1 and p.reference_reset_every == 0:
        problems.append(
            "reference_mix < 1 mixes the policy into the reference at each reset: set "
            "reference_reset_every (1: every step, as TR-DPO)"
        )

    # advantage options
    if p.normalize == "batch" and p.advantage in _SELF_NORMALISED:
        problems.append(
            f"normalize='batch' replaces group normalisation, but advantage {p.advantage!r} "
            f"already divides by a std; for group mean and batch std use dr_grpo with "
            f"normalize='batch'"
        )
    if p.pos_weight < 0 or p.neg_weight < 0 or p.pos_weight == p.neg_weight == 0:
        problems.append(
            f"pos_weight and neg_weight must be >= 0 and not both 0, got {p.pos_weight}, "
            f"{p.neg_weight}"
        )
    if p.reward_baseline != 0 and p.advantage != "reinforce":
        problems.append(
            f"reward_baseline is the baseline of the 'reinforce' estimator; advantage "
            f"{p.advantage!r} does not use it"
        )
    if p.top_entropy_rho is not None and not 0 < p.top_entropy_rho <= 1:
        problems.append(f"top_entropy_rho must be in (0, 1], got {p.top_entropy_rho}")

    # sampling and shaping
    if p.overlong_buffer_frac is not None and not 0 <= p.overlong_buffer_frac <= 1:
        problems.append(f"overlong_buffer_frac must be in [0, 1], got {p.overlong_buffer_frac}")
    if p.max_draws < 1:
        problems.append(f"max_draws must be >= 1, got {p.max_draws}")
    if p.max_draws > 1 and p.selector is None:
        problems.append(
            "max_draws > 1 refills dropped groups, which needs dynamic_sampling or a group_selector"
        )
    if p.dynamic_sampling and "greedy_rewards" in estimator.requires:
        problems.append(
            f"dynamic_sampling drops groups whose sampled rewards are all equal, but "
            f"{p.advantage!r} advantages r_i - r_greedy are nonzero there"
        )
    if (p.group_filter is None) != (p.group_filter_oversample is None):
        problems.append("group_filter and group_filter_oversample are set together or not at all")
    if p.group_filter_oversample is not None and p.group_filter_oversample < 2:
        problems.append(
            f"group_filter_oversample must be >= 2 (sample k > G), got {p.group_filter_oversample}"
        )

    # value head
    needs_values = "values" in estimator.requires
    if needs_values and p.vf_coef <= 0:
        problems.append(f"advantage {p.advantage!r} needs a trained value head: vf_coef > 0")
    if not needs_values and (p.vf_coef != 0 or p.value_clip is not None):
        problems.append(
            f"vf_coef and value_clip train a value head, which advantage {p.advantage!r} "
            f"does not use (only gae does)"
        )
    if not needs_values and (p.gamma != 1 or p.lam != 1):
        problems.append(f"gamma and lam are GAE's; advantage {p.advantage!r} does not use them")
    if not (0 <= p.gamma <= 1 and 0 <= p.lam <= 1):
        problems.append(f"gamma and lam must be in [0, 1], got {p.gamma}, {p.lam}")
    if p.value_clip is not None and p.value_clip <= 0:
        problems.append(f"value_clip must be > 0 or None, got {p.value_clip}")
    problems += _param_problems(p)
    return problems


def _objective_problems(p: Preset) -> list[str]:
    """Contradictions of the objective, the samples' source, pairing, sync_every, sft_coef."""
    problems = []
    objective = OBJECTIVES[p.objective]
    if p.samples not in SAMPLE_SOURCES:
        problems.append(f"samples must be one of {SAMPLE_SOURCES}, got {p.samples!r}")
    if p.pairing is not None and objective.kind != "pairs":
        problems.append(
            f"pairing applies to pair objectives (dpo, ipo, rebel), not {p.objective!r}"
        )
    if p.pairing is not None and p.pairing not in PAIRINGS:
        problems.append(f"pairing must be one of {PAIRINGS}, got {p.pairing!r}")
    if p.sync_every < 1:
        problems.append(f"sync_every must be >= 1, got {p.sync_every}")
    if p.sft_coef < 0:
        problems.append(f"sft_coef must be >= 0, got {p.sft_coef}")
    if p.sft_coef > 0 and (objective.kind != "policy_gradient" or p.samples != "policy"):
        problems.append(
            "sft_coef adds an SFT term to a policy-gradient objective on sampled groups"
        )
    if objective.kind != "policy_gradient":
        if p.beta > 0:
            problems.append(
                f"beta is the KL penalty of policy-gradient objectives; objective {p.objective!r} "
                "sets its own strength in params.objective"
            )
        if p.kl_in != "loss":
            problems.append(
                f"kl_in places the KL penalty of policy-gradient objectives; objective "
                f"{p.objective!r} has none"
            )
        if p.entropy_coef or p.top_entropy_rho is not None or p.vf_coef:
            problems.append(
                f"entropy_coef, top_entropy_rho and value heads apply to policy-gradient "
                f"objectives, not {p.objective!r}"
            )
    if p.samples == "data":
        if p.dynamic_sampling or p.selector or p.group_filter or p.overlong_buffer_frac is not None:
            problems.append(
                "samples: data trains on the data's completions: dynamic sampling, group "
                "filters and the overlong penalty apply to sampled groups"
            )
        if p.sync_every != 1:
            problems.append("sync_every applies to sampled groups (samples: policy)")
        if p.objective == "policy_gradient":
            problems.append(
                "samples: data needs an objective that learns from given completions "
                "(imitation, dpo, ipo, rebel)"
            )
        if "student_logp" in ADVANTAGES[p.advantage].requires:
            problems.append(f"advantage {p.advantage!r} scores the policy's own samples")
    return problems


def _part_function(p: Preset, part: str) -> Any:
    """The function of the part ``part`` the preset selects, or None when it selects none."""
    if part == "advantage":
        return ADVANTAGES[p.advantage].fn
    if part == "policy_loss":
        return POLICY_LOSSES[p.policy_loss].fn
    if part == "aggregation":
        return AGGREGATIONS[p.aggregation]
    if part == "kl_estimator":
        return KL_ESTIMATORS[p.kl_estimator]
    if part == "group_filter":
        return None if p.group_filter is None else GROUP_FILTERS[p.group_filter]
    if part == "objective":
        return OBJECTIVES[p.objective].fn
    return None if p.selector is None else GROUP_SELECTORS[p.selector]


def _param_problems(p: Preset) -> list[str]:
    """``params`` that name no part, a part the preset does not select, or arguments its
    function does not take."""
    problems = []
    for part, values in p.params.items():
        if part not in ARGUMENTS_FILLED:
            problems.append(
                f"params.{part}: not a part with parameters; parts: {', '.join(ARGUMENTS_FILLED)}"
            )
            continue
        if not isinstance(values, Mapping):
            problems.append(f"params.{part} must be a mapping of keyword arguments")
            continue
        fn = _part_function(p, part)
        if fn is None:
            problems.append(f"params.{part}: the algorithm selects no {part}")
            continue
        try:
            check_params(fn, values, f"params.{part}", ARGUMENTS_FILLED[part])
        except ValueError as err:
            problems.append(str(err))
    return problems


def validate(preset: Preset) -> None:
    """Raise ValueError listing every contradictory or out-of-range choice of ``preset``."""
    problems = _problems(preset)
    if problems:
        raise ValueError(f"algorithm {preset.name!r}: " + "; ".join(problems))


PRESETS: Registry[Preset] = Registry("preset")


def register_preset(preset: Preset) -> Preset:
    """Add ``preset`` (validated) to :data:`PRESETS` under ``preset.name``: a config selects it
    with ``algorithm.preset`` and ``rlvr algorithms`` lists it."""
    validate(preset)
    return PRESETS.add(preset.name, preset)


for _preset in (
    Preset(
        name="grpo",
        advantage="grpo",
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
        clip_high=0.28,
        aggregation="token-mean",
        overlong_buffer_frac=0.2,
        dynamic_sampling=True,
        max_draws=10,
        citation=(
            "Yu et al. 2025, DAPO: An Open-Source LLM Reinforcement Learning System at "
            "Scale, arXiv:2503.14476"
        ),
        summary=(
            "GRPO advantages with DAPO's four techniques: clip-higher (eps_low 0.2, "
            "eps_high 0.28), dynamic sampling (groups whose rewards are all equal are "
            "dropped and the batch refilled, at most 10 rollout draws per step), token-level "
            "mean over the batch, and the soft overlong penalty (L_cache = 0.2 * budget, "
            "4096 / 20480 in the paper); no KL penalty."
        ),
    ),
    Preset(
        name="gspo",
        advantage="grpo",
        policy_loss="sequence",
        clip_low=3e-4,
        clip_high=4e-4,
        citation=("Zheng et al. 2025, Group Sequence Policy Optimization, arXiv:2507.18071"),
        summary=(
            "GRPO advantages with the length-normalised sequence ratio s_i = exp(mean_t "
            "log rho) clipped at 3e-4 / 4e-4 (token form, sg[s_i] * pi / sg[pi]), "
            "seq-mean-token-mean aggregation, no KL penalty."
        ),
    ),
    Preset(
        name="gmpo",
        advantage="grpo",
        policy_loss="geometric",
        clip_low=0.4,
        clip_high=0.4,
        citation=("Zhao et al. 2025, Geometric-Mean Policy Optimization, arXiv:2507.20673"),
        summary=(
            "GRPO advantages with the geometric mean of token ratios instead of their "
            "arithmetic mean, each clipped in log space to (-0.4, 0.4), one value per "
            "sequence averaged over sequences, no KL penalty."
        ),
    ),
    Preset(
        name="gpg",
        advantage="gpg",
        policy_loss="none",
        aggregation="token-mean",
        citation=(
            "Chu et al. 2025, GPG: A Simple and Strong Reinforcement Learning Baseline for "
            "Model Reasoning, arXiv:2504.02546"
        ),
        summary=(
            "Plain policy gradient -A log pi (no ratio, no clip, no KL, no reference) with "
            "A = alpha * (r - group mean), alpha = N / N_valid rescaling for groups of "
            "equal rewards; token-mean aggregation. One update per batch (ppo_epochs = 1)."
        ),
    ),
    Preset(
        name="rloo",
        advantage="rloo",
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
    Preset(
        name="reinforce_pp",
        advantage="reinforce_pp",
        aggregation="token-mean",
        beta=0.01,
        kl_estimator="k1",
        kl_in="reward",
        citation=(
            "Hu 2025, REINFORCE++: A Simple and Efficient Approach for Aligning Large "
            "Language Models, arXiv:2501.03262"
        ),
        summary=(
            "No critic, no group baseline: token rewards -beta * k1_t plus r at the last "
            "token (beta = 0.01), undiscounted returns whitened over the whole batch, PPO "
            "clip 0.2, token-mean aggregation."
        ),
    ),
    Preset(
        name="reinforce_pp_baseline",
        advantage="reinforce_pp_baseline",
        aggregation="token-mean",
        beta=0.01,
        kl_estimator="k1",
        kl_in="reward",
        citation=(
            "Hu 2025, REINFORCE++: A Simple and Efficient Approach for Aligning Large "
            "Language Models, arXiv:2501.03262 (REINFORCE++-baseline)"
        ),
        summary=(
            "REINFORCE++ with the group mean reward subtracted first (r - mean_g r at the "
            "last token, -beta * k1_t on every token, beta = 0.01), returns whitened over "
            "the batch, PPO clip 0.2, token-mean aggregation."
        ),
    ),
    Preset(
        name="remax",
        advantage="remax",
        policy_loss="none",
        aggregation="seq-mean-token-sum",
        citation=(
            "Li et al. 2023, ReMax: A Simple, Effective, and Efficient Reinforcement "
            "Learning Method for Aligning Large Language Models, arXiv:2310.10505"
        ),
        summary=(
            "REINFORCE -A log pi(y) summed over tokens with the greedy completion's reward as "
            "baseline, A = r - r_greedy: the rollout adds one greedy completion per prompt. "
            "No clip, no KL; one update per batch (ppo_epochs = 1)."
        ),
    ),
    Preset(
        name="cispo",
        advantage="grpo",
        policy_loss="cispo",
        clip_low=1.0,
        clip_high=0.28,
        aggregation="token-mean",
        citation=(
            "MiniMax 2025, MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning "
            "Attention, arXiv:2506.13585"
        ),
        summary=(
            "GRPO advantages with -sg[clip(rho, 0, 1 + eps_high)] * A * log pi: the IS "
            "weight is clipped and detached so no token loses its gradient; no lower bound "
            "as in the paper, eps_high 0.28 (the paper does not publish its tuned value), "
            "token-mean aggregation, no KL penalty."
        ),
    ),
    Preset(
        name="sapo",
        advantage="grpo",
        policy_loss="sapo",
        aggregation="seq-mean-token-mean",
        params={"policy_loss": {"tau_pos": 1.0, "tau_neg": 1.05}},
        citation="Qwen Team 2025, Soft Adaptive Policy Optimization, arXiv:2511.20347",
        summary=(
            "GRPO advantages with the hard clip replaced by a soft gate: L = -(4 / tau) "
            "sigmoid(tau (rho - 1)) A, whose gradient is the vanilla one at rho = 1 and decays "
            "smoothly off-policy; tau_pos 1.0, tau_neg 1.05 (negative advantages gated faster) "
            "as in the paper, seq-mean-token-mean aggregation, no KL penalty."
        ),
    ),
    Preset(
        name="aapo",
        advantage="aapo",
        policy_loss="none",
        aggregation="token-mean",
        citation=(
            "Xiong et al. 2025, AAPO: Enhancing the Reasoning Capabilities of LLMs with "
            "Advantage Momentum, arXiv:2505.14264"
        ),
        summary=(
            "GRPO advantages plus clip(r_i - r_ref_i, -0.2, 0.28), the margin over the frozen "
            "reference model's completion of the same prompt (the rollouts sample each group "
            "from the initial policy too); plain -A log pi loss, token mean, no clip, no KL."
        ),
    ),
    Preset(
        name="ppo",
        advantage="gae",
        aggregation="token-mean",
        beta=0.02,
        kl_estimator="k1",
        kl_in="reward",
        normalize="batch",
        vf_coef=0.1,
        value_clip=0.2,
        gamma=1.0,
        lam=0.95,
        citation=(
            "Schulman et al. 2017, Proximal Policy Optimization Algorithms, "
            "arXiv:1707.06347; token rewards with a k1 KL penalty as in Ouyang et al. 2022, "
            "Training language models to follow instructions with human feedback, "
            "arXiv:2203.02155"
        ),
        summary=(
            "Actor-critic PPO: token rewards -beta * k1_t plus r at the last token "
            "(beta = 0.02), GAE(gamma 1, lambda 0.95) from a value head, advantages whitened "
            "over the batch, PPO clip 0.2, clipped value loss (0.2) weighted 0.1, token-mean."
        ),
    ),
    Preset(
        name="nsr",
        advantage="reinforce",
        reward_baseline=0.5,
        pos_weight=0.0,
        aggregation="token-mean",
        citation=(
            "Zhu et al. 2025, The Surprising Effectiveness of Negative Reinforcement in LLM "
            "Reasoning, arXiv:2506.01347"
        ),
        summary=(
            "Negative sample reinforcement: REINFORCE advantages r - 0.5 (+-0.5 for 0/1 "
            "rewards, the paper's +-1 up to scale) with positive advantages weighted 0, so "
            "only wrong completions are pushed down; PPO clip 0.2, token-mean, no KL. "
            "pos_weight = 0.1 gives W-REINFORCE."
        ),
    ),
    Preset(
        name="sft",
        advantage="verified",
        objective="imitation",
        samples="data",
        aggregation="token-mean",
        citation="Ouyang et al. 2022, Training language models to follow instructions with "
        "human feedback (InstructGPT), arXiv:2203.02155, Sec. 3.5 (SFT)",
        summary=(
            "Supervised fine-tuning on the data's demonstrations (a completion column, or the "
            "assistant turns of a chat): negative log-likelihood of the assistant tokens, "
            "token mean over the batch, no sampling."
        ),
    ),
    Preset(
        name="rft",
        advantage="verified",
        objective="imitation",
        aggregation="token-mean",
        citation="Yuan et al. 2023, Scaling Relationship on Learning Mathematical Reasoning "
        "with Large Language Models (RFT), arXiv:2308.01825; Zelikman et al. 2022, STaR, "
        "arXiv:2203.14465",
        summary=(
            "Rejection-sampling fine-tuning (expert iteration): sample G per prompt, keep the "
            "verified ones (reward >= params.advantage.threshold, 1), and fine-tune on them "
            "with the SFT loss; the wrong ones are not pushed down."
        ),
    ),
    Preset(
        name="dpo",
        advantage="grpo",
        objective="dpo",
        samples="data",
        citation="Rafailov et al. 2023, Direct Preference Optimization: Your Language Model is "
        "Secretly a Reward Model, arXiv:2305.18290",
        summary=(
            "Offline DPO on preference pairs of the data (chosen, rejected columns): "
            "-log sigmoid(beta h), beta = 0.1 (params.objective), h the log-ratio to the "
            "reference (the initial policy) of the chosen minus the rejected."
        ),
    ),
    Preset(
        name="ipo",
        advantage="grpo",
        objective="ipo",
        samples="data",
        citation="Azar et al. 2023, A General Theoretical Paradigm to Understand Learning from "
        "Human Preferences, arXiv:2310.12036",
        summary=(
            "Offline IPO on the data's preference pairs: (h - 1/(2 tau))^2, tau = 0.1, with "
            "DPO's log-ratio margin h; no sigmoid, so the margin does not grow without bound."
        ),
    ),
    Preset(
        name="online_dpo",
        advantage="grpo",
        objective="dpo",
        pairing="best_worst",
        citation="Guo et al. 2024, Direct Language Model Alignment from Online AI Feedback, "
        "arXiv:2402.04792",
        summary=(
            "DPO on the policy's own groups: chosen = the best, rejected = the worst sample "
            "of each group by the reward (groups of equal rewards skipped and counted), "
            "beta = 0.1, the reference the initial policy; fresh samples every step."
        ),
    ),
    Preset(
        name="semi_online_dpo",
        advantage="grpo",
        objective="dpo",
        pairing="best_worst",
        sync_every=5,
        citation="Lanchantin et al. 2025, Bridging Offline and Online Reinforcement Learning "
        "for LLMs, arXiv:2506.21495",
        summary=(
            "Online DPO whose sampler gets the trained weights only every s = 5 updates "
            "(sync_every): pairs come from a snapshot between syncs, between offline (s = "
            "inf) and online (s = 1) DPO."
        ),
    ),
    Preset(
        name="rebel",
        advantage="grpo",
        objective="rebel",
        pairing="adjacent",
        citation="Gao et al. 2024, REBEL: Reinforcement Learning via Regressing Relative "
        "Rewards, arXiv:2404.16767",
        summary=(
            "Least-squares regression of reward differences on differences of log-ratios to "
            "the sampling policy, (1/eta) [log-ratio(y) - log-ratio(y')] ~ r(y) - r(y'), on "
            "adjacent pairs of each group, eta = 1 (params.objective); no reference, no clip."
        ),
    ),
    Preset(
        name="on_policy_distillation",
        advantage="reverse_kl",
        aggregation="token-mean",
        citation="Agarwal et al. 2024, On-Policy Distillation of Language Models (GKD), "
        "arXiv:2306.13649; Lu & Thinking Machines Lab 2025, On-Policy Distillation",
        summary=(
            "A teacher (model.teacher) scores the student's own samples token by token; the "
            "per-token reverse KL log pi_s - log pi_T is the negative advantage (task reward "
            "mixed in with params.advantage.task_weight), PPO clip 0.2, token mean, no KL."
        ),
    ),
):
    register_preset(_preset)


def get_preset(name: str) -> Preset:
    """The preset registered as ``name``; ValueError listing the accepted names otherwise."""
    return PRESETS.get_or_raise(name)


def _loss_bounds(preset: Preset, loss: object) -> dict[str, Any]:
    """The clip_low / clip_high defaults of the policy loss ``loss`` (its function's signature)
    when its clip space differs from that of ``preset.policy_loss``: the preset's bounds are in
    its own loss's space (a PPO ratio offset of 0.2 is no DPPO-KL threshold in nats). Empty when
    the spaces agree, ``loss`` is not registered, or it clips nothing."""
    spec = POLICY_LOSSES.get(loss) if isinstance(loss, str) else None
    if spec is None or spec.clip_space in (None, POLICY_LOSSES[preset.policy_loss].clip_space):
        return {}
    parameters = inspect.signature(spec.fn).parameters
    return {
        name: parameters[name].default
        for name in ("clip_low", "clip_high")
        if name in parameters and parameters[name].default is not inspect.Parameter.empty
    }


def resolve(preset_name: str, **overrides: object) -> Preset:
    """The preset ``preset_name`` with ``overrides`` applied, validated.

    A ``policy_loss`` override of another clip space than the preset's loss (e.g. ``dppo_kl``,
    nats, on the ``grpo`` preset, a ratio) takes that loss's own clip_low / clip_high defaults
    (``dppo_kl``: 0.05) for the bounds the overrides do not set.

    Args:
        preset_name: a key of :data:`PRESETS`.
        overrides: new values for Preset fields (all but name, citation, summary); a value of
            None sets the field to None (e.g. ``dual_clip=None``).
    Returns:
        The resolved :class:`Preset` (same name as the base preset).
    Raises:
        ValueError: unknown preset or field, or an invalid combination (:func:`validate`).
    """
    preset = get_preset(preset_name)
    accepted = [f.name for f in dataclasses.fields(Preset) if f.name not in FIXED_FIELDS]
    unknown = sorted(set(overrides) - set(accepted))
    if unknown:
        raise ValueError(f"unknown algorithm fields {unknown}; accepted: {', '.join(accepted)}")
    bounds = _loss_bounds(preset, overrides.get("policy_loss", preset.policy_loss))
    resolved = dataclasses.replace(preset, **{**bounds, **overrides})
    validate(resolved)
    return resolved


def advantage_kwargs(preset: Preset) -> dict[str, float]:
    """The hyperparameters of ``preset.advantage`` taken from the preset.

    beta (only when kl_in == "reward"; else 0), gamma, lam and baseline (reward_baseline),
    restricted to those the estimator accepts.
    """
    available = {
        "beta": preset.beta if preset.kl_in == "reward" else 0.0,
        "gamma": preset.gamma,
        "lam": preset.lam,
        "baseline": preset.reward_baseline,
    }
    accepted = ADVANTAGES[preset.advantage].hyperparams
    return {k: v for k, v in available.items() if k in accepted}


def preset_advantages(preset: Preset, inputs: AdvantageInputs) -> AdvantageOutput:
    """The preset's advantages: estimator, then batch normalisation, then sign weights.

    A = weight_by_sign(normalize_batch?(compute_advantages(advantage, inputs, **kwargs)),
    pos_weight, neg_weight); returns pass through unchanged.

    Args:
        preset: a validated preset.
        inputs: the estimator's inputs (mask required for token-level estimators).
    Returns:
        :class:`AdvantageOutput` with advantages [N] or [N, T] and returns [N, T] or None.
    """
    out = compute_advantages(
        preset.advantage, inputs, **advantage_kwargs(preset), **preset.params.get("advantage", {})
    )
    advantages = out.advantages
    if preset.normalize == "batch":
        advantages = normalize_batch(advantages, inputs.mask if advantages.dim() == 2 else None)
    advantages = weight_by_sign(advantages, preset.pos_weight, preset.neg_weight)
    return AdvantageOutput(advantages, out.returns)
