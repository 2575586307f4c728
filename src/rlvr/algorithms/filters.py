"""Sample and token filters: which groups, completions and tokens the update sees.

- DAPO dynamic sampling (Yu et al. 2025): :func:`informative_groups` and the
  :class:`GroupAccumulator` that refills a batch with informative groups.
- Group selectors, :data:`GROUP_SELECTORS`: which whole groups a step keeps (``informative``:
  DAPO's; ``pass_rate``: balanced online difficulty filtering, Bae et al. 2025).
- GFPO group filtering (Shrivastava et al. 2025): :func:`group_filter`, registry
  :data:`GROUP_FILTERS`.
- High-entropy token selection (Wang et al. 2025, "Beyond the 80/20 Rule"):
  :func:`entropy_threshold`, :func:`top_entropy_mask`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from rlvr.algorithms.advantages import _group_sums, _group_varies
from rlvr.registry import Registry


def informative_groups(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Groups whose rewards are not all equal (DAPO, Yu et al. 2025, Sec. 3.2).

    A group whose completions all get the same reward has zero group-relative advantage and
    gives no policy gradient; DAPO's dynamic sampling keeps only groups with
    0 < |{correct}| < G. Equality is exact (max == min), so 0.1 + 0.2 style rounding of a
    mean cannot make a constant group look informative. A group of one is not informative.

    Args:
        rewards: [N] rewards.
        group_ids: [N] integer group ids.
    Returns:
        [K] bool, one per distinct id in ascending order (the order of
        ``torch.unique(group_ids)``).
    """
    r, inverse, count, _ = _group_sums(rewards, group_ids)
    return _group_varies(r, inverse, count.numel())


@dataclass
class GroupAccumulator:
    """Fills a batch of ``target_groups`` groups over several rollout draws (DAPO's dynamic
    sampling, Yu et al. 2025, Sec. 3.2; verl's ``max_num_gen_batches``).

    Each :meth:`add` takes one draw's rewards and group ids and returns the indices of the
    samples to keep: whole groups, informative ones only when ``only_informative``, in
    ascending id order, and no more than the groups still missing. Drawing stops when the
    batch is full or after ``max_draws`` draws; a batch still short then trains on the groups
    it has (``metrics()["batch_fill"]`` < 1 says so). With ``only_informative=False`` and
    ``max_draws=1`` it keeps the first draw unchanged, so the trainer's loop is the same with
    and without dynamic sampling::

        acc = GroupAccumulator(prompts_per_step, max_draws, only_informative)
        while not acc.done:
            draw = rollout_and_score(prompts_per_step)
            kept.append(draw.select(acc.add(draw.rewards, draw.group_ids)))
        metrics.update({f"sampling/{k}": v for k, v in acc.metrics().items()})

    Attributes:
        target_groups: groups wanted in the batch (>= 1).
        max_draws: most draws (>= 1), the first included.
        only_informative: drop groups whose rewards are all equal.
        select: ``select(rewards [N], group_ids [N]) -> [K] bool`` choosing the groups to keep
            (a :data:`GROUP_SELECTORS` entry with its params); when given it replaces
            ``only_informative``.
        draws, groups_seen, groups_informative, groups_kept: counters so far.
    """

    target_groups: int
    max_draws: int = 1
    only_informative: bool = True
    select: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    draws: int = field(default=0, init=False)
    groups_seen: int = field(default=0, init=False)
    groups_informative: int = field(default=0, init=False)
    groups_kept: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.target_groups < 1 or self.max_draws < 1:
            raise ValueError(
                f"GroupAccumulator needs target_groups >= 1 and max_draws >= 1, got "
                f"{self.target_groups} and {self.max_draws}"
            )

    @property
    def done(self) -> bool:
        """The batch is full, or no draw is left."""
        return self.groups_kept >= self.target_groups or self.draws >= self.max_draws

    def add(self, rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
        """Account for one draw; return the [M] long indices (ascending) of its kept samples.

        Args:
            rewards: [N] rewards of the draw.
            group_ids: [N] group ids of the draw.
        """
        if self.done:
            raise ValueError(
                f"GroupAccumulator is done ({self.groups_kept}/{self.target_groups} groups, "
                f"{self.draws}/{self.max_draws} draws): no more draws are needed"
            )
        _, inverse = torch.unique(group_ids, return_inverse=True)
        informative = informative_groups(rewards, group_ids)  # [K]
        if self.select is not None:
            eligible = self.select(rewards, group_ids).to(torch.bool)
            if eligible.shape != informative.shape:
                raise ValueError(
                    f"a group selector must return one bool per group ({informative.numel()}), "
                    f"got shape {tuple(eligible.shape)}"
                )
        else:
            eligible = informative if self.only_informative else torch.ones_like(informative)
        chosen = eligible.nonzero().squeeze(-1)[: self.target_groups - self.groups_kept]
        selected = torch.zeros_like(informative)
        selected[chosen] = True
        self.draws += 1
        self.groups_seen += informative.numel()
        self.groups_informative += int(informative.sum())
        self.groups_kept += chosen.numel()
        return selected[inverse].nonzero().squeeze(-1)

    def metrics(self) -> dict[str, float]:
        """``draws``, ``groups_seen``, ``groups_kept``, ``informative_frac`` (of the groups
        seen), ``batch_fill`` (groups kept / target)."""
        return {
            "draws": float(self.draws),
            "groups_seen": float(self.groups_seen),
            "groups_kept": float(self.groups_kept),
            "informative_frac": self.groups_informative / max(self.groups_seen, 1),
            "batch_fill": self.groups_kept / self.target_groups,
        }


SelectFn = Callable[..., torch.Tensor]

GROUP_SELECTORS: Registry[SelectFn] = Registry("group selector")


def register_group_selector(name: str) -> Callable[[SelectFn], SelectFn]:
    """Decorator: add ``select(rewards [N], group_ids [N], **params) -> [K] bool``, one flag per
    distinct group id in ascending order (True: the group trains). ``algorithm.select.name``
    names it, the section's other keys are its params; with ``select.max_draws`` > 1 the
    batch is refilled with new groups like DAPO's dynamic sampling."""

    def decorator(fn: SelectFn) -> SelectFn:
        return GROUP_SELECTORS.add(name, fn)

    return decorator


@register_group_selector("all")
def _every_group(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Every group trains (the default: a step selects no groups)."""
    return torch.ones(len(torch.unique(group_ids)), dtype=torch.bool)


@register_group_selector("informative")
def _informative_selector(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """DAPO's dynamic sampling: groups whose rewards are not all equal."""
    return informative_groups(rewards, group_ids)


@register_group_selector("pass_rate")
def pass_rate_band(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    low: float = 0.0,
    high: float = 1.0,
    threshold: float = 1.0,
) -> torch.Tensor:
    """Balanced online difficulty filtering (Bae et al. 2025, "Online Difficulty Filtering for
    Reasoning Oriented Reinforcement Learning", arXiv:2504.03380): keep the groups whose pass
    rate p_g = |{i in g : r_i >= threshold}| / |g| lies in [low, high], e.g. low = 0.25,
    high = 0.75 keeps prompts of intermediate difficulty (low > 0 drops all-failed prompts,
    high < 1 all-solved ones).

    Args:
        rewards: [N] rewards.
        group_ids: [N] integer group ids.
        low, high: the band of pass rates kept, 0 <= low <= high <= 1.
        threshold: the least reward that counts as a pass.
    Returns:
        [K] bool, one per distinct id in ascending order.
    """
    if not 0.0 <= low <= high <= 1.0:
        raise ValueError(f"pass_rate needs 0 <= low <= high <= 1, got low={low}, high={high}")
    _, _, count, passed = _group_sums((rewards >= threshold).float(), group_ids)
    rate = passed / count  # p_g
    return (rate >= low) & (rate <= high)


def normalized_variance(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """VCRL's difficulty signal (Jiang et al. 2025, "VCRL: Variance-based Curriculum
    Reinforcement Learning for Large Language Models", arXiv:2509.19803): each group's unbiased
    reward variance over the largest one G rewards in [0, 1] can have,

        p_g = s_g^2 / s_max^2,   s_max^2 = k (G - k) / (G (G - 1)),  k = floor(G / 2)

    (half the samples right, half wrong), so p = 1 at pass rate 1/2 and p = 0 for a group all
    right or all wrong, or of one sample.

    Args:
        rewards: [N] rewards in [0, 1]; group_ids: [N] integer group ids.
    Returns:
        [K] p_g, one per distinct id in ascending order.
    """
    r, inverse, count, total = _group_sums(rewards, group_ids)
    mean = total / count
    var = torch.zeros_like(total).index_add_(0, inverse, (r - mean[inverse]) ** 2)
    var = var / (count - 1).clamp_min(1)  # s_g^2, unbiased
    k = torch.floor(count / 2)
    s_max = k * (count - k) / (count * (count - 1)).clamp_min(1)
    return torch.where(count > 1, var / s_max.clamp_min(1e-12), torch.zeros_like(var))


@register_group_selector("variance")
def variance_band(
    rewards: torch.Tensor, group_ids: torch.Tensor, kappa: float = 0.5
) -> torch.Tensor:
    """VCRL's selection: keep the groups whose normalised reward variance
    :func:`normalized_variance` is >= ``kappa`` (0 < kappa <= 1), the prompts of intermediate
    difficulty where the policy's samples disagree most. Returns [K] bool in ascending id order."""
    if not 0 < kappa <= 1:
        raise ValueError(f"variance needs 0 < kappa <= 1, got {kappa}")
    return normalized_variance(rewards, group_ids) >= kappa


ScoreFn = Callable[..., torch.Tensor]

GROUP_FILTERS: Registry[ScoreFn] = Registry("group filter")


def register_group_filter(name: str) -> Callable[[ScoreFn], ScoreFn]:
    """Decorator: add a criterion ``score(rewards [N], lengths [N]) -> [N]`` (higher is kept)."""

    def decorator(fn: ScoreFn) -> ScoreFn:
        return GROUP_FILTERS.add(name, fn)

    return decorator


@register_group_filter("shortest")
def shortest(rewards: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """GFPO's length criterion: score = -|y_i| (shorter completions are kept)."""
    return -lengths.to(torch.float64)


@register_group_filter("reward_per_token")
def reward_per_token(rewards: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """GFPO's token-efficiency criterion: score = r_i / |y_i| (|y_i| at least 1)."""
    return rewards.to(torch.float64) / lengths.to(torch.float64).clamp_min(1)  # r_i / |y_i|


def group_filter(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    lengths: torch.Tensor,
    keep: int,
    criterion: str,
    **params: float,
) -> torch.Tensor:
    """GFPO group filtering (Shrivastava et al. 2025, "Sample More to Think Less: Group Filtered
    Policy Optimization for Concise Reasoning", arXiv:2508.09726).

    Sample k > G completions per prompt, keep the ``keep`` = G best of each group by
    ``criterion`` (:data:`GROUP_FILTERS`: "shortest", "reward_per_token"), and compute the
    advantages over the kept ones only; the others are dropped from the update. Ties keep the
    lower index. A group with at most ``keep`` samples is kept whole.

    Args:
        rewards: [N] rewards.
        group_ids: [N] integer group ids.
        lengths: [N] completion lengths in tokens.
        keep: completions kept per group (>= 1).
        criterion: a key of :data:`GROUP_FILTERS`.
        params: the criterion's own keyword arguments (the group_filter stage's other keys).
    Returns:
        [M] long indices of the kept samples, ascending.
    """
    score_fn = GROUP_FILTERS.get_or_raise(criterion)
    if keep < 1:
        raise ValueError(f"group_filter keeps at least one sample per group, got keep={keep}")
    if lengths.shape != rewards.shape:
        raise ValueError(
            f"lengths must be [N] like rewards, got {tuple(lengths.shape)} and "
            f"{tuple(rewards.shape)}"
        )
    _, inverse, count, _ = _group_sums(rewards, group_ids)
    score = score_fn(rewards, lengths, **params)
    by_score = torch.argsort(-score, stable=True)  # best first, ties by index
    order = by_score[torch.argsort(inverse[by_score], stable=True)]  # then grouped
    start = torch.cumsum(count, 0).long() - count.long()  # first position of each group
    rank = torch.arange(order.numel(), device=order.device) - start[inverse[order]]
    return order[rank < keep].sort().values


def entropy_threshold(entropy: torch.Tensor, mask: torch.Tensor, rho: float) -> torch.Tensor:
    """The entropy above which the top ``rho`` fraction of the masked tokens lie (Wang et al.
    2025, "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective Reinforcement
    Learning for LLM Reasoning", arXiv:2506.01939; rho = 0.2 in the paper).

    tau = the k-th largest masked entropy, k = ceil(rho * n) for n masked tokens. Compute it
    once over the full batch and compare micro-batches against it, so the selection does not
    depend on how the batch is split.

    Args:
        entropy: [B, T] per-token entropy.
        mask: [B, T] completion mask.
        rho: fraction of tokens kept, 0 < rho <= 1.
    Returns:
        [] tau (+inf when the mask is empty).
    """
    if not 0 < rho <= 1:
        raise ValueError(f"rho must be in (0, 1], got {rho}")
    values = entropy.detach()[mask > 0]
    if values.numel() == 0:
        return torch.tensor(float("inf"), dtype=entropy.dtype, device=entropy.device)
    k = max(1, math.ceil(round(rho * values.numel(), 9)))  # k = ceil(rho n)
    return torch.topk(values, k).values[-1]


def top_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, rho: float) -> torch.Tensor:
    """Keep only the highest-entropy tokens: m'_{i,t} = m_{i,t} * [H_{i,t} >= tau] (Wang et
    al. 2025; tau from :func:`entropy_threshold`). Tokens tied with tau are all kept.

    Use m' as the loss mask of the policy-gradient term (and for the aggregation normalisers).

    Args:
        entropy: [B, T] per-token entropy of the batch.
        mask: [B, T] completion mask.
        rho: fraction of tokens kept, 0 < rho <= 1.
    Returns:
        [B, T] bool mask.
    """
    tau = entropy_threshold(entropy, mask, rho)
    return (mask > 0) & (entropy.detach() >= tau)  # m * [H >= tau]
