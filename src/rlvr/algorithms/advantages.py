"""Advantage estimators: from rewards to one advantage per completion or per token.

Notation: prompt x, group of G completions y_1..y_G sampled for x, reward r_i of y_i, tokens t
of y_i, mask m_{i,t} (1 on completion tokens the loss sees). Samples of a batch are tagged with
the id of their group (``group_ids``); ids are arbitrary integers, not necessarily contiguous
or sorted, and all estimators are vectorised over groups (``index_add``).

Two layers:

- simple functions on tensors, usable directly: :func:`grpo`, :func:`dr_grpo`, :func:`rloo`,
  :func:`reinforce`, :func:`gpg`, :func:`remax` (outcome rewards -> [N]); :func:`token_rewards`,
  :func:`reward_to_go`, :func:`gae` (per-token);
- the registry :data:`ADVANTAGES` of estimators with ONE calling convention,
  ``compute_advantages(name, AdvantageInputs(...), **hyperparams) -> AdvantageOutput``, each
  declaring which optional inputs it needs.

Options applied after any estimator: :func:`normalize_batch` (whitening over the batch instead
of the group) and :func:`weight_by_sign` (W-REINFORCE / NSR weights).

A group of one has no other sample to form a baseline from; every group-baseline estimator here
then returns the raw reward, A_i = r_i (baseline 0, scale 1): plain REINFORCE on that sample.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from rlvr.registry import Registry

# ---------------------------------------------------------------- group indexing


def _group_sums(
    rewards: torch.Tensor, group_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Index samples by group.

    Args:
        rewards: [N] rewards (any real dtype).
        group_ids: [N] integer group id of every sample.
    Returns:
        r [N] float rewards, inverse [N] long (group index in 0..K-1 of every sample, in
        ascending order of the ids, as ``torch.unique``), count [K] samples per group,
        total [K] reward sum per group (K distinct ids).
    """
    if rewards.dim() != 1 or rewards.shape != group_ids.shape:
        raise ValueError(
            f"rewards and group_ids must be 1-D of equal length, got shapes "
            f"{tuple(rewards.shape)} and {tuple(group_ids.shape)}"
        )
    r = rewards if rewards.is_floating_point() else rewards.float()
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    count = torch.zeros(num_groups, dtype=r.dtype, device=r.device)
    count.index_add_(0, inverse, torch.ones_like(r))
    total = torch.zeros(num_groups, dtype=r.dtype, device=r.device).index_add_(0, inverse, r)
    return r, inverse, count, total


def _group_std(
    r: torch.Tensor, inverse: torch.Tensor, count: torch.Tensor, total: torch.Tensor
) -> torch.Tensor:
    """[K] unbiased group std: sqrt(sum_g (r - mean_g r)^2 / (n_g - 1)); 0 for a group of one."""
    mean = total / count
    sq_dev = torch.zeros_like(total).index_add_(0, inverse, (r - mean[inverse]) ** 2)
    return (sq_dev / (count - 1).clamp_min(1)).sqrt()


def _group_varies(r: torch.Tensor, inverse: torch.Tensor, num_groups: int) -> torch.Tensor:
    """[K] bool: the group holds two different rewards (max != min; exact, no float mean)."""
    high = torch.full((num_groups,), float("-inf"), dtype=r.dtype, device=r.device)
    low = torch.full((num_groups,), float("inf"), dtype=r.dtype, device=r.device)
    high = high.scatter_reduce(0, inverse, r, reduce="amax")
    low = low.scatter_reduce(0, inverse, r, reduce="amin")
    return high != low


# ---------------------------------------------------------------- outcome estimators


def grpo(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO outcome advantage (DeepSeekMath, Shao et al. 2024, eq. in Sec. 4.1.2).

    A_i = (r_i - mean_g r) / (std_g r + eps), std unbiased (n - 1). A group whose rewards are
    all equal gets A = 0. A group of one gets A_i = r_i (mean 0, scale 1), since its unbiased
    std is undefined.

    Args:
        rewards: [N] rewards.
        group_ids: [N] long group id of every sample.
        eps: added to the std so a constant group does not divide by zero.
    Returns:
        [N] advantages.
    """
    r, inverse, count, total = _group_sums(rewards, group_ids)
    mean = total / count
    std = _group_std(r, inverse, count, total)
    normalised = (r - mean[inverse]) / (std[inverse] + eps)  # A_i = (r_i - mean) / (std + eps)
    return torch.where(count[inverse] > 1, normalised, r)


def dr_grpo(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO advantage (Liu et al. 2025, "Understanding R1-Zero-like training").

    A_i = r_i - mean_g r: GRPO without the division by the group std, which biases updates
    towards groups of near-constant reward. A group of one gets A_i = r_i (baseline 0).

    Args:
        rewards: [N] rewards.
        group_ids: [N] long group id of every sample.
    Returns:
        [N] advantages.
    """
    r, inverse, count, total = _group_sums(rewards, group_ids)
    centred = r - (total / count)[inverse]  # A_i = r_i - mean_g r
    return torch.where(count[inverse] > 1, centred, r)


def rloo(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """REINFORCE leave-one-out advantage (Ahmadian et al. 2024, "Back to Basics").

    A_i = r_i - mean_{j != i} r_j = r_i - (sum_g r - r_i) / (n_g - 1). A group of one has no
    other sample and gets A_i = r_i (baseline 0).

    Args:
        rewards: [N] rewards.
        group_ids: [N] long group id of every sample.
    Returns:
        [N] advantages.
    """
    r, inverse, count, total = _group_sums(rewards, group_ids)
    n = count[inverse]
    baseline = (total[inverse] - r) / (n - 1).clamp_min(1)  # mean_{j != i} r_j
    return torch.where(n > 1, r - baseline, r)


def reinforce(rewards: torch.Tensor, baseline: float = 0.0) -> torch.Tensor:
    """REINFORCE with a constant baseline (Williams 1992): A_i = r_i - b.

    With b = 0.5 and 0/1 verifier rewards, A = +0.5 on correct and -0.5 on wrong completions:
    the +1 / -1 signal of Zhu et al. 2025 ("The Surprising Effectiveness of Negative
    Reinforcement in LLM Reasoning", PSR / NSR / W-REINFORCE) up to a factor 1/2.

    Args:
        rewards: [N] rewards.
        baseline: the constant b.
    Returns:
        [N] advantages.
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    r = rewards if rewards.is_floating_point() else rewards.float()
    return r - baseline  # A_i = r_i - b


def gpg(rewards: torch.Tensor, group_ids: torch.Tensor, valid_scaling: bool = True) -> torch.Tensor:
    """GPG advantage (Chu et al. 2025, "GPG: A Simple and Strong Reinforcement Learning Baseline
    for Model Reasoning", arXiv:2504.02546).

    A_i = alpha * (r_i - mean_g r), with the valid-sample scaling alpha = N / N_valid, where N
    is the number of samples of the batch and N_valid the number of samples in valid groups:
    groups of two or more samples whose rewards are not all equal (nonzero variance). Invalid
    groups give A = 0 exactly (their centred rewards can be 1e-17 in floating point), so alpha
    rescales the gradient to what it would be over the valid samples alone. A group of one keeps
    A_i = r_i (the package convention), unscaled, and does not count as valid. alpha = 1 when
    no group is valid, or with ``valid_scaling=False`` (then A is Dr. GRPO's advantage).

    Args:
        rewards: [N] rewards.
        group_ids: [N] long group id of every sample.
        valid_scaling: apply alpha.
    Returns:
        [N] advantages.
    """
    r, inverse, count, total = _group_sums(rewards, group_ids)
    valid = _group_varies(r, inverse, count.numel())[inverse]  # [N]
    n_valid = int(valid.sum())
    alpha = r.numel() / n_valid if valid_scaling and n_valid > 0 else 1.0  # alpha = N / N_valid
    centred = alpha * (r - (total / count)[inverse])  # A_i = alpha * (r_i - mean_g r)
    return torch.where(valid, centred, torch.where(count[inverse] > 1, torch.zeros_like(r), r))


def remax(rewards: torch.Tensor, greedy_rewards: torch.Tensor) -> torch.Tensor:
    """ReMax advantage (Li et al. 2023, "ReMax: A Simple, Effective, and Efficient Reinforcement
    Learning Method for Aligning Large Language Models", arXiv:2310.10505, Alg. 1).

    A_i = r_i - r_greedy(x_i): the baseline is the reward of the greedy completion of the
    same prompt.

    Args:
        rewards: [N] rewards of the sampled completions.
        greedy_rewards: [N] reward of the greedy completion of each sample's prompt.
    Returns:
        [N] advantages.
    """
    if rewards.dim() != 1 or rewards.shape != greedy_rewards.shape:
        raise ValueError(
            f"rewards and greedy_rewards must be 1-D of equal length, got shapes "
            f"{tuple(rewards.shape)} and {tuple(greedy_rewards.shape)}"
        )
    r = rewards if rewards.is_floating_point() else rewards.float()
    return r - greedy_rewards.to(r.dtype)  # A_i = r_i - r_greedy


# ---------------------------------------------------------------- per-token estimators


def token_rewards(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    token_kl: torch.Tensor | None = None,
    beta: float = 0.0,
) -> torch.Tensor:
    """Per-token rewards of an outcome reward with the KL penalty in the reward.

    R_{i,t} = -beta * KL_{i,t} * m_{i,t} + r_i * [t = last unmasked token of i] (Ouyang et al.
    2022; REINFORCE++, Hu 2025). A row whose mask is all zero has no token to carry r_i: it
    gets R = 0 (it gives no gradient either way).

    Args:
        rewards: [N] outcome rewards.
        mask: [N, T] bool or float, 1 on completion tokens.
        token_kl: [N, T] per-token KL estimate to the reference (no grad), or None when
            beta = 0.
        beta: KL coefficient.
    Returns:
        [N, T] token rewards (0 on masked-out positions).
    """
    if mask.dim() != 2 or mask.shape[0] != rewards.shape[0]:
        raise ValueError(
            f"mask must be [N, T] with N = len(rewards), got {tuple(mask.shape)} and "
            f"{tuple(rewards.shape)}"
        )
    r = rewards if rewards.is_floating_point() else rewards.float()
    m = mask.to(r.dtype)
    if beta != 0.0:
        if token_kl is None:
            raise ValueError(f"token_rewards with beta = {beta} needs token_kl [N, T]")
        out = -beta * torch.where(m > 0, token_kl.to(r.dtype), 0.0)  # -beta * KL_t on tokens
    else:
        out = torch.zeros_like(m)
    width = m.shape[1]
    has_token = m.sum(-1) > 0
    last = width - 1 - (m > 0).flip(-1).to(torch.int64).argmax(-1)  # last unmasked index
    rows = torch.arange(m.shape[0], device=m.device)[has_token]
    out[rows, last[has_token]] += r[has_token]  # + r_i at the last token
    return out


def reward_to_go(token_rewards: torch.Tensor) -> torch.Tensor:
    """Undiscounted return G_t = sum_{s >= t} R_s (gamma = 1) of [N, T] token rewards."""
    return token_rewards.flip(-1).cumsum(-1).flip(-1)  # G_t = sum_{s >= t} R_s


def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016, arXiv:1506.02438).

    delta_t = R_t + gamma * V_{t'} - V_t and A_t = delta_t + gamma * lam * A_{t'}, where t' is
    the next unmasked token (masked positions are skipped, so prompt or tool tokens inside the
    completion do not break the recursion) and V = A = 0 after the last token. Returns
    G_t = A_t + V_t, the targets of the value loss. With gamma = lam = 1, A_t = sum_{s >= t} R_s
    - V_t.

    Args:
        token_rewards: [N, T] per-token rewards (:func:`token_rewards`).
        values: [N, T] value-head outputs V(s_t) on the completion tokens (no grad).
        mask: [N, T] bool or float, 1 on completion tokens.
        gamma: discount.
        lam: GAE lambda.
    Returns:
        advantages [N, T] and returns [N, T], both 0 on masked-out positions.
    """
    if not token_rewards.shape == values.shape == mask.shape or mask.dim() != 2:
        raise ValueError(
            f"token_rewards, values and mask must all be [N, T], got {tuple(token_rewards.shape)}, "
            f"{tuple(values.shape)} and {tuple(mask.shape)}"
        )
    m = mask.to(token_rewards.dtype)
    v = torch.where(m > 0, values.to(token_rewards.dtype), 0.0)
    next_value = torch.zeros_like(v[:, 0])
    next_adv = torch.zeros_like(v[:, 0])
    advantages = torch.zeros_like(v)
    for t in reversed(range(v.shape[1])):
        delta = token_rewards[:, t] + gamma * next_value - v[:, t]  # delta_t
        adv_t = delta + gamma * lam * next_adv  # A_t = delta_t + gamma lam A_{t'}
        advantages[:, t] = adv_t
        next_value = torch.where(m[:, t] > 0, v[:, t], next_value)
        next_adv = torch.where(m[:, t] > 0, adv_t, next_adv)
    advantages = advantages * m
    return advantages, (advantages + v) * m  # G_t = A_t + V_t


def reinforce_pp(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    token_kl: torch.Tensor | None = None,
    beta: float = 0.0,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ advantage (Hu 2025, "REINFORCE++: A Simple and Efficient Approach for
    Aligning Large Language Models", arXiv:2501.03262).

    R_{i,t} = -beta * KL_{i,t} + r_i [t = last token]; G_{i,t} = sum_{s >= t} R_{i,s}
    (gamma = 1); A = (G - mean) / (std + eps) with the masked mean and population std over all
    tokens of the batch (:func:`normalize_batch`), so A has zero masked mean.

    Args:
        rewards: [N] outcome rewards.
        mask: [N, T] completion mask.
        token_kl: [N, T] per-token KL to the reference (no grad); needed when beta > 0.
        beta: KL coefficient.
        eps: added to the std.
    Returns:
        advantages [N, T] and returns G [N, T], both 0 on masked-out positions.
    """
    returns = reward_to_go(token_rewards(rewards, mask, token_kl, beta)) * mask
    return normalize_batch(returns, mask, eps), returns


# ---------------------------------------------------------------- options after an estimator


def normalize_batch(
    advantages: torch.Tensor, mask: torch.Tensor | None = None, eps: float = 1e-6
) -> torch.Tensor:
    """Whiten advantages over the whole batch: A' = (A - mean) / (std + eps).

    Batch-level instead of group-level normalisation (REINFORCE++, Hu 2025; the "group mean,
    batch std" of Liu et al. 2025, "Tricks or Traps? A Deep Dive into RL for LLM Reasoning",
    when applied after a group-centred estimator). The std is the population std (divides by
    the count). A constant batch gives A' = 0.

    Args:
        advantages: [N] per-sequence (every sample weighs 1) or [N, T] per-token advantages.
        mask: [N, T] for per-token advantages: statistics over masked tokens only, and the
            output is 0 on masked-out positions. Must be None for [N] advantages.
        eps: added to the std.
    Returns:
        advantages of the input's shape.
    """
    if advantages.dim() == 1:
        if mask is not None:
            raise ValueError("normalize_batch: [N] advantages take no mask")
        mean = advantages.mean()
        std = (advantages - mean).pow(2).mean().sqrt()
        return (advantages - mean) / (std + eps)  # (A - mean_batch) / (std_batch + eps)
    if mask is None or mask.shape != advantages.shape:
        raise ValueError(
            f"normalize_batch: [N, T] advantages need a mask of the same shape, got "
            f"{None if mask is None else tuple(mask.shape)} for {tuple(advantages.shape)}"
        )
    m = mask.to(advantages.dtype)
    count = m.sum().clamp_min(1)
    mean = (advantages * m).sum() / count  # masked mean over all tokens of the batch
    std = ((advantages - mean).pow(2) * m).sum().div(count).sqrt()
    return torch.where(m > 0, (advantages - mean) / (std + eps), 0.0)


def weight_by_sign(
    advantages: torch.Tensor, pos_weight: float = 1.0, neg_weight: float = 1.0
) -> torch.Tensor:
    """Weight positive and negative advantages separately (Zhu et al. 2025, "The Surprising
    Effectiveness of Negative Reinforcement in LLM Reasoning", arXiv:2506.01347).

    A' = pos_weight * A where A > 0, neg_weight * A where A < 0. W-REINFORCE is pos_weight =
    lambda = 0.1, neg_weight = 1; NSR (negative samples only) is pos_weight = 0; PSR is
    neg_weight = 0.

    Args:
        advantages: [N] or [N, T].
    Returns:
        advantages of the same shape.
    """
    return torch.where(advantages > 0, pos_weight * advantages, neg_weight * advantages)


# ---------------------------------------------------------------- the uniform convention


INPUT_HINTS = {
    "mask": "the [N, T] completion mask (1 on tokens the loss sees)",
    "token_kl": "the [N, T] per-token KL to the reference, kl_penalty(kl_estimator, old_logp, "
    "ref_logp) without grad (KL in the reward)",
    "values": "the [N, T] outputs of a value head on the completion tokens",
    "greedy_rewards": "the rollout must add one greedy completion per prompt and give its "
    "reward to every sample of the prompt, [N]",
    "baselines": "each prompt's tracked baseline, [N]: give the run curriculum.name: spo (or a "
    "sampler with a baselines() method)",
    "reference_rewards": "the reward of the reference model's completion paired with each sample, "
    "[N]: the rollouts sample each prompt's group from the reference too (advantage aapo)",
    "reference_values": "V_ref(x), the reward of the reference model's greedy completion of each "
    "sample's prompt, [N]: the rollouts play each prompt greedily from the reference too "
    "(advantage alol)",
    "student_logp": "the [N, T] sampler's log-probs of the sampled tokens",
    "teacher_logp": "the [N, T] log-probs of a teacher model (model.teacher) of the sampled tokens",
    "token_entropy": "the [N, T] policy's entropy at each completion token (the trainer's no-grad "
    "pass before the update)",
    "reward_terms": "each reward term's values, [N, K]: give the run reward.terms",
    "term_weights": "each reward term's weight, [K] (reward.terms' weights)",
    "tree_segments": "the [N, T] segment of each completion token in its prompt's rollout trees "
    "(-1 on padding): give the run rollout.tree",
    "step_rewards": "the [N, T] reward of each reasoning step on its last token (NaN elsewhere): "
    "give the run a process reward, reward.terms: judge_steps or prm_steps",
}
"""The inputs rlvr computes itself, each with what it is and how a run gets it."""

REFERENCE_PLAYED = ("reference_rewards", "reference_values")
"""The inputs scored on completions the frozen reference policy plays (AAPO's paired samples,
A-LoL's greedy value): a run whose estimator requires one keeps a rollout engine over the
initial policy (:func:`plays_reference`)."""


def plays_reference(advantage: str) -> bool:
    """The estimator ``advantage`` reads rewards of the reference policy's own completions."""
    return any(name in REFERENCE_PLAYED for name in ADVANTAGES[advantage].requires)


INPUT_FIELDS = frozenset(INPUT_HINTS)
"""The names of :data:`INPUT_HINTS`; any other column an estimator requires is a produced
signal (:mod:`rlvr.trainer.signals`)."""

_PER_TOKEN = (
    "token_kl",
    "values",
    "student_logp",
    "teacher_logp",
    "token_entropy",
    "tree_segments",
    "step_rewards",
)
_PER_SAMPLE = ("greedy_rewards", "baselines", "reference_rewards", "reference_values")


class AdvantageInputs:
    """A read-only view of a batch's columns, what an advantage estimator reads.

    ``rewards`` [N] (outcome rewards, shaping included) and ``group_ids`` [N] (the prompt of
    each completion) always; any other column by name: the inputs rlvr computes
    (:data:`INPUT_HINTS`: the completion ``mask`` [N, T], ``token_kl`` [N, T], ``values`` [N, T],
    ``greedy_rewards`` [N], ``baselines`` [N], ``reference_rewards`` [N], ``student_logp`` /
    ``teacher_logp`` / ``token_entropy`` [N, T], ``reward_terms`` [N, K], ``term_weights``
    [K]) and the signals produced on demand (a plug-in's, :func:`rlvr.trainer.signals.
    register_signal`). An estimator reads a column as an attribute (``inputs.token_kl``) or by
    name (``inputs["prompt_chars"]``); an input rlvr computes that the batch lacks reads None.

    :func:`compute_advantages` hands an estimator the :meth:`view` of the columns it declares
    (``requires``, the mask, and ``token_kl`` when it ``uses_token_kl``): reading any other
    column of the batch raises, naming it.
    """

    def __init__(
        self,
        rewards: torch.Tensor,
        group_ids: torch.Tensor,
        mask: torch.Tensor | None = None,
        **columns: torch.Tensor | None,
    ) -> None:
        self.rewards, self.group_ids = rewards, group_ids
        given = {"mask": mask, **columns}
        self._columns: dict[str, torch.Tensor] = {k: v for k, v in given.items() if v is not None}
        self._hidden: frozenset[str] = frozenset()
        self._check()

    def _check(self) -> None:
        n = self.rewards.shape[0] if self.rewards.dim() == 1 else -1
        if n < 0 or self.group_ids.shape != (n,):
            raise ValueError(
                f"AdvantageInputs: rewards and group_ids must be 1-D of equal length, got "
                f"{tuple(self.rewards.shape)} and {tuple(self.group_ids.shape)}"
            )
        mask = self._columns.get("mask")
        if mask is not None and (mask.dim() != 2 or mask.shape[0] != n):
            raise ValueError(f"AdvantageInputs.mask must be [{n}, T], got {tuple(mask.shape)}")
        for name in _PER_TOKEN:
            tensor = self._columns.get(name)
            if tensor is not None and (mask is None or tensor.shape != mask.shape):
                expected = "[N, T] like mask" if mask is None else tuple(mask.shape)
                raise ValueError(
                    f"AdvantageInputs.{name} must have the mask's shape {expected}, got "
                    f"{tuple(tensor.shape)}" + (" and no mask was given" if mask is None else "")
                )
        for name, tensor in self._columns.items():
            if name in _PER_SAMPLE or name not in INPUT_FIELDS:  # produced signals are [N]
                if tensor.shape[:1] != (n,):
                    raise ValueError(
                        f"AdvantageInputs.{name} must be [{n}], got {tuple(tensor.shape)}"
                    )
        terms, weights = self._columns.get("reward_terms"), self._columns.get("term_weights")
        if terms is not None and (terms.dim() != 2 or terms.shape[0] != n):
            raise ValueError(f"AdvantageInputs.reward_terms must be [{n}, K], got {terms.shape}")
        if terms is not None and (weights is None or weights.shape != (terms.shape[1],)):
            raise ValueError("AdvantageInputs.term_weights must be [K], one weight per term")

    @property
    def signals(self) -> dict[str, torch.Tensor]:
        """The produced signals of this view by name (its columns rlvr does not compute
        itself); ``inputs.signals[name]`` is ``inputs[name]``."""
        return {k: v for k, v in self._columns.items() if k not in INPUT_FIELDS}

    @property
    def columns(self) -> tuple[str, ...]:
        """The names of the columns this view holds (rewards and group ids aside)."""
        return tuple(self._columns)

    def get(self, name: str) -> torch.Tensor | None:
        """The column ``name``, or None when the view does not hold it."""
        return self._columns.get(name)

    def view(self, names: Iterable[str]) -> AdvantageInputs:
        """These inputs with only the columns ``names`` (those present); the others are hidden:
        reading one raises, naming it."""
        keep = set(names)
        if "reward_terms" in keep:
            keep.add("term_weights")  # the terms' weights go with them
        out = AdvantageInputs(
            self.rewards, self.group_ids, **{k: v for k, v in self._columns.items() if k in keep}
        )
        out._hidden = frozenset(self._columns) - keep
        return out

    def __getitem__(self, name: str) -> torch.Tensor:
        if name in self._columns:
            return self._columns[name]
        if name in self._hidden:
            raise KeyError(self._undeclared(name))
        raise KeyError(f"no column {name!r}; columns: {', '.join(self._columns) or 'none'}")

    def __getattr__(self, name: str) -> torch.Tensor | None:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._columns:
            return self._columns[name]
        if name in self._hidden:
            raise AttributeError(self._undeclared(name))
        if name in INPUT_FIELDS:
            return None
        raise AttributeError(
            f"AdvantageInputs has no column {name!r}; columns: {', '.join(self._columns) or 'none'}"
        )

    def _undeclared(self, name: str) -> str:
        return (
            f"the batch's column {name!r} is not among the columns this estimator declares "
            f"(its requires, the mask, token_kl when it uses_token_kl): add it to requires"
        )


@dataclass(frozen=True)
class AdvantageOutput:
    """What every estimator returns.

    Attributes:
        advantages: [N] per-completion or [N, T] per-token advantages (0 on masked-out tokens).
        returns: [N, T] value targets (gae), None otherwise.
    """

    advantages: torch.Tensor
    returns: torch.Tensor | None = None


EstimatorFn = Callable[..., AdvantageOutput]


@dataclass(frozen=True)
class AdvantageEstimator:
    """A registered estimator.

    Attributes:
        name: key in :data:`ADVANTAGES`.
        fn: ``fn(inputs: AdvantageInputs, **hyperparams) -> AdvantageOutput``.
        requires: the :class:`AdvantageInputs` columns it always needs.
        hyperparams: the keyword arguments ``fn`` accepts (from its signature).
        token_level: returns [N, T] advantages instead of [N].
        uses_token_kl: reads ``token_kl`` (when its ``beta`` > 0): the KL can go in the reward.
        paper: the method's paper (shown by ``rlvr algorithms``), or "".
        group_relative: each sample's advantage compares its reward with the other rewards of
            its group (GRPO, RLOO, ...): a group of one has no baseline, and a group whose
            rewards are all equal teaches nothing.
    """

    name: str
    fn: EstimatorFn
    requires: tuple[str, ...]
    hyperparams: tuple[str, ...]
    token_level: bool
    uses_token_kl: bool
    paper: str = ""
    group_relative: bool = False


ADVANTAGES: Registry[AdvantageEstimator] = Registry("advantage estimator")


def register_advantage(
    name: str,
    *,
    requires: tuple[str, ...] = (),
    token_level: bool = False,
    uses_token_kl: bool = False,
    paper: str = "",
    group_relative: bool = False,
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator: add ``fn(inputs: AdvantageInputs, **hyperparams) -> AdvantageOutput``.

    Args:
        name: registry key.
        requires: the columns the estimator reads besides rewards, group ids and the mask
            (checked by :func:`compute_advantages` with an error naming what to provide): an
            input rlvr computes (:data:`INPUT_FIELDS`), or a produced signal (read as
            ``inputs[name]``), which a run checks has a producer before it starts.
        token_level: the estimator returns [N, T] advantages.
        uses_token_kl: the estimator reads ``token_kl``.
        paper: the method's paper, e.g. 'Shao et al. 2024, "DeepSeekMath", arXiv:2402.03300'.
        group_relative: the advantage compares each reward with the others of its group (a
            run refuses ``rollout.group_size`` 1, and warns when every group's rewards stay
            equal).
    """
    if not all(isinstance(r, str) and r.isidentifier() for r in requires):
        raise ValueError(f"requires: names of inputs, got {requires!r}")

    def decorator(fn: EstimatorFn) -> EstimatorFn:
        params = tuple(inspect.signature(fn).parameters)[1:]
        ADVANTAGES.add(
            name,
            AdvantageEstimator(
                name,
                fn,
                tuple(requires),
                params,
                token_level,
                uses_token_kl,
                paper,
                group_relative,
            ),
        )
        return fn

    return decorator


def _need(name: str, inputs: AdvantageInputs, field: str) -> torch.Tensor:
    """The column ``field`` of ``inputs``, or ValueError saying what estimator ``name`` needs
    and how to get it."""
    value = inputs.get(field)
    if value is None and field not in INPUT_FIELDS:
        raise ValueError(f"{name} needs the produced signal {field!r}, which the run lacks")
    if value is None:
        raise ValueError(f"{name} needs {field}: {INPUT_HINTS[field]}")
    return value


@register_advantage(
    "grpo", paper='Shao et al. 2024, "DeepSeekMath", arXiv:2402.03300', group_relative=True
)
def _grpo_estimator(inputs: AdvantageInputs, eps: float = 1e-6) -> AdvantageOutput:
    return AdvantageOutput(grpo(inputs.rewards, inputs.group_ids, eps))


@register_advantage(
    "dr_grpo",
    paper='Liu et al. 2025, "Understanding R1-Zero-Like Training", arXiv:2503.20783',
    group_relative=True,
)
def _dr_grpo_estimator(inputs: AdvantageInputs) -> AdvantageOutput:
    return AdvantageOutput(dr_grpo(inputs.rewards, inputs.group_ids))


@register_advantage(
    "rloo", paper='Ahmadian et al. 2024, "Back to Basics", arXiv:2402.14740', group_relative=True
)
def _rloo_estimator(inputs: AdvantageInputs) -> AdvantageOutput:
    return AdvantageOutput(rloo(inputs.rewards, inputs.group_ids))


@register_advantage(
    "reinforce", paper='Williams 1992, "Simple Statistical Gradient-Following Algorithms"'
)
def _reinforce_estimator(inputs: AdvantageInputs, baseline: float = 0.0) -> AdvantageOutput:
    return AdvantageOutput(reinforce(inputs.rewards, baseline))


@register_advantage("gpg", paper='Chu et al. 2025, "GPG", arXiv:2504.02546', group_relative=True)
def _gpg_estimator(inputs: AdvantageInputs, valid_scaling: bool = True) -> AdvantageOutput:
    return AdvantageOutput(gpg(inputs.rewards, inputs.group_ids, valid_scaling))


@register_advantage(
    "remax", paper='Li et al. 2023, "ReMax", arXiv:2310.10505', requires=("greedy_rewards",)
)
def _remax_estimator(inputs: AdvantageInputs) -> AdvantageOutput:
    return AdvantageOutput(remax(inputs.rewards, _need("remax", inputs, "greedy_rewards")))


@register_advantage(
    "reinforce_pp",
    paper='Hu 2025, "REINFORCE++", arXiv:2501.03262',
    requires=("mask",),
    token_level=True,
    uses_token_kl=True,
)
def _reinforce_pp_estimator(
    inputs: AdvantageInputs, beta: float = 0.0, eps: float = 1e-6
) -> AdvantageOutput:
    mask = _need("reinforce_pp", inputs, "mask")
    kl = _need("reinforce_pp", inputs, "token_kl") if beta != 0.0 else None
    advantages, returns = reinforce_pp(inputs.rewards, mask, kl, beta, eps)
    return AdvantageOutput(advantages, returns)


@register_advantage(
    "reinforce_pp_baseline",
    paper='Hu 2025, "REINFORCE++", arXiv:2501.03262',
    requires=("mask",),
    token_level=True,
    uses_token_kl=True,
    group_relative=True,
)
def _reinforce_pp_baseline_estimator(
    inputs: AdvantageInputs, beta: float = 0.0, eps: float = 1e-6
) -> AdvantageOutput:
    """REINFORCE++-baseline (Hu 2025): r_i - mean_g r (:func:`dr_grpo`), then REINFORCE++."""
    mask = _need("reinforce_pp_baseline", inputs, "mask")
    kl = _need("reinforce_pp_baseline", inputs, "token_kl") if beta != 0.0 else None
    centred = dr_grpo(inputs.rewards, inputs.group_ids)  # r_i - mean_g r
    advantages, returns = reinforce_pp(centred, mask, kl, beta, eps)
    return AdvantageOutput(advantages, returns)


@register_advantage(
    "gae",
    paper='Schulman et al. 2016, "High-Dimensional Continuous Control Using GAE", arXiv:1506.02438',
    requires=("mask", "values"),
    token_level=True,
    uses_token_kl=True,
)
def _gae_estimator(
    inputs: AdvantageInputs, beta: float = 0.0, gamma: float = 1.0, lam: float = 1.0
) -> AdvantageOutput:
    """PPO's advantage: :func:`gae` on :func:`token_rewards` (KL in the reward when beta > 0)."""
    mask = _need("gae", inputs, "mask")
    values = _need("gae", inputs, "values")
    kl = _need("gae", inputs, "token_kl") if beta != 0.0 else None
    advantages, returns = gae(
        token_rewards(inputs.rewards, mask, kl, beta), values, mask, gamma, lam
    )
    return AdvantageOutput(advantages, returns)


def compute_advantages(name: str, inputs: AdvantageInputs, **hyperparams: float) -> AdvantageOutput:
    """Run the estimator registered as ``name``.

    Args:
        name: a key of :data:`ADVANTAGES`.
        inputs: rewards and group ids, plus the columns the estimator requires (it is handed
            the view of those alone).
        hyperparams: keyword arguments of the estimator (``ADVANTAGES[name].hyperparams``):
            grpo: eps; reinforce: baseline; gpg: valid_scaling; reinforce_pp,
            reinforce_pp_baseline: beta, eps; gae: beta, gamma, lam.
    Returns:
        :class:`AdvantageOutput`: advantages [N] (or [N, T] for token-level estimators) and
        returns [N, T] or None.
    Raises:
        ValueError: unknown name or hyperparameter, or a required input missing.
    """
    estimator = ADVANTAGES.get_or_raise(name)
    unknown = sorted(set(hyperparams) - set(estimator.hyperparams))
    if unknown:
        accepted = ", ".join(estimator.hyperparams) or "none"
        raise ValueError(f"{name} got unknown hyperparameters {unknown}; accepted: {accepted}")
    for field in estimator.requires:
        _need(name, inputs, field)
    declared = {"mask", *estimator.requires, *(("token_kl",) if estimator.uses_token_kl else ())}
    return estimator.fn(inputs.view(declared), **hyperparams)


def group_stats(rewards: torch.Tensor, group_ids: torch.Tensor) -> dict[str, float]:
    """Reward statistics over groups, for logging.

    Args:
        rewards: [N] rewards.
        group_ids: [N] long group id of every sample.
    Returns:
        ``num_groups``; ``zero_variance_frac``: fraction of groups whose rewards are all equal
        (their GRPO / Dr. GRPO / RLOO advantages are 0, so they give no learning signal; groups
        of one count as constant); ``group_std_mean``: mean over groups of the unbiased reward
        std (0 for a group of one).
    """
    r, inverse, count, total = _group_sums(rewards, group_ids)
    num_groups = count.numel()
    if num_groups == 0:
        return {"num_groups": 0.0, "zero_variance_frac": 0.0, "group_std_mean": 0.0}
    return {
        "num_groups": float(num_groups),
        "zero_variance_frac": (~_group_varies(r, inverse, num_groups)).float().mean().item(),
        "group_std_mean": _group_std(r, inverse, count, total).mean().item(),
    }
