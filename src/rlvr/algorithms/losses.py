"""Per-token policy and value losses, and their aggregation into a scalar.

Notation: completion i of the batch, token t, mask m_{i,t} (1 on completion tokens the loss
sees), advantage A_i (or A_{i,t}), rho_{i,t} = pi(y_t) / pi_old(y_t) = exp(logp - old_logp),
sg[.] the stop-gradient.

Every policy loss kind maps (logp, old_logp, advantages, mask) to a [B, T] loss matrix and a
dict of detached [B, T] tensors for metrics (:func:`policy_metrics`); one entry point,
:func:`policy_loss`, dispatches on the kind registered in :data:`POLICY_LOSSES`. Sequence-level
kinds compute their sequence quantities within each row, so splitting a batch by rows into
micro-batches does not change them.

Aggregation is micro-batch invariant: when the trainer splits a batch into micro-batches for
gradient accumulation, it passes the full batch's normalisers (``total_tokens`` = sum of the
full mask, ``total_seqs`` = number of sequences of the full batch) to :func:`aggregate`, which
then returns the micro-batch's share of the full-batch value; summing (and back-propagating)
the shares gives exactly the full-batch loss and gradient.

Masked-out positions must hold finite values: they are zeroed by multiplication with the mask.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.algorithms.kl import kl_k3
from rlvr.registry import Registry


def _per_token(advantages: torch.Tensor) -> torch.Tensor:
    """[B] advantages as a [B, 1] column (broadcasts over tokens); [B, T] unchanged."""
    return advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages


def _clipped_surrogate(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    clip_low: float | torch.Tensor,
    clip_high: float | torch.Tensor,
    dual_clip: float | None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high)), dual-clipped for A < 0.

    Args:
        ratio: [B, T] importance ratio (with grad).
        adv: [B, 1] or [B, T] advantages.
    Returns:
        loss [B, T] and the detached clip flags ``is_clipped_low``, ``is_clipped_high``,
        ``is_dual_clipped`` [B, T].
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)  # L = max(-A rho, -A clip(rho))
    is_dual_clipped = torch.zeros_like(loss, dtype=torch.bool)
    if dual_clip is not None:
        bound = -adv * dual_clip
        is_dual_clipped = (adv < 0) & (loss > bound)
        loss = torch.where(adv < 0, torch.minimum(loss, bound), loss)  # L = min(L, -A c), A < 0
    r = ratio.detach()
    flags = {
        "is_clipped_low": (adv < 0) & (r < 1.0 - clip_low),
        "is_clipped_high": (adv > 0) & (r > 1.0 + clip_high),
        "is_dual_clipped": is_dual_clipped,
    }
    return loss, flags


def _approx_kl(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """[B, T] detached k3 estimate of KL(pi_old || pi) (the samples come from pi_old)."""
    return kl_k3(old_logp.detach(), logp.detach())


def loss_info(
    ratio: torch.Tensor,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    clipped_low: torch.Tensor | None = None,
    clipped_high: torch.Tensor | None = None,
    dual_clipped: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """The detached [B, T] metrics every policy loss returns (:func:`policy_metrics`): the
    ratio, the clip flags (None: never) and the k3 estimate of KL(pi_old || pi)."""
    never = torch.zeros_like(ratio, dtype=torch.bool)
    return {
        "ratio": ratio.detach(),
        "is_clipped_low": never if clipped_low is None else clipped_low,
        "is_clipped_high": never if clipped_high is None else clipped_high,
        "is_dual_clipped": never if dual_clipped is None else dual_clipped,
        "approx_kl": _approx_kl(logp, old_logp),
    }


def clipped_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float | torch.Tensor = 0.2,
    clip_high: float | torch.Tensor = 0.2,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate (Schulman et al. 2017, eq. 7) as a per-token loss, as in GRPO.

    L = max(-A * rho, -A * clip(rho, 1 - clip_low, 1 + clip_high)). ``clip_high > clip_low``
    is DAPO's clip-higher (Yu et al. 2025; 0.2 / 0.28). With ``dual_clip = c > 1`` the loss
    of tokens with A < 0 is also bounded above: L = min(L, -A * c) (dual-clip PPO, Ye et al.
    2020), so a huge rho on a bad token cannot blow up the update.

    Args:
        logp: [B, T] log pi of the sampled tokens (requires grad).
        old_logp: [B, T] log pi_old of the same tokens (the sampling policy; no grad).
        advantages: [B] per-sequence or [B, T] per-token advantages.
        clip_low: eps_low, the ratio is clipped below at 1 - clip_low (a float, or [B, T]
            per-token bounds: HAPO's adaptive clipping).
        clip_high: eps_high, the ratio is clipped above at 1 + clip_high (likewise).
        dual_clip: the bound c (> 1) for negative advantages, or None.
    Returns:
        loss [B, T] (unmasked), and detached [B, T] tensors for metrics: ``ratio`` (rho),
        ``is_clipped_low`` (A < 0 and rho < 1 - clip_low: clip active, no gradient),
        ``is_clipped_high`` (A > 0 and rho > 1 + clip_high), ``is_dual_clipped`` (A < 0 and
        -A * rho above -A * c), ``approx_kl`` (k3 estimate of KL(pi_old || pi)).
    """
    ratio = torch.exp(logp - old_logp)  # rho = pi / pi_old
    loss, flags = _clipped_surrogate(ratio, _per_token(advantages), clip_low, clip_high, dual_clip)
    return loss, {"ratio": ratio.detach(), **flags, "approx_kl": _approx_kl(logp, old_logp)}


def gspo_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO sequence-ratio loss, token form (Zheng et al. 2025, "Group Sequence Policy
    Optimization", arXiv:2507.18071; GSPO and its GSPO-token variant).

    s_i = exp((1 / |y_i|) sum_t m_t log rho_{i,t}) (length-normalised sequence ratio);
    s_{i,t} = sg[s_i] * pi(y_t) / sg[pi(y_t)], whose value is s_i and whose gradient is
    s_i * grad log pi(y_t); then the PPO clip of :func:`clipped_policy_loss` with s_{i,t} in
    place of rho (clip ranges in the paper: 3e-4 / 4e-4). With per-sequence A and
    seq-mean-token-mean aggregation this is GSPO's objective and gradient exactly; per-token
    A is GSPO-token. On one-token completions it equals token-level clipping.

    Args:
        logp: [B, T] log pi (requires grad).
        old_logp: [B, T] log pi_old (no grad).
        advantages: [B] or [B, T].
        mask: [B, T] completion mask: the tokens the sequence ratio averages over.
        clip_low, clip_high, dual_clip: as in :func:`clipped_policy_loss`, on s_{i,t}.
    Returns:
        loss [B, T], and the metrics of :func:`clipped_policy_loss` with ``ratio`` = s_i.
    """
    m = mask.to(logp.dtype)
    log_ratio = (logp - old_logp) * m
    log_seq = log_ratio.sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp_min(1)
    # log s_{i,t} = sg[log s_i] + log pi - sg[log pi]
    seq_ratio = torch.exp(log_seq.detach() + logp - logp.detach())  # s_{i,t}
    loss, flags = _clipped_surrogate(
        seq_ratio, _per_token(advantages), clip_low, clip_high, dual_clip
    )
    return loss, {"ratio": seq_ratio.detach(), **flags, "approx_kl": _approx_kl(logp, old_logp)}


def gmpo_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.4,
    clip_high: float = 0.4,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GMPO geometric-mean loss (Zhao et al. 2025, "Geometric-Mean Policy Optimization",
    arXiv:2507.20673; its log-space form with clip range (-0.4, 0.4)).

    J_i = exp((1 / |y_i|) sum_t sgn(A_i) * min(sgn(A_i) log rho_t, sgn(A_i) clip(log rho_t,
    -clip_low, clip_high))) * A_i: the geometric mean of the token ratios, each clipped in log
    space on the pessimistic side. This is a sequence-level objective: the loss matrix holds
    L_i = -J_i on every token of row i. Aggregated with seq-mean-token-mean it is the paper's
    (1/G) sum_i L_i; with token-mean each sequence is weighted by its length. At rho = 1 its
    gradient is -A_i / |y_i| * grad log pi(y_t) per token, so under every aggregation GMPO's
    on-policy gradient equals the token-level one.

    Args:
        logp: [B, T] log pi (requires grad).
        old_logp: [B, T] log pi_old (no grad).
        advantages: [B] per-sequence advantages (sgn(A) is a sequence property).
        mask: [B, T] completion mask.
        clip_low, clip_high: the log-ratio clip range (-clip_low, clip_high).
    Returns:
        loss [B, T] (the sequence value on every token), and metrics: ``ratio`` (token rho),
        ``is_clipped_low`` (A < 0, log rho < -clip_low), ``is_clipped_high`` (A > 0,
        log rho > clip_high), ``is_dual_clipped`` (all False), ``approx_kl``.
    """
    if advantages.dim() != 1:
        raise ValueError(
            f"the geometric loss needs per-sequence advantages [B], got {tuple(advantages.shape)}"
        )
    sign = torch.sign(advantages).unsqueeze(-1)  # sgn(A_i), [B, 1]
    log_ratio = logp - old_logp
    clipped = log_ratio.clamp(-clip_low, clip_high)
    # sgn(A) * min(sgn(A) log rho, sgn(A) clip(log rho))
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clipped)
    m = mask.to(logp.dtype)
    mean_log = (pessimistic * m).sum(-1) / m.sum(-1).clamp_min(1)  # (1/|y|) sum_t
    objective = torch.exp(mean_log) * advantages  # J_i = exp(mean_log) * A_i
    loss = (-objective).unsqueeze(-1).expand_as(logp)
    adv = advantages.unsqueeze(-1)
    lr = log_ratio.detach()
    info = {
        "ratio": lr.exp(),
        "is_clipped_low": (adv < 0) & (lr < -clip_low),
        "is_clipped_high": (adv > 0) & (lr > clip_high),
        "is_dual_clipped": torch.zeros_like(lr, dtype=torch.bool),
        "approx_kl": _approx_kl(logp, old_logp),
    }
    return loss, info


def cispo_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 1.0,
    clip_high: float = 0.28,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO (MiniMax 2025, "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning
    Attention", arXiv:2506.13585, eq. 4-5).

    L = -sg[clip(rho, 1 - clip_low, 1 + clip_high)] * A * log pi: the importance weight is
    clipped and detached instead of the update being dropped, so every token keeps a gradient
    (A * w * grad log pi with w <= 1 + clip_high). The paper sets no lower bound (a large
    eps_low; clip_low = 1 clips below at 0) and tunes eps_high.

    Args:
        logp: [B, T] log pi (requires grad).
        old_logp: [B, T] log pi_old (no grad).
        advantages: [B] or [B, T].
        clip_low, clip_high: the weight is clipped to [1 - clip_low, 1 + clip_high].
    Returns:
        loss [B, T], and metrics: ``ratio`` (rho), ``is_clipped_low`` / ``is_clipped_high``
        (the weight was clipped below / above, whatever the sign of A), ``is_dual_clipped``
        (all False), ``approx_kl``.
    """
    ratio = torch.exp(logp - old_logp).detach()
    weight = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # sg[clip(rho)]
    loss = -weight * _per_token(advantages) * logp  # L = -sg[clip(rho)] A log pi
    return loss, loss_info(ratio, logp, old_logp, ratio < 1.0 - clip_low, ratio > 1.0 + clip_high)


def reinforce_policy_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Vanilla policy gradient, no ratio and no clip: L = -A * log pi (REINFORCE, Williams
    1992; GPG, Chu et al. 2025; ReMax, Li et al. 2023). Meant for one on-policy update
    per batch: off-policy it is biased (no importance weight).

    Args:
        logp: [B, T] log pi (requires grad).
        old_logp: [B, T] log pi_old, used only for the metrics.
        advantages: [B] or [B, T].
    Returns:
        loss [B, T], and metrics: ``ratio`` (rho, for monitoring), clip flags all False,
        ``approx_kl``.
    """
    loss = -_per_token(advantages) * logp  # L = -A log pi
    return loss, loss_info(torch.exp(logp - old_logp), logp, old_logp)


LossOutput = tuple[torch.Tensor, dict[str, torch.Tensor]]
PolicyLossFn = Callable[..., LossOutput]


STANDARD_ARGUMENTS = frozenset(
    {"mask", "clip_low", "clip_high", "dual_clip", "seed", "proxy_logp", "entropy", "ref_logp"}
)
"""What :func:`policy_loss` hands a loss function whose signature names it."""


def _standard_arguments(fn: PolicyLossFn) -> frozenset[str] | None:
    """The standard arguments after (logp, old_logp, advantages) that ``fn`` takes: ``mask``,
    ``clip_low``, ``clip_high``, ``dual_clip``, ``seed``, ``proxy_logp``, ``entropy``,
    ``ref_logp`` (None: all, it takes ``**kwargs``)."""
    parameters = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return None
    return frozenset(parameters) & STANDARD_ARGUMENTS


@dataclass(frozen=True)
class PolicyLoss:
    """A registered policy loss kind.

    Attributes:
        name: key in :data:`POLICY_LOSSES`.
        fn: ``fn(logp, old_logp, advantages, mask, *, clip_low, clip_high, dual_clip, seed)
            -> (loss [B, T], info)``.
        sequence_level: the ratio is a sequence quantity (needs per-sequence advantages to be
            the paper's method).
        dual_clip: accepts a dual-clip bound.
        clip_space: "ratio" (clip_low, clip_high bound the ratio: 1 - clip_low >= 0), "log"
            (they bound log rho), "probability" / "divergence" (they bound pi - pi_old / a
            divergence: DPPO), or None (no clipping). A config that switches a preset to a loss
            of another clip space without setting clip_low / clip_high gets the loss's own
            defaults (:func:`rlvr.algorithms.resolve`).
        summary: one line.
        batch_statistics: the loss reads statistics over all the tokens it is given (the
            micro-batch), as Clip-Cov / KL-Cov's covariance: its value depends on
            ``train.micro_batch_size``, so it is exempt from micro-batch invariance.
        paper: the method's paper (shown by ``rlvr algorithms``), or "".
        sampler_anchored: the loss measures its ratio and trust region against the sampler's
            (rollout engine's) log-probs, not pi_old: the learner passes those as ``old_logp``
            (DPPO, whose paper anchors the trust region to the behaviour policy). Its ratio is
            then the whole sampler correction, so TIS / MIS (``algorithm.correction.tis_cap``,
            ``mis_band``, which weight by pi_old / pi_sampler) are refused with it.
        min_p_proxy: the loss reads ``proxy_logp`` [B, T], log pi_proxy of the sampled tokens
            under pi_old filtered by min-p at the loss's ``kappa`` and renormalised (Lp-Reg):
            the learner computes it in a no-grad pass before the update
            (:func:`rlvr.policy.min_p_logprobs`).
        needs_reference: the loss reads ``ref_logp`` [B, T], the reference policy's log-probs
            of the tokens: a run with it keeps a reference (A-LoL's importance weight).
        offline: the loss is an offline policy gradient that may train on the data's own
            completions (``objective.samples: data``), which no policy sampled: it measures
            no ratio to pi_old or the sampler (A-LoL).
    """

    name: str
    fn: PolicyLossFn
    sequence_level: bool
    dual_clip: bool
    clip_space: str | None
    summary: str
    batch_statistics: bool = False
    paper: str = ""
    sampler_anchored: bool = False
    min_p_proxy: bool = False
    needs_reference: bool = False
    offline: bool = False


POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss")


def register_policy_loss(
    name: str,
    *,
    sequence_level: bool = False,
    dual_clip: bool = False,
    clip_space: str | None = "ratio",
    summary: str = "",
    batch_statistics: bool = False,
    paper: str = "",
    sampler_anchored: bool = False,
    min_p_proxy: bool = False,
    needs_reference: bool = False,
    offline: bool = False,
) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: add ``fn(logp, old_logp, advantages, [mask, clip_low, clip_high,
    dual_clip, seed, proxy_logp, entropy, ref_logp,] **params) -> (loss [B, T], info)`` to
    :data:`POLICY_LOSSES` (the flags: :class:`PolicyLoss`). :func:`policy_loss` passes ``fn``
    those of ``mask``, ``clip_low``, ``clip_high``, ``dual_clip``, ``seed``, ``proxy_logp``,
    ``entropy`` and ``ref_logp`` its signature names (as keywords), so a plain loss
    function registers as it is; the ``algorithm.policy_loss`` section's other keys fill its
    other arguments."""

    def decorator(fn: PolicyLossFn) -> PolicyLossFn:
        takes = _standard_arguments(fn)
        if takes is not None and "ref_logp" in takes and not needs_reference:
            raise ValueError(
                f"policy loss {name!r} reads ref_logp: register it with needs_reference=True, "
                "so that a run with it keeps a reference"
            )
        POLICY_LOSSES.add(
            name,
            PolicyLoss(
                name,
                fn,
                sequence_level,
                dual_clip,
                clip_space,
                summary,
                batch_statistics,
                paper,
                sampler_anchored,
                min_p_proxy,
                needs_reference,
                offline,
            ),
        )
        return fn

    return decorator


register_policy_loss(
    "token",
    paper='Schulman et al. 2017, "Proximal Policy Optimization Algorithms", arXiv:1707.06347',
    dual_clip=True,
    summary="PPO / GRPO clip on the token ratio",
)(clipped_policy_loss)
register_policy_loss(
    "sequence",
    paper='Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv:2507.18071',
    sequence_level=True,
    dual_clip=True,
    summary="GSPO: clip on the sequence ratio",
)(gspo_policy_loss)
register_policy_loss(
    "geometric",
    paper='Zhao et al. 2025, "Geometric-Mean Policy Optimization", arXiv:2507.20673',
    sequence_level=True,
    clip_space="log",
    summary="GMPO: geometric mean of log-space-clipped token ratios",
)(gmpo_policy_loss)
register_policy_loss(
    "cispo",
    paper='MiniMax 2025, "MiniMax-M1", arXiv:2506.13585',
    summary="CISPO: clipped, detached IS weight times log pi",
)(cispo_policy_loss)
register_policy_loss(
    "none",
    paper='Williams 1992, "Simple Statistical Gradient-Following Algorithms"',
    clip_space=None,
    summary="REINFORCE / GPG: -A log pi, no ratio",
)(reinforce_policy_loss)


def policy_loss(
    kind: str,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    seed: int = 0,
    proxy_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    **params: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token policy loss of the kind registered as ``kind``.

    Kinds: "token" (:func:`clipped_policy_loss`), "sequence" (:func:`gspo_policy_loss`),
    "geometric" (:func:`gmpo_policy_loss`), "cispo" (:func:`cispo_policy_loss`), "none"
    (:func:`reinforce_policy_loss`).

    Args:
        kind: a key of :data:`POLICY_LOSSES`.
        logp: [B, T] log pi of the sampled tokens (requires grad).
        old_logp: [B, T] log pi_old of the same tokens (no grad); ``logp.detach()`` on the
            first minibatch of an on-policy step; the sampler's log-probs for a
            ``sampler_anchored`` kind (DPPO).
        advantages: [B] per-sequence or [B, T] per-token advantages ("geometric": [B] only).
        mask: [B, T] completion mask (sequence-level kinds average over it).
        clip_low, clip_high: eps_low, eps_high (ratio space; log space for "geometric";
            delta_low, delta_high for "dppo_tv" / "dppo_kl"; unused by "none").
        dual_clip: the dual-clip bound c > 1 ("token" and "sequence" only), or None.
        seed: the key of this call's random stream, for the kinds that draw (Clip-Cov's pick);
            the learner passes a new one per minibatch and micro-batch.
        proxy_logp: [B, T] pi_old's min-p proxy log-probs, for a ``min_p_proxy`` kind (Lp-Reg).
        entropy: [B, T] the current policy's token entropy (no gradient), for a kind whose
            function names it (HAPO's entropy-adaptive clip and advantage).
        ref_logp: [B, T] the reference policy's log-probs of the tokens (no gradient), for a
            ``needs_reference`` kind (A-LoL's importance weight).
        params: the loss's own keyword arguments (the ``algorithm.policy_loss`` section's other keys).
    Returns:
        loss [B, T] (unmasked: reduce with :func:`aggregate`) and detached [B, T] metrics
        ``ratio``, ``is_clipped_low``, ``is_clipped_high``, ``is_dual_clipped``,
        ``approx_kl`` (summarise with :func:`policy_metrics`).
    """
    spec = POLICY_LOSSES.get_or_raise(kind)
    if dual_clip is not None and not spec.dual_clip:
        dual = ", ".join(k for k, s in POLICY_LOSSES.items() if s.dual_clip)
        raise ValueError(f"dual_clip applies to the {dual} policy losses, not {kind!r}")
    if not logp.shape == old_logp.shape == mask.shape or logp.dim() != 2:
        raise ValueError(
            f"logp, old_logp and mask must all be [B, T], got {tuple(logp.shape)}, "
            f"{tuple(old_logp.shape)} and {tuple(mask.shape)}"
        )
    standard = {
        "mask": mask,
        "clip_low": clip_low,
        "clip_high": clip_high,
        "dual_clip": dual_clip,
        "seed": seed,
        "proxy_logp": proxy_logp,
        "entropy": entropy,
        "ref_logp": ref_logp,
    }
    if spec.needs_reference and ref_logp is None:
        raise ValueError(f"policy loss {kind!r} needs ref_logp, the reference's log-probs")
    if spec.min_p_proxy and proxy_logp is None:
        raise ValueError(f"policy loss {kind!r} needs proxy_logp, pi_old's min-p proxy log-probs")
    takes = _standard_arguments(spec.fn)
    if takes is not None and "entropy" in takes and entropy is None:
        raise ValueError(f"policy loss {kind!r} needs entropy, the policy's token entropy")
    given = standard if takes is None else {k: v for k, v in standard.items() if k in takes}
    return spec.fn(logp, old_logp, advantages, **given, **params)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float | None = 0.2,
) -> torch.Tensor:
    """Clipped value loss of PPO2 (OpenAI baselines, Dhariwal et al. 2017; studied in Engstrom
    et al. 2020, "Implementation Matters in Deep Policy Gradients").

    L = 0.5 * max((V - G)^2, (V_old + clip(V - V_old, -c, c) - G)^2); with ``clip`` None,
    L = 0.5 * (V - G)^2. Aggregate like the policy loss and add vf_coef times it.

    Args:
        values: [B, T] value-head outputs (requires grad).
        old_values: [B, T] values at rollout time (no grad).
        returns: [B, T] targets G (the ``returns`` of :func:`~rlvr.algorithms.advantages.gae`).
        mask: [B, T] completion mask.
        clip: the clip range c (> 0) around the old values, or None.
    Returns:
        [B, T] loss, 0 on masked-out positions.
    """
    if clip is not None and clip <= 0:
        raise ValueError(f"value clip must be > 0 or None, got {clip}")
    loss = (values - returns) ** 2
    if clip is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)  # V_old + clip(V - V_old)
        loss = torch.maximum(loss, (clipped - returns) ** 2)
    return torch.where(mask > 0, 0.5 * loss, 0.0)  # 0.5 * max((V - G)^2, (V_clip - G)^2)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum(x * m) / sum(m), over all elements or along ``dim``; 0 where the mask is all zero.

    Args:
        x: [...] values.
        mask: [...] same shape, bool or float weights.
    Returns:
        [] (``dim`` None) or x reduced along ``dim``.
    """
    m = mask.to(x.dtype)
    total = (x * m).sum() if dim is None else (x * m).sum(dim)
    count = m.sum() if dim is None else m.sum(dim)
    return total / torch.where(count > 0, count, torch.ones_like(count))


def _share(total: torch.Tensor, normaliser: torch.Tensor | float) -> torch.Tensor:
    """total / normaliser, with 0 / 0 = 0 (a batch without any token or sequence)."""
    den = torch.as_tensor(normaliser, dtype=total.dtype, device=total.device)
    return total / torch.where(den > 0, den, torch.ones_like(den))


AggregationFn = Callable[..., torch.Tensor]

AGGREGATIONS: Registry[AggregationFn] = Registry("aggregation")


def register_aggregation(name: str) -> Callable[[AggregationFn], AggregationFn]:
    """Decorator: add ``fn(loss, mask, *, total_tokens, total_seqs, max_len) -> []``.

    Every aggregation receives all three normalisers and uses those its formula needs.
    """

    def decorator(fn: AggregationFn) -> AggregationFn:
        return AGGREGATIONS.add(name, fn)

    return decorator


@register_aggregation("token-mean")
def token_mean(
    loss: torch.Tensor,
    mask: torch.Tensor,
    *,
    total_tokens: float | None,
    total_seqs: float | None,
    max_len: int | None,
) -> torch.Tensor:
    """DAPO (Yu et al. 2025): sum_{i,t} L m / sum_{i,t} m; every token weighs the same.

    With ``total_tokens`` the denominator is that (full-batch) token count.
    """
    m = mask.to(loss.dtype)
    return _share((loss * m).sum(), m.sum() if total_tokens is None else total_tokens)


@register_aggregation("seq-mean-token-mean")
def seq_mean_token_mean(
    loss: torch.Tensor,
    mask: torch.Tensor,
    *,
    total_tokens: float | None,
    total_seqs: float | None,
    max_len: int | None,
) -> torch.Tensor:
    """GRPO (Shao et al. 2024, eq. 3): (1/B) sum_i (sum_t L m / sum_t m).

    Every sequence weighs the same, so a token of a long completion weighs less. With
    ``total_seqs`` the outer denominator is that (full-batch) sequence count.
    """
    per_seq = masked_mean(loss, mask, dim=-1)  # sum_t L m / sum_t m, 0 for an empty row
    return _share(per_seq.sum(), loss.shape[0] if total_seqs is None else total_seqs)


@register_aggregation("seq-mean-token-sum")
def seq_mean_token_sum(
    loss: torch.Tensor,
    mask: torch.Tensor,
    *,
    total_tokens: float | None,
    total_seqs: float | None,
    max_len: int | None,
) -> torch.Tensor:
    """(1/B) sum_i sum_t L m: a sequence weighs in proportion to its length."""
    m = mask.to(loss.dtype)
    return _share((loss * m).sum(), loss.shape[0] if total_seqs is None else total_seqs)


@register_aggregation("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(
    loss: torch.Tensor,
    mask: torch.Tensor,
    *,
    total_tokens: float | None,
    total_seqs: float | None,
    max_len: int | None,
) -> torch.Tensor:
    """Dr. GRPO (Liu et al. 2025): (1/B) sum_i sum_t L m / max_len.

    The constant ``max_len`` (the generation budget) replaces GRPO's per-sequence length
    normalisation, which biases towards long wrong answers. It is required, not inferred
    from T: micro-batches padded to different T would otherwise be scaled differently.
    """
    if max_len is None or max_len <= 0:
        raise ValueError(f"seq-mean-token-sum-norm needs a positive max_len, got {max_len}")
    m = mask.to(loss.dtype)
    total = (loss * m).sum() / max_len
    return _share(total, loss.shape[0] if total_seqs is None else total_seqs)


def aggregate(
    loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    total_tokens: float | None = None,
    total_seqs: float | None = None,
    max_len: int | None = None,
    **params: Any,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar with the aggregation registered as ``mode``.

    Args:
        loss: [B, T] per-token loss.
        mask: [B, T] bool or float, 1 on tokens the loss sees. A row of zeros contributes 0.
        mode: token-mean | seq-mean-token-mean | seq-mean-token-sum | seq-mean-token-sum-norm.
        total_tokens: full-batch sum of the mask, when ``loss`` is one micro-batch of it.
        total_seqs: full-batch number of sequences, when ``loss`` is one micro-batch of it.
        max_len: the constant of seq-mean-token-sum-norm (max response length).
        params: the aggregation's own keyword arguments (the ``algorithm.aggregation`` section's other keys).
    Returns:
        [] the loss (or, with the normalisers given, this micro-batch's share of it).
    """
    AGGREGATIONS.get_or_raise(mode)
    if loss.shape != mask.shape or loss.dim() != 2:
        raise ValueError(
            f"loss and mask must both be [B, T], got {tuple(loss.shape)} and {tuple(mask.shape)}"
        )
    return AGGREGATIONS[mode](
        loss, mask, total_tokens=total_tokens, total_seqs=total_seqs, max_len=max_len, **params
    )


POLICY_METRICS = (
    "clip_frac_low",
    "clip_frac_high",
    "dual_clip_frac",
    "ratio_mean",
    "ratio_min",
    "ratio_max",
    "approx_kl",
)


def policy_metrics(loss_info: dict[str, torch.Tensor], mask: torch.Tensor) -> dict[str, float]:
    """Masked summaries of :func:`clipped_policy_loss`'s ``loss_info``, for logging.

    Args:
        loss_info: the [B, T] tensors returned by :func:`clipped_policy_loss`.
        mask: [B, T] bool or float, 1 on tokens the loss sees.
    Returns:
        clip_frac_low, clip_frac_high, dual_clip_frac (fractions of masked tokens), ratio_mean,
        ratio_min, ratio_max (of rho), approx_kl (masked mean k3 estimate of
        KL(pi_old || pi)); and ``<name>_frac`` for each further ``is_<name>`` flag a loss
        returns (Clip-Cov's ``cov_detached_frac``). Every value is NaN when the mask selects
        no token.
    """
    selected = mask > 0
    if not bool(selected.any()):
        return dict.fromkeys(POLICY_METRICS, float("nan"))
    ratio = loss_info["ratio"]
    values = {
        "clip_frac_low": masked_mean(loss_info["is_clipped_low"].float(), mask),
        "clip_frac_high": masked_mean(loss_info["is_clipped_high"].float(), mask),
        "dual_clip_frac": masked_mean(loss_info["is_dual_clipped"].float(), mask),
        "ratio_mean": masked_mean(ratio, mask),
        "ratio_min": ratio[selected].min(),
        "ratio_max": ratio[selected].max(),
        "approx_kl": masked_mean(loss_info["approx_kl"], mask),
    }
    standard = ("is_clipped_low", "is_clipped_high", "is_dual_clipped")
    for key, flags in loss_info.items():
        if key.startswith("is_") and key not in standard:
            values[f"{key[3:]}_frac"] = masked_mean(flags.float(), mask)
    return {name: value.item() for name, value in values.items()}
