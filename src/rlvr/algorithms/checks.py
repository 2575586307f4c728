"""What makes an :class:`~rlvr.algorithms.schema.Algorithm` contradictory or out of range:
:func:`problems` lists every such choice, each message naming its nested key
(``kl.beta``, ``policy_loss.clip_low``, ...)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from rlvr.algorithms.advantages import ADVANTAGES
from rlvr.algorithms.credit import CREDIT
from rlvr.algorithms.expert import EXPERT_SHAPINGS
from rlvr.algorithms.filters import GROUP_SELECTORS
from rlvr.algorithms.kl import KL_ESTIMATORS
from rlvr.algorithms.losses import AGGREGATIONS, POLICY_LOSSES
from rlvr.algorithms.objectives import OBJECTIVES
from rlvr.algorithms.preference import PAIRINGS
from rlvr.algorithms.schema import Algorithm
from rlvr.registry import Registry, check_params

KL_PLACEMENTS = ("loss", "reward")
SAMPLE_SOURCES = ("policy", "data")
NORMALIZATIONS = ("group", "batch")
TIS_LEVELS = ("token", "sequence")
MIS_LEVELS = ("token", "sequence", "geometric")

ARGUMENTS_FILLED = {
    "advantage": ("inputs", "beta"),
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
        "proxy_logp",
        "entropy",
    ),
    "aggregation": ("loss", "mask", "total_tokens", "total_seqs", "max_len"),
    "kl": ("logp", "ref_logp"),
    "select": ("rewards", "group_ids"),
    "objective": ("pairs", "groups", "max_new_tokens", "ref_logp", "tokens"),
    "expert": ("logp",),
}
"""The parts with ``params``, with the arguments rlvr fills itself (the advantage's beta is
the KL's, when the KL is in the reward; a group objective's ``max_new_tokens`` is
``rollout.max_new_tokens`` and its ``ref_logp`` pi_ref's log-probs, where its function names
them)."""

NAMED: dict[str, tuple[str, Registry[Any]]] = {
    "objective": ("name", OBJECTIVES),
    "advantage": ("name", ADVANTAGES),
    "policy_loss": ("name", POLICY_LOSSES),
    "aggregation": ("name", AGGREGATIONS),
    "kl": ("estimator", KL_ESTIMATORS),
    "select": ("name", GROUP_SELECTORS),
    "credit": ("name", CREDIT),
    "expert": ("shaping", EXPERT_SHAPINGS),
}
"""The parts that name a registered function: the field holding the name, its registry."""

# estimators that already normalise by a std, so normalize="batch" would normalise twice
_SELF_NORMALISED = ("grpo", "reinforce_pp", "reinforce_pp_baseline")


def part_function(a: Algorithm, part: str) -> Callable[..., Any]:
    """The registered function the part ``part`` of ``a`` selects."""
    field, registry = NAMED[part]
    entry = registry[getattr(getattr(a, part), field)]
    return getattr(entry, "fn", entry)


def needs_reference(a: Algorithm) -> bool:
    """The run keeps a reference policy: a KL term (kl.beta > 0), an objective that reads it
    (DPO, IPO) or a policy-gradient objective's policy loss that does (A-LoL)."""
    objective = OBJECTIVES[a.objective.name]
    loss = POLICY_LOSSES[a.policy_loss.name]
    return (
        a.kl.beta > 0
        or objective.needs_reference
        or (objective.kind == "policy_gradient" and loss.needs_reference)
    )


def needs_teacher(a: Algorithm) -> bool:
    """The run loads ``model.teacher``: an advantage that reads its log-probs (on-policy
    distillation) or an objective that does (TGDPO's token-level reward model)."""
    requires = ADVANTAGES[a.advantage.name].requires
    return "teacher_logp" in requires or OBJECTIVES[a.objective.name].needs_teacher


def pairing(a: Algorithm) -> str:
    """The pairing of a pair objective (``objective.pairing``, or the objective's default)."""
    return a.objective.pairing or OBJECTIVES[a.objective.name].pairing or "best_worst"


def learns_from_reward_differences(a: Algorithm) -> bool:
    """Its updates come from how the rewards of a group's sampled completions differ: a
    group-relative advantage (GRPO, RLOO, ...) or pairs ranked by reward (online DPO, REBEL).
    Such a run needs groups of two or more, and learns nothing while every group's rewards are
    equal. Not so SFT and offline DPO (the data's completions), rejection sampling (it imitates
    every verified sample), on-policy distillation (the teacher's log-probs) or an estimator
    with its own baseline (REINFORCE, ReMax, SPO, PPO's GAE)."""
    if a.objective.samples != "policy":
        return False
    kind = OBJECTIVES[a.objective.name].kind
    return kind in ("pairs", "groups") or (
        kind == "policy_gradient" and ADVANTAGES[a.advantage.name].group_relative
    )


def problems(a: Algorithm) -> list[str]:
    """Every contradiction or out-of-range value of ``a``, as messages naming the keys."""
    found = []
    for part, (field, registry) in NAMED.items():
        value = getattr(getattr(a, part), field)
        if value not in registry:
            found.append(f"{part}.{field}: {registry.unknown(value)}")
    for key, value, accepted in (
        ("kl.placement", a.kl.placement, KL_PLACEMENTS),
        ("advantage.normalize", a.advantage.normalize, NORMALIZATIONS),
        ("objective.samples", a.objective.samples, SAMPLE_SOURCES),
        ("correction.tis_level", a.correction.tis_level, TIS_LEVELS),
        ("correction.mis_level", a.correction.mis_level, MIS_LEVELS),
    ):
        if value not in accepted:
            found.append(f"{key} must be one of {accepted}, got {value!r}")
    if found:
        return found  # the checks below look the names up
    for check in (
        _objective,
        _clipping,
        _kl,
        _advantage,
        _entropy,
        _draws,
        _value,
        _correction,
        _expert,
    ):
        found += check(a)
    return found + _params(a)


def _objective(a: Algorithm) -> list[str]:
    """The objective, the samples' source, pairing, sync_every, sft_coef."""
    found = []
    o = a.objective
    kind = OBJECTIVES[o.name].kind
    if o.pairing is not None and kind != "pairs":
        found.append(
            f"objective.pairing applies to pair objectives (dpo, ipo, rebel), not {o.name!r}"
        )
    if o.pairing is not None and o.pairing not in PAIRINGS:
        found.append(f"objective.pairing must be one of {PAIRINGS}, got {o.pairing!r}")
    pairs_by = pairing(a) if kind == "pairs" else None
    if pairs_by == "margin":
        if not o.margin > 0:
            found.append(f"objective.pairing: margin needs objective.margin > 0, got {o.margin}")
        if o.student_margin is not None and not o.student_margin > 0:
            found.append(f"objective.student_margin must be > 0, got {o.student_margin}")
        if o.student_margin is not None and a.expert.traces <= 0:
            found.append(
                "objective.student_margin relaxes the margin of the policy's own positives "
                "beside a gold response: it needs expert.traces > 0 (without one every "
                "positive is the policy's and objective.margin would never apply)"
            )
    elif o.margin != 0 or o.min_chosen is not None or o.student_margin is not None:
        by = f"pairs by {pairs_by!r}" if pairs_by else "is not a pair objective"
        found.append(
            "objective.margin, min_chosen and student_margin select the pairs of pairing: margin "
            f"(DNO's large-margin pairs); objective {o.name!r} {by}"
        )
    spec = OBJECTIVES[o.name]
    named = set(inspect.signature(spec.fn).parameters) if spec.fn is not None else set()
    if named & {"ref_logp", "tokens"} and not spec.needs_reference:
        found.append(
            f"objective {o.name!r} reads the reference's log-probs (ref_logp / tokens) but is "
            "not registered with needs_reference=True: the run would keep no reference"
        )
    if o.sync_every < 1:
        found.append(f"objective.sync_every must be >= 1, got {o.sync_every}")
    if o.sft_coef < 0:
        found.append(f"objective.sft_coef must be >= 0, got {o.sft_coef}")
    if o.sft_coef > 0 and not (
        (kind == "policy_gradient" and o.samples == "policy") or kind == "pairs"
    ):
        found.append(
            "objective.sft_coef adds an SFT term to a policy-gradient objective on sampled "
            "groups, or the chosen completion's NLL to a pair objective (RPO)"
        )
    if kind != "policy_gradient":
        if a.kl.beta > 0:
            found.append(
                f"kl.beta is the KL penalty of policy-gradient objectives; objective {o.name!r} "
                "sets its own strength in its params"
            )
        if a.kl.placement != "loss":
            found.append(
                f"kl.placement places the KL penalty of policy-gradient objectives; objective "
                f"{o.name!r} has none"
            )
        if a.entropy.coef or a.entropy.top_rho is not None or a.entropy.band or a.value.coef:
            found.append(
                f"entropy.coef, entropy.top_rho, entropy.band and value heads apply to policy-gradient "
                f"objectives, not {o.name!r}"
            )
    if o.samples == "data":
        if a.select.active or a.stages or a.overlong.buffer_frac is not None:
            found.append(
                "objective.samples: data trains on the data's completions: group selectors, "
                "draw stages and the overlong penalty apply to sampled groups"
            )
        if o.sync_every != 1:
            found.append("objective.sync_every applies to sampled groups (samples: policy)")
        spec = OBJECTIVES.get(o.name)
        if spec is not None and spec.needs_sampler:
            found.append(
                f"objective {o.name!r} reads the log-probs its pairs were sampled with: it "
                f"trains on the policy's own samples (samples: policy), not the data's"
            )
        if o.name == "policy_gradient" and not POLICY_LOSSES[a.policy_loss.name].offline:
            offline = ", ".join(k for k, s in POLICY_LOSSES.items() if s.offline)
            found.append(
                "objective.samples: data needs an objective that learns from given completions "
                f"(imitation, dpo, ipo, rebel), or an offline policy loss ({offline}): "
                f"policy_loss {a.policy_loss.name!r} measures its ratio to a sampling policy"
            )
        if "student_logp" in ADVANTAGES[a.advantage.name].requires:
            found.append(f"advantage {a.advantage.name!r} scores the policy's own samples")
    return found


def _clipping(a: Algorithm) -> list[str]:
    found = []
    p = a.policy_loss
    loss, estimator = POLICY_LOSSES[p.name], ADVANTAGES[a.advantage.name]
    if p.clip_low < 0 or p.clip_high < 0:
        found.append(
            f"policy_loss.clip_low and clip_high must be >= 0, got {p.clip_low}, {p.clip_high}"
        )
    if loss.clip_space == "ratio" and p.clip_low > 1:
        found.append(
            f"policy_loss.clip_low = {p.clip_low} > 1 puts the ratio's lower bound 1 - clip_low "
            f"below 0 (policy_loss {p.name!r} clips the ratio; 1 means no lower bound)"
        )
    if p.dual_clip is not None:
        if p.dual_clip <= 1:
            found.append(f"policy_loss.dual_clip must be > 1, got {p.dual_clip}")
        if not loss.dual_clip:
            dual = ", ".join(k for k, s in POLICY_LOSSES.items() if s.dual_clip)
            found.append(
                f"policy_loss.dual_clip applies to the {dual} policy losses, not {p.name!r}"
            )
    if loss.sequence_level and estimator.token_level:
        found.append(
            f"policy_loss {p.name!r} uses a sequence-level ratio but advantage "
            f"{a.advantage.name!r} gives token-level advantages; use a per-sequence estimator "
            f"(grpo, dr_grpo, rloo, gpg, remax, reinforce) or policy_loss 'token'"
        )
    if loss.sequence_level and a.entropy.top_rho is not None:
        found.append(
            f"entropy.top_rho selects tokens, but policy_loss {p.name!r} is sequence-level"
        )
    return found


def _kl(a: Algorithm) -> list[str]:
    found = []
    kl, ref = a.kl, a.reference
    if kl.beta < 0:
        found.append(f"kl.beta must be >= 0, got {kl.beta}")
    if kl.placement == "reward" and kl.beta > 0 and not ADVANTAGES[a.advantage.name].uses_token_kl:
        users = ", ".join(k for k, e in ADVANTAGES.items() if e.uses_token_kl)
        found.append(
            f"kl.placement 'reward' but advantage {a.advantage.name!r} ignores token_kl: put the "
            f"KL in the loss (placement: loss) or use one of {users}"
        )
    if kl.placement == "reward" and kl.estimator == "k3+":
        found.append(
            "kl.estimator 'k3+' differs from k3 only in its gradient, which a reward does not "
            "carry: use k1 (unbiased) in the reward"
        )
    if ref.reset_every < 0:
        found.append(f"reference.reset_every must be >= 0, got {ref.reset_every}")
    if ref.reset_every > 0 and not needs_reference(a):
        found.append("reference.reset_every > 0 but kl.beta = 0: there is no reference to reset")
    if not 0 < ref.mix <= 1:
        found.append(f"reference.mix must be in (0, 1], got {ref.mix}")
    if ref.mix < 1 and ref.reset_every == 0:
        found.append(
            "reference.mix < 1 mixes the policy into the reference at each reset: set "
            "reference.reset_every (1: every step, as TR-DPO)"
        )
    return found


def _advantage(a: Algorithm) -> list[str]:
    found = []
    adv = a.advantage
    if adv.normalize == "batch" and adv.name in _SELF_NORMALISED:
        found.append(
            f"advantage.normalize 'batch' replaces group normalisation, but advantage "
            f"{adv.name!r} already divides by a std; for group mean and batch std use dr_grpo "
            f"with normalize: batch"
        )
    if adv.pos_weight < 0 or adv.neg_weight < 0 or adv.pos_weight == adv.neg_weight == 0:
        found.append(
            f"advantage.pos_weight and neg_weight must be >= 0 and not both 0, got "
            f"{adv.pos_weight}, {adv.neg_weight}"
        )
    return found


def _entropy(a: Algorithm) -> list[str]:
    found = []
    e = a.entropy
    if e.top_rho is not None and not 0 < e.top_rho <= 1:
        found.append(f"entropy.top_rho must be in (0, 1], got {e.top_rho}")
    if e.target is not None and e.coef:
        found.append(
            "entropy.target adapts the entropy bonus itself: remove entropy.coef (a fixed "
            "bonus) or entropy.target"
        )
    if (e.target is not None and e.target < 0) or e.coef_step <= 0 or e.coef_max < 0:
        found.append("entropy.target, coef_max must be >= 0 and coef_step > 0")
    if e.band < 0 or not 0 <= e.band_low < e.band_high <= 1:
        found.append(
            f"entropy.band must be >= 0 and 0 <= band_low < band_high <= 1; got {e.band}, "
            f"{e.band_low}, {e.band_high}"
        )
    return found


def _draws(a: Algorithm) -> list[str]:
    found = []
    s = a.select
    frac = a.overlong.buffer_frac
    if frac is not None and not 0 <= frac <= 1:
        found.append(f"overlong.buffer_frac must be in [0, 1], got {frac}")
    if s.max_draws < 1:
        found.append(f"select.max_draws must be >= 1, got {s.max_draws}")
    if s.max_draws > 1 and not s.active:
        found.append(
            "select.max_draws > 1 refills dropped groups, which needs a group selector "
            "(select.name: informative, DAPO's dynamic sampling, or another)"
        )
    if s.name == "informative" and "greedy_rewards" in ADVANTAGES[a.advantage.name].requires:
        found.append(
            f"select.name 'informative' drops groups whose sampled rewards are all equal, but "
            f"{a.advantage.name!r} advantages r_i - r_greedy are nonzero there"
        )
    names = [stage.name for stage in a.stages]
    if len(set(names)) < len(names):
        found.append(f"stages: each stage is named once, got {names}")
    return found


def _expert(a: Algorithm) -> list[str]:
    """Expert traces join the policy's groups of a group-relative policy gradient (LUFFY) or
    of a pair objective on sampled groups (DNO's gold responses, paired by their reward)."""
    e = a.expert
    if e.traces < 0:
        return [f"expert.traces must be >= 0, got {e.traces}"]
    if e.traces == 0:
        return []
    found = []
    spec = OBJECTIVES[a.objective.name]
    kind = spec.kind
    if kind == "pairs" and a.objective.samples == "policy":
        if spec.needs_sampler:
            found.append(
                f"objective {a.objective.name!r} reads the log-probs its pairs were sampled "
                "with, and a worked solution was sampled by no policy: expert.traces cannot join"
            )
        return found
    if kind != "policy_gradient" or a.objective.samples != "policy":
        found.append(
            "expert.traces adds worked solutions to the groups of a policy-gradient or pair "
            f"objective on sampled groups, not to objective {a.objective.name!r} with samples "
            f"{a.objective.samples!r}"
        )
    elif not ADVANTAGES[a.advantage.name].group_relative:
        found.append(
            f"expert.traces joins each trace to its group's baseline, but advantage "
            f"{a.advantage.name!r} is not group-relative (use grpo, rloo, dr_grpo, ...)"
        )
    if a.objective.name != "policy_gradient":
        found.append(
            f"expert.traces trains on the traces with the policy loss; objective "
            f"{a.objective.name!r} reads other log-probs"
        )
    return found


def _value(a: Algorithm) -> list[str]:
    found = []
    v = a.value
    needs_values = "values" in ADVANTAGES[a.advantage.name].requires
    if needs_values and v.coef <= 0:
        found.append(f"advantage {a.advantage.name!r} needs a trained value head: value.coef > 0")
    if not needs_values and (v.coef != 0 or v.clip is not None):
        found.append(
            f"value.coef and value.clip train a value head, which advantage "
            f"{a.advantage.name!r} does not use (only gae does)"
        )
    if v.clip is not None and v.clip <= 0:
        found.append(f"value.clip must be > 0 or None, got {v.clip}")
    return found


def _correction(a: Algorithm) -> list[str]:
    found = []
    c = a.correction
    if c.tis_cap is not None and c.tis_cap <= 0:
        found.append(f"correction.tis_cap must be > 0, got {c.tis_cap}")
    if c.tis_level != "token" and c.tis_cap is None:
        found.append(
            f"correction.tis_level {c.tis_level!r} does nothing without tis_cap: set tis_cap "
            "(e.g. 2) or remove tis_level"
        )
    if c.mis_band is not None and not 0 <= c.mis_band[0] < c.mis_band[1]:
        found.append("correction.mis_band must be [low, high] with 0 <= low < high, e.g. [0.5, 5]")
    if c.mis_level != "token" and c.mis_band is None:
        found.append(
            f"correction.mis_level {c.mis_level!r} does nothing without mis_band: set mis_band "
            "[low, high] or remove mis_level"
        )
    if c.off_policy_mask is not None and c.off_policy_mask < 0:
        found.append(f"correction.off_policy_mask must be >= 0, got {c.off_policy_mask}")
    anchored = POLICY_LOSSES[a.policy_loss.name].sampler_anchored
    if anchored and (c.tis_cap is not None or c.mis_band is not None):
        found.append(
            f"policy_loss {a.policy_loss.name!r} measures its ratio and trust region against "
            "the sampler's log-probs, which already corrects for the sampler: remove "
            "correction.tis_cap / mis_band (they would weight by pi_old / pi_sampler a second "
            "time). A run whose config.yaml an older rlvr wrote with tis_cap: 2.0 (asynchronous "
            "DPPO) resumes with: rlvr train --resume RUN --set algorithm.correction.tis_cap=null"
        )
    cr = a.credit
    if not (0 <= cr.gamma <= 1) or cr.gigpo_weight < 0:
        found.append("credit.gamma must be in [0, 1] and credit.gigpo_weight >= 0")
    if a.ppo_epochs < 1 or a.minibatches < 1:
        found.append(
            f"ppo_epochs and minibatches must be >= 1, got {a.ppo_epochs}, {a.minibatches}"
        )
    return found


def _params(a: Algorithm) -> list[str]:
    """Keyword arguments of a part that its function does not take."""
    found = []
    for part, filled in ARGUMENTS_FILLED.items():
        values: Mapping[str, Any] = getattr(a, part).params
        if not values:
            continue
        fn = part_function(a, part)
        if fn is None:
            found.append(f"{part}: {getattr(a, part).name!r} takes no parameters")
            continue
        try:
            check_params(fn, values, part, filled)
        except ValueError as err:
            found.append(str(err))
    return found
