"""Credit assignment across the turns of multi-turn agent episodes: from per-turn environment
rewards to one advantage per turn, then per token.

Notation: N episodes; episode i belongs to group g_i (the G episodes sampled for one prompt,
``group_ids``); it has K_i >= 1 turns with rewards r_{i,0..K_i-1} (``turn_rewards``) and anchor
state keys s_{i,k} (``anchors``: any hashable key of the environment state the turn acted in,
None for no anchor). Undiscounted return R_i = sum_k r_{i,k}; discounted return-to-go
G_{i,k} = sum_{k' >= k} gamma^(k' - k) r_{i,k'}.

Advantages come from an ``estimator``: any callable (rewards [M] float, group_ids [M] long)
-> advantages [M], such as :func:`rlvr.algorithms.advantages.grpo`. It is called on float64
tensors on the CPU; group ids given to it are dense (0..S-1) but carry no order meaning. The
per-turn rules call it once, on the turns of the sets of two or more (a batch-level estimator
such as GPG's valid-sample scaling then counts those turns only); the others get 0.

Per-turn values are ragged ``list[list[float]]`` with the shape of ``turn_rewards``.
:func:`token_advantages` spreads them onto the action tokens of a [N, T] mask.

The rules, in the registry :data:`CREDIT` (one calling convention: :func:`assign_credit`):

- ``broadcast``: the episode's advantage on every turn (GRPO over episodes, as for one turn);
- ``turn_discounted``: turns compared with the turns at the same depth of the same group;
- ``gigpo``: episode advantage plus a step advantage among turns from the same anchor state
  (Feng et al. 2025);
- ``gated``: ``turn_discounted`` on rewards whose intermediate terms count only when the
  outcome passes a threshold (Sun et al. 2025);
- ``igpo``: every turn reward of a group normalised together, then summed from each turn to
  the end (Wang et al. 2025, IGPO; the turn rewards are the information gains of
  :func:`information_gain_rewards`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import torch

from rlvr.registry import Registry

Estimator = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
TurnValues = list[list[float]]
TurnRewards = Sequence[Sequence[float]]
Anchors = Sequence[Sequence[Hashable | None]]
GroupIds = torch.Tensor | Sequence[int]

# ---------------------------------------------------------------- validation


def _check_rewards(turn_rewards: TurnRewards) -> TurnValues:
    """turn_rewards as ragged python floats, or ValueError naming the episode and turn."""
    rewards: TurnValues = []
    for i, episode in enumerate(turn_rewards):
        if len(episode) == 0:
            raise ValueError(f"turn_rewards[{i}] is empty: every episode needs at least one turn")
        row = []
        for k, value in enumerate(episode):
            try:
                reward = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"turn_rewards[{i}][{k}] = {value!r} is not a number") from None
            if not math.isfinite(reward):
                raise ValueError(
                    f"turn_rewards[{i}][{k}] = {reward} is not finite: the environment's "
                    f"reward must be a finite float"
                )
            row.append(reward)
        rewards.append(row)
    return rewards


def _check_groups(group_ids: GroupIds, num_episodes: int) -> list[int]:
    """group_ids as a python list of N ints, or ValueError."""
    ids = torch.as_tensor(group_ids)
    if ids.dim() != 1 or ids.shape[0] != num_episodes:
        raise ValueError(
            f"group_ids must be 1-D with one id per episode ({num_episodes}), got shape "
            f"{tuple(ids.shape)}"
        )
    if ids.is_floating_point() or ids.is_complex():
        raise ValueError(f"group_ids must be integers, got dtype {ids.dtype}")
    return [int(g) for g in ids.tolist()]


def _check_anchors(anchors: Anchors, rewards: TurnValues) -> None:
    """ValueError unless anchors has the ragged shape of rewards and holds hashable keys."""
    if len(anchors) != len(rewards):
        raise ValueError(f"anchors has {len(anchors)} episodes but turn_rewards has {len(rewards)}")
    for i, (keys, row) in enumerate(zip(anchors, rewards, strict=True)):
        if len(keys) != len(row):
            raise ValueError(
                f"anchors[{i}] has {len(keys)} entries but episode {i} has {len(row)} turns: "
                f"give one anchor (or None) per turn"
            )
        for k, key in enumerate(keys):
            try:
                hash(key)
            except TypeError:
                raise ValueError(
                    f"anchors[{i}][{k}] = {key!r} is not hashable: use a str, int or tuple "
                    f"key of the state"
                ) from None


def _check_gamma(gamma: float) -> None:
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")


# ---------------------------------------------------------------- grouping


def _run_estimator(estimator: Estimator, values: list[float], keys: list[Hashable]) -> list[float]:
    """estimator(values, dense ids of keys) as a list; [] without calling it for no values."""
    if not values:
        return []
    dense: dict[Hashable, int] = {}
    ids = [dense.setdefault(key, len(dense)) for key in keys]
    out = estimator(torch.tensor(values, dtype=torch.float64), torch.tensor(ids, dtype=torch.long))
    if not isinstance(out, torch.Tensor) or out.shape != (len(values),):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"the estimator must return a [{len(values)}] tensor, got {shape}")
    return [float(a) for a in out.tolist()]


def _compare_within(
    estimator: Estimator, values: list[float], keys: list[Hashable | None]
) -> list[float]:
    """Advantage of each value among the values sharing its key.

    Values whose key is None, or whose key no other value shares, get 0 (nothing to compare
    against); the estimator is called once on the values of keys held by two or more.
    """
    count: dict[Hashable, int] = {}
    for key in keys:
        if key is not None:
            count[key] = count.get(key, 0) + 1
    compared = [j for j, key in enumerate(keys) if key is not None and count[key] > 1]
    advantages = [0.0] * len(values)
    scored = _run_estimator(estimator, [values[j] for j in compared], [keys[j] for j in compared])
    for j, advantage in zip(compared, scored, strict=True):
        advantages[j] = advantage
    return advantages


def _flatten(values: TurnValues) -> list[float]:
    return [v for row in values for v in row]


def _unflatten(flat: list[float], like: TurnValues) -> TurnValues:
    """flat values back to the ragged shape of ``like``."""
    out, start = [], 0
    for row in like:
        out.append(flat[start : start + len(row)])
        start += len(row)
    return out


# ---------------------------------------------------------------- returns and rewards


def episode_returns(turn_rewards: TurnRewards) -> torch.Tensor:
    """Undiscounted episode returns R_i = sum_k r_{i,k}.

    Args:
        turn_rewards: N lists of K_i >= 1 finite per-turn rewards.
    Returns:
        [N] float64 returns.
    """
    rewards = _check_rewards(turn_rewards)
    return torch.tensor([sum(row) for row in rewards], dtype=torch.float64)


def discounted_returns(turn_rewards: TurnRewards, gamma: float) -> TurnValues:
    """Per-turn discounted returns-to-go G_{i,k} = sum_{k' >= k} gamma^(k' - k) r_{i,k'}.

    Computed backwards: G_{i,K_i-1} = r_{i,K_i-1}, G_{i,k} = r_{i,k} + gamma * G_{i,k+1}.
    With gamma = 1, G_{i,0} = R_i.

    Args:
        turn_rewards: N lists of K_i >= 1 finite per-turn rewards.
        gamma: discount per turn, in [0, 1].
    Returns:
        ragged [N][K_i] returns.
    """
    _check_gamma(gamma)
    out = []
    for row in _check_rewards(turn_rewards):
        returns, running = [0.0] * len(row), 0.0
        for k in reversed(range(len(row))):
            running = row[k] + gamma * running  # G_k = r_k + gamma * G_{k+1}
            returns[k] = running
        out.append(returns)
    return out


def gate_turn_rewards(turn_rewards: TurnRewards, threshold: float) -> TurnValues:
    """Gated reward accumulation (G-RA; Sun et al. 2025, "Stabilizing Long-term Multi-turn
    Reinforcement Learning with Gated Rewards", arXiv:2508.10548).

    The outcome of episode i is its last turn's reward o_i = r_{i,K_i-1}. Intermediate rewards
    count only when the outcome passes the gate: r'_{i,k} = r_{i,k} * [o_i >= threshold] for
    k < K_i - 1; the last turn keeps r'_{i,K_i-1} = o_i. So intermediate rewards cannot be
    collected by an episode that fails its task (reward hacking of the immediate rewards).

    Args:
        turn_rewards: N lists of K_i >= 1 finite per-turn rewards, the last one the outcome.
        threshold: the outcome an episode needs for its intermediate rewards to count.
    Returns:
        ragged [N][K_i] gated rewards.
    """
    out = []
    for row in _check_rewards(turn_rewards):
        passed = row[-1] >= threshold  # o_i >= threshold
        out.append([r if passed else 0.0 for r in row[:-1]] + [row[-1]])
    return out


def information_gain_rewards(
    turn_rewards: TurnRewards, answer_probs: Sequence[Sequence[float]]
) -> TurnValues:
    """IGPO's turn rewards (Wang et al. 2025, "Information Gain-based Policy Optimization: A
    Simple and Effective Approach for Multi-Turn LLM Agents", Sec. 3; seed 004): each turn but
    the last is rewarded by how much it raised the policy's probability of the ground-truth
    answer, the last by the outcome:

        r'_{i,k} = r_{i,k} + (P_{i,k+1} - P_{i,k})    for k < K_i - 1,
        r'_{i,K_i-1} = r_{i,K_i-1}

    with P_{i,k} the policy's probability of the answer (teacher-forced, the geometric mean of
    its tokens' probabilities) after the prompt and the episode's turns before k with their
    observations: P_{i,0} before any action, P_{i,k} after turn k - 1's observation
    (:func:`rlvr.rewards.reference_probability.turn_answer_probabilities`). An environment's
    intermediate rewards r_{i,k}, k < K_i - 1, are kept (0 in the paper's search tasks).

    Args:
        turn_rewards: N lists of K_i >= 1 finite per-turn rewards, the last one the outcome.
        answer_probs: N lists of K_i probabilities P_{i,0..K_i-1}, each in [0, 1].
    Returns:
        ragged [N][K_i] rewards.
    """
    rewards = _check_rewards(turn_rewards)
    if len(answer_probs) != len(rewards):
        raise ValueError(
            f"answer_probs has {len(answer_probs)} episodes, turn_rewards {len(rewards)}"
        )
    out = []
    for i, (row, probs) in enumerate(zip(rewards, answer_probs, strict=True)):
        p = [float(v) for v in probs]
        if len(p) != len(row) or not all(0.0 <= v <= 1.0 for v in p):
            raise ValueError(
                f"answer_probs[{i}] must hold {len(row)} probabilities in [0, 1], got {p}"
            )
        gains = [p[k + 1] - p[k] for k in range(len(row) - 1)]  # IG of turn k
        out.append([r + g for r, g in zip(row, gains, strict=False)] + [row[-1]])
    return out


# ---------------------------------------------------------------- credit rules


def broadcast_credit(
    turn_rewards: TurnRewards, group_ids: GroupIds, estimator: Estimator
) -> TurnValues:
    """Episode-level credit: A_{i,k} = A_i for every turn k, A = estimator(R, group_ids).

    The episode is one bandit action, as in single-turn GRPO (Shao et al. 2024): the return
    R_i = sum_k r_{i,k} is compared with the returns of its group, and every turn of the
    episode gets the same advantage.

    Args:
        turn_rewards: N lists of K_i >= 1 finite per-turn rewards.
        group_ids: [N] integer group (prompt) id of every episode.
        estimator: (rewards [M], group_ids [M]) -> advantages [M].
    Returns:
        ragged [N][K_i] advantages.
    """
    rewards = _check_rewards(turn_rewards)
    groups = _check_groups(group_ids, len(rewards))
    episode = _run_estimator(estimator, [sum(row) for row in rewards], list(groups))
    return [[a] * len(row) for a, row in zip(episode, rewards, strict=True)]


def turn_discounted_credit(
    turn_rewards: TurnRewards, group_ids: GroupIds, estimator: Estimator, gamma: float
) -> TurnValues:
    """Turn-level credit at equal depth: A_{i,k} = estimator(G)_{i,k} over the set
    {(j, k) : g_j = g_i, K_j > k}, the turns at the same index k of the episodes of the group.

    The turn-level group comparison of MT-GRPO (Zeng et al. 2025, "Reinforcing Multi-Turn
    Reasoning in LLM Agents via Turn-Level Credit Assignment", arXiv:2505.11821), generalised
    from that paper's two turns to K turns: each turn is scored by its discounted return-to-go
    G_{i,k} (:func:`discounted_returns`), so it is credited with what followed it, and compared
    with the other episodes of its prompt at the same depth. It is not the paper's exact
    estimator (which adds a turn-level and an outcome-level advantage).

    A (group, k) set of one turn gets A = 0, since nothing is compared with it: a turn past the
    length of all the other episodes of its group, and every turn of a group of one episode.
    This differs from the group-of-one convention of :mod:`rlvr.algorithms.advantages`
    (A_i = r_i), which :func:`broadcast_credit` keeps.

    Args:
        turn_rewards: N lists of K_i >= 1 finite per-turn rewards.
        group_ids: [N] integer group (prompt) id of every episode.
        estimator: (rewards [M], group_ids [M]) -> advantages [M].
        gamma: discount per turn, in [0, 1].
    Returns:
        ragged [N][K_i] advantages.
    """
    returns = discounted_returns(turn_rewards, gamma)
    groups = _check_groups(group_ids, len(returns))
    keys: list[Hashable | None] = [
        (g, k) for g, row in zip(groups, returns, strict=True) for k in range(len(row))
    ]
    return _unflatten(_compare_within(estimator, _flatten(returns), keys), returns)


def gigpo_credit(
    turn_rewards: TurnRewards,
    anchors: Anchors,
    group_ids: GroupIds,
    estimator: Estimator,
    gamma: float,
    weight: float,
) -> TurnValues:
    """GiGPO credit (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent
    Training", arXiv:2505.10978): A_{i,k} = A^E_i + weight * A^S_{i,k}.

    - Episode advantage A^E = estimator(R, group_ids), R_i = sum_k r_{i,k}: the episode-level
      groups (:func:`broadcast_credit`).
    - Step advantage A^S_{i,k} = estimator(G)_{i,k} over the step group of turn (i, k): the
      turns (j, k') with g_j = g_i and s_{j,k'} = s_{i,k} (key (group, anchor)), compared by
      their discounted returns G (:func:`discounted_returns`). Turns of one episode that come
      back to the same state fall in the same step group, as in the paper. A turn whose anchor
      is None, or whose step group has one turn, gets A^S = 0.

    Args:
        turn_rewards: N lists of K_i >= 1 finite per-turn rewards.
        anchors: N lists of K_i hashable anchor state keys (None: no anchor).
        group_ids: [N] integer group (prompt) id of every episode.
        estimator: (rewards [M], group_ids [M]) -> advantages [M].
        gamma: discount per turn of the step-level returns, in [0, 1].
        weight: the weight omega of the step advantage.
    Returns:
        ragged [N][K_i] advantages.
    """
    returns = discounted_returns(turn_rewards, gamma)
    _check_anchors(anchors, returns)
    groups = _check_groups(group_ids, len(returns))
    episode = broadcast_credit(turn_rewards, groups, estimator)  # A^E on every turn
    keys: list[Hashable | None] = [
        None if s is None else (g, s) for g, row in zip(groups, anchors, strict=True) for s in row
    ]
    step = _compare_within(estimator, _flatten(returns), keys)  # A^S
    combined = [e + weight * s for e, s in zip(_flatten(episode), step, strict=True)]
    return _unflatten(combined, returns)


def igpo_credit(
    turn_rewards: TurnRewards, group_ids: GroupIds, estimator: Estimator, gamma: float
) -> TurnValues:
    """IGPO's credit (Wang et al. 2025, Sec. 3): every turn reward of a group's episodes is
    normalised together (the estimator over the set {(j, k) : g_j = g_i}, GRPO's z-score in
    the paper), then each turn gets the discounted sum of the normalised rewards from it to the
    end of its episode, A_{i,k} = sum_{k' >= k} gamma^(k' - k) r~_{i,k'} (gamma 1 in the
    paper), on every token of the turn. With IGPO's rewards (:func:`information_gain_rewards`)
    an episode whose outcome ties with all its group's still gets credit for the turns that
    raised the answer's probability, where episode-level GRPO gives every turn 0.

    Args:
        turn_rewards: N lists of K_i >= 1 finite per-turn rewards.
        group_ids: [N] integer group (prompt) id of every episode.
        estimator: (rewards [M], group_ids [M]) -> advantages [M].
        gamma: discount per turn, in [0, 1].
    Returns:
        ragged [N][K_i] advantages.
    """
    _check_gamma(gamma)
    rewards = _check_rewards(turn_rewards)
    groups = _check_groups(group_ids, len(rewards))
    keys: list[Hashable] = [g for g, row in zip(groups, rewards, strict=True) for _ in row]
    normalised = _run_estimator(estimator, _flatten(rewards), keys)  # r~ over the group's turns
    return discounted_returns(_unflatten(normalised, rewards), gamma)


# ---------------------------------------------------------------- by name


@dataclass(frozen=True)
class CreditRule:
    """A registered credit rule: ``fn(turn_rewards, anchors, group_ids, estimator, *, gamma,
    weight, gate) -> ragged [N][K_i] advantages`` and one line on what it does."""

    fn: Callable[..., TurnValues]
    description: str


CREDIT: Registry[CreditRule] = Registry("credit rule")
"""The credit rules of :func:`assign_credit` (``algorithm.credit.name``), users' included."""


def register_credit(name: str, description: str) -> Callable[[Callable], Callable]:
    """Decorator: add a credit rule ``fn(turn_rewards, anchors, group_ids, estimator, *, gamma,
    weight, gate) -> ragged [N][K_i]`` (the arguments of :func:`assign_credit`)."""

    def decorator(fn: Callable[..., TurnValues]) -> Callable[..., TurnValues]:
        CREDIT.add(name, CreditRule(fn, description))
        return fn

    return decorator


@register_credit("broadcast", "the episode's group advantage on every turn (GRPO)")
def _broadcast_rule(turn_rewards, anchors, group_ids, estimator, *, gamma, weight, gate):
    return broadcast_credit(turn_rewards, group_ids, estimator)


@register_credit(
    "turn_discounted", "discounted return of each turn, compared at equal depth (MT-GRPO)"
)
def _turn_discounted_rule(turn_rewards, anchors, group_ids, estimator, *, gamma, weight, gate):
    return turn_discounted_credit(turn_rewards, group_ids, estimator, gamma)


@register_credit(
    "gigpo", "episode advantage + weight x step advantage within anchor states (GiGPO)"
)
def _gigpo_rule(turn_rewards, anchors, group_ids, estimator, *, gamma, weight, gate):
    if anchors is None:
        raise ValueError("credit rule 'gigpo' needs anchors: one state key (or None) per turn")
    return gigpo_credit(turn_rewards, anchors, group_ids, estimator, gamma, weight)


@register_credit("gated", "turn_discounted on rewards gated by the outcome (G-RA)")
def _gated_rule(turn_rewards, anchors, group_ids, estimator, *, gamma, weight, gate):
    gated = gate_turn_rewards(turn_rewards, gate)
    return turn_discounted_credit(gated, group_ids, estimator, gamma)


@register_credit(
    "igpo", "every turn reward of a group normalised together, then summed to the end (IGPO)"
)
def _igpo_rule(turn_rewards, anchors, group_ids, estimator, *, gamma, weight, gate):
    return igpo_credit(turn_rewards, group_ids, estimator, gamma)


def assign_credit(
    name: str,
    turn_rewards: TurnRewards,
    anchors: Anchors | None,
    group_ids: GroupIds,
    estimator: Estimator,
    gamma: float = 1.0,
    weight: float = 1.0,
    gate: float = 1.0,
) -> TurnValues:
    """Per-turn advantages by the credit rule ``name`` of :data:`CREDIT`.

    Args:
        name: ``broadcast``, ``turn_discounted``, ``gigpo``, ``gated``, ``igpo`` or a user's
            rule.
        turn_rewards: N lists of K_i >= 1 finite per-turn rewards.
        anchors: N lists of K_i hashable anchor state keys or None per turn; needed by
            ``gigpo``, checked against turn_rewards by every rule when given.
        group_ids: [N] integer group (prompt) id of every episode.
        estimator: (rewards [M], group_ids [M]) -> advantages [M].
        gamma: discount per turn (turn_discounted, gigpo, gated, igpo).
        weight: weight of the step advantage (gigpo).
        gate: outcome threshold of the gated rewards (gated).
    Returns:
        ragged [N][K_i] advantages.
    Raises:
        ValueError: unknown name, or inputs of mismatched shapes, empty episodes, non-finite
            rewards or parameters.
    """
    rule = CREDIT.get_or_raise(name)
    for param, value in (("gamma", gamma), ("weight", weight), ("gate", gate)):
        if not math.isfinite(value):
            raise ValueError(f"assign_credit: {param} must be finite, got {value}")
    if anchors is not None:
        _check_anchors(anchors, _check_rewards(turn_rewards))
    return rule.fn(
        turn_rewards, anchors, group_ids, estimator, gamma=gamma, weight=weight, gate=gate
    )


# ---------------------------------------------------------------- onto tokens


def token_advantages(turn_advantages: TurnValues, action_mask: torch.Tensor) -> torch.Tensor:
    """Spread per-turn advantages onto the tokens of each episode.

    The action tokens of row i are the maximal runs of nonzero entries of its mask; the k-th
    run holds the tokens of turn k and gets A_{i,k}; every other token gets 0. Turns must be
    separated by at least one 0 (the observation, or the chat template's tokens): two
    adjacent turns form one run.

    Args:
        turn_advantages: ragged [N][K_i] per-turn advantages.
        action_mask: [N, T] bool or 0/1, 1 on the tokens the policy generated.
    Returns:
        [N, T] float32 advantages on the mask's device.
    Raises:
        ValueError: the mask is not [N, T], or a row's number of runs differs from its number
            of turns.
    """
    if action_mask.dim() != 2 or action_mask.shape[0] != len(turn_advantages):
        raise ValueError(
            f"action_mask must be [N, T] with N = {len(turn_advantages)} episodes, got shape "
            f"{tuple(action_mask.shape)}"
        )
    m = action_mask != 0
    previous = torch.zeros_like(m)
    previous[:, 1:] = m[:, :-1]
    starts = m & ~previous  # first token of each run
    runs = starts.sum(-1).tolist()
    for i, (count, row) in enumerate(zip(runs, turn_advantages, strict=True)):
        if count != len(row):
            raise ValueError(
                f"row {i} of action_mask has {count} runs of action tokens but episode {i} has "
                f"{len(row)} turns: each turn's tokens must be one run of 1s, turns separated "
                f"by 0s"
            )
    width = max((len(row) for row in turn_advantages), default=0)
    table = torch.zeros(len(turn_advantages), max(width, 1), dtype=torch.float32)
    for i, row in enumerate(turn_advantages):
        table[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    table = table.to(action_mask.device)
    turn_index = (starts.long().cumsum(-1) - 1).clamp_min(0)  # run k of each token
    return torch.where(m, table.gather(1, turn_index), 0.0)
