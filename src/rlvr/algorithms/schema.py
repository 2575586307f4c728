"""The algorithm's shape: one frozen dataclass per part of the update, nested in
:class:`Algorithm`; presets (:mod:`rlvr.algorithms.presets`) and configs (``algorithm:``) have
this shape, and a run reads one resolved :class:`Algorithm`.

A part that selects a registered function has a ``name`` and ``params``, that function's own
keyword arguments; in a config they are written beside the name::

    algorithm:
      preset: grpo
      advantage: {name: grpo, eps: 1.0e-4}
      policy_loss: {name: token, clip_high: 0.28}
      kl: {beta: 0.0}
      stages: [{name: group_filter, criterion: shortest, oversample: 2}]

:func:`rlvr.flat_config.nest_algorithm` reads the flat form older configs used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def _params() -> Mapping[str, Any]:
    return field(default_factory=dict, hash=False)


@dataclass(frozen=True, kw_only=True)
class ObjectivePart:
    """What the learner minimises (:data:`~rlvr.algorithms.objectives.OBJECTIVES`).

    Attributes:
        name: policy_gradient (the parts below), imitation (SFT, RFT), dpo, ipo, rebel, or a
            user's objective.
        samples: ``policy`` (G sampled completions per prompt) or ``data`` (the problems' own
            demonstrations or preference pairs: SFT, offline DPO).
        pairing: how a pair objective pairs a group's samples (``best_worst``, ``adjacent``,
            ``margin``; None: the objective's default).
        margin: the ``margin`` pairing's least reward gap r_c - r_r of a pair (DNO's
            large-margin pairs); 0 with the other pairings.
        min_chosen: the ``margin`` pairing's least reward of a chosen sample (None: any).
        student_margin: the ``margin`` pairing's margin when the chosen is the policy's own
            sample, not a gold response (DNO's relaxed 1 point); None: ``margin``.
        sync_every: the rollouts get the trained weights every this many updates (1: online;
            s > 1: semi-online, Lanchantin et al. 2025).
        sft_coef: weight of an SFT term on the problems' demonstrations beside the RL loss.
        params: the objective function's keyword arguments (e.g. DPO's beta).
    """

    name: str = "policy_gradient"
    samples: str = "policy"
    pairing: str | None = None
    margin: float = 0.0
    min_chosen: float | None = None
    student_margin: float | None = None
    sync_every: int = 1
    sft_coef: float = 0.0
    params: Mapping[str, Any] = _params()


@dataclass(frozen=True, kw_only=True)
class AdvantagePart:
    """The advantage estimator (:data:`~rlvr.algorithms.advantages.ADVANTAGES`).

    Attributes:
        name: the estimator.
        normalize: ``group`` (the estimator's own advantages) or ``batch`` (then whitened over
            the batch).
        pos_weight: weight of positive advantages (W-REINFORCE's lambda; 0: NSR).
        neg_weight: weight of negative advantages (0: PSR).
        params: the estimator's keyword arguments (GAE's gamma and lam, REINFORCE's baseline,
            GRPO's eps, ...); its beta is the KL's when the KL is in the reward.
    """

    name: str = "grpo"
    normalize: str = "group"
    pos_weight: float = 1.0
    neg_weight: float = 1.0
    params: Mapping[str, Any] = _params()


@dataclass(frozen=True, kw_only=True)
class PolicyLossPart:
    """The per-token policy loss (:data:`~rlvr.algorithms.losses.POLICY_LOSSES`).

    Attributes:
        name: token (PPO's clip), sequence (GSPO), geometric (GMPO), cispo, sapo, dppo_tv,
            dppo_kl, none (REINFORCE), ...
        clip_low: eps_low, in the clip space of the loss (ratio offset; log space for
            geometric; weight bound for cispo; delta_low for dppo_tv / dppo_kl).
        clip_high: eps_high in the same space.
        dual_clip: dual-clip bound c (> 1) for negative advantages, or None.
        params: the loss function's keyword arguments (e.g. SAPO's tau_pos, tau_neg).
    """

    name: str = "token"
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    params: Mapping[str, Any] = _params()


@dataclass(frozen=True, kw_only=True)
class AggregationPart:
    """How per-token losses become one number (:data:`~rlvr.algorithms.losses.AGGREGATIONS`)."""

    name: str = "seq-mean-token-mean"
    params: Mapping[str, Any] = _params()


@dataclass(frozen=True, kw_only=True)
class KLPart:
    """The KL penalty to the reference policy.

    Attributes:
        beta: its weight (0: no KL term).
        estimator: k1, k2, k3, k3+ (:data:`~rlvr.algorithms.kl.KL_ESTIMATORS`).
        placement: ``loss`` (beta * KL_t added to the per-token loss) or ``reward``
            (-beta * KL_t in the token rewards of a token-level estimator).
        params: the estimator's keyword arguments.
    """

    beta: float = 0.0
    estimator: str = "k3"
    placement: str = "loss"
    params: Mapping[str, Any] = _params()


@dataclass(frozen=True, kw_only=True)
class ReferencePart:
    """The reference policy's updates.

    Attributes:
        reset_every: ProRL: reset it to the current policy every N steps (0: never).
        mix: at each reset, theta_ref <- mix theta + (1 - mix) theta_ref (1: ProRL's hard
            reset; < 1: TR-DPO's soft update).
    """

    reset_every: int = 0
    mix: float = 1.0


@dataclass(frozen=True, kw_only=True)
class EntropyPart:
    """The entropy of the policy: bonus, token selection, adaptive control.

    Attributes:
        coef: fixed entropy bonus weight (0: none).
        top_rho: train only the top rho fraction of tokens by entropy (Wang et al. 2025), or
            None (all tokens).
        target: Skywork-OR1's adaptive bonus: on while the mean token entropy is below this
            many nats, its weight moved by coef_step per step up to coef_max; None: off.
        coef_step: the adaptive weight's change per step.
        coef_max: the adaptive weight's largest value.
        band: SPINE's entropy-band penalty weight on the trained tokens (0: none).
        band_low, band_high: the quantiles of a sample's trained-token entropies that bound its
            band (SPINE's 10% and 50%).
    """

    coef: float = 0.0
    top_rho: float | None = None
    target: float | None = None
    coef_step: float = 1e-4
    coef_max: float = 0.005
    band: float = 0.0
    band_low: float = 0.1
    band_high: float = 0.5


@dataclass(frozen=True, kw_only=True)
class ValuePart:
    """PPO's value head (advantage gae only).

    Attributes:
        coef: value loss weight (0: no value head).
        clip: value clip range, or None.
    """

    coef: float = 0.0
    clip: float | None = None


@dataclass(frozen=True, kw_only=True)
class CorrectionPart:
    """Corrections for the sampler's mismatch with the trainer (Yao et al. 2025; Liu, Yao et
    al. 2025; DeepSeek-V3.2).

    Attributes:
        tis_cap: truncated importance sampling: weight each token's loss by
            min(pi_train / pi_sampler, tis_cap) at tis_level; None: off.
        tis_level: ``token`` or ``sequence`` (the product of the ratios over the sequence).
        mis_band: masked importance sampling: ratios outside [low, high] get weight 0; None:
            off.
        mis_level: ``token``, ``sequence`` or ``geometric`` (exp of the mean log-ratio).
        off_policy_mask: drop a negative-advantage sequence whose mean log(pi_sampler /
            pi_theta) per token exceeds this many nats; None: off.
    """

    tis_cap: float | None = None
    tis_level: str = "token"
    mis_band: tuple[float, float] | None = None
    mis_level: str = "token"
    off_policy_mask: float | None = None


@dataclass(frozen=True, kw_only=True)
class CreditPart:
    """Credit across the turns of agent episodes (:data:`~rlvr.algorithms.credit.CREDIT`).

    Attributes:
        name: broadcast (the episode's advantage on every action), turn_discounted, gigpo,
            gated, igpo, or a user's rule.
        gamma: discount of turn rewards (turn_discounted, gigpo, gated, igpo).
        gigpo_weight: GiGPO's weight of the step advantage.
        gate: gated: the outcome (last turn's reward) that turn rewards need.
    """

    name: str = "broadcast"
    gamma: float = 1.0
    gigpo_weight: float = 1.0
    gate: float = 1.0


@dataclass(frozen=True, kw_only=True)
class SelectPart:
    """Which whole groups a step trains on (:data:`~rlvr.algorithms.filters.GROUP_SELECTORS`).

    Attributes:
        name: ``all`` (every group), ``informative`` (DAPO's dynamic sampling: groups whose
            rewards differ), ``pass_rate``, ``variance``, or a user's selector.
        max_draws: rollout draws per step at most, the first included: a selector that drops
            groups refills the batch from further draws.
        params: the selector's keyword arguments (e.g. pass_rate's low and high).
    """

    name: str = "all"
    max_draws: int = 1
    params: Mapping[str, Any] = _params()

    @property
    def active(self) -> bool:
        """Whether the step selects groups (any selector but ``all``)."""
        return self.name != "all"


@dataclass(frozen=True, kw_only=True)
class OverlongPart:
    """DAPO's soft overlong penalty.

    Attributes:
        buffer_frac: L_cache as a fraction of the generation budget, or None (no penalty).
    """

    buffer_frac: float | None = None


@dataclass(frozen=True, kw_only=True)
class ExpertPart:
    """Expert traces inside the groups (LUFFY, :mod:`rlvr.algorithms.expert`).

    Attributes:
        traces: each problem's first ``traces`` demonstrations (its worked solutions) added to
            its group of sampled completions, scored by the run's reward; 0: none.
        shaping: how the off-policy rows' ratio pi_theta / 1 is shaped
            (:data:`~rlvr.algorithms.expert.EXPERT_SHAPINGS`: luffy, ratio, or a user's).
        params: the shaping's keyword arguments (luffy's gamma).
    """

    traces: int = 0
    shaping: str = "luffy"
    params: Mapping[str, Any] = _params()


@dataclass(frozen=True, kw_only=True)
class StageEntry:
    """A draw stage (``rlvr.trainer.stages``): a named transform of a draw's samples.

    Attributes:
        name: a registered stage: hints (GHPO), group_filter (GFPO), replay (RePO), or a
            user's.
        params: the stage's settings.
    """

    name: str
    params: Mapping[str, Any] = _params()


@dataclass(frozen=True, kw_only=True)
class Algorithm:
    """One algorithm: a choice for every part of the update, the form presets are written in
    and the one object a run reads once its config is resolved.

    The per-token loss of a policy-gradient algorithm is

        L_t = policy_loss_t(policy_loss)                  on kept tokens
              + kl.beta * KL_t(kl.estimator)              if kl.placement == "loss"
              - entropy.coef * H_t
              + value.coef * value_loss_t(value.clip)     if advantage.name == "gae"

    aggregated by ``aggregation``; with kl.placement == "reward" the KL enters the advantages.

    Attributes:
        name: the preset it was resolved from.
        objective, advantage, policy_loss, aggregation, kl, reference, entropy, value,
        correction, credit, select, overlong: the parts (see each class).
        stages: the draw stages, in the order they run (a stage that reads the selected
            groups runs after the selection).
        ppo_epochs: mu, passes over each batch.
        minibatches: optimiser steps per pass.
        citation: the paper.
        summary: one line on what it does.
    """

    name: str
    objective: ObjectivePart = ObjectivePart()
    advantage: AdvantagePart = AdvantagePart()
    policy_loss: PolicyLossPart = PolicyLossPart()
    aggregation: AggregationPart = AggregationPart()
    kl: KLPart = KLPart()
    reference: ReferencePart = ReferencePart()
    entropy: EntropyPart = EntropyPart()
    value: ValuePart = ValuePart()
    correction: CorrectionPart = CorrectionPart()
    credit: CreditPart = CreditPart()
    select: SelectPart = SelectPart()
    overlong: OverlongPart = OverlongPart()
    expert: ExpertPart = ExpertPart()
    stages: tuple[StageEntry, ...] = ()
    ppo_epochs: int = 1
    minibatches: int = 1
    citation: str = ""
    summary: str = ""


PARTS: dict[str, type] = {
    "objective": ObjectivePart,
    "advantage": AdvantagePart,
    "policy_loss": PolicyLossPart,
    "aggregation": AggregationPart,
    "kl": KLPart,
    "reference": ReferencePart,
    "entropy": EntropyPart,
    "value": ValuePart,
    "correction": CorrectionPart,
    "credit": CreditPart,
    "select": SelectPart,
    "overlong": OverlongPart,
    "expert": ExpertPart,
}
"""The nested parts of :class:`Algorithm`, by key."""

SCALARS = ("ppo_epochs", "minibatches")
"""The keys of :class:`Algorithm` that hold one value."""

FIXED = ("name", "citation", "summary")
"""The keys a config does not set (the preset's own)."""


def part_fields(part: str) -> tuple[str, ...]:
    """The fields of the part ``part`` a config sets by name (``params`` excluded)."""
    return tuple(f.name for f in dataclasses.fields(PARTS[part]) if f.name != "params")
