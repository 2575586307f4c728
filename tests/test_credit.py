"""Credit assignment across turns (rlvr.algorithms.credit): hand-computed examples.

The example batch: group 7 holds episodes 0, 1, 2 and group 3 holds episodes 3, 4.

    episode  group  turn rewards      R    G (gamma = 0.5)       anchors
    0        7      [0, 1]            1    [0.5, 1]              [start, a]
    1        7      [1, 0.5, 0]       1.5  [1.25, 0.5, 0]        [start, b, a]
    2        7      [0.5]             0.5  [0.5]                 [start]
    3        3      [1, 2]            3    [2, 2]                [start, None]
    4        3      [0, 1, 0]         1    [0.5, 1, 0]           [start, x, x]

G backwards, G_k = r_k + 0.5 G_{k+1}: episode 1: G_2 = 0, G_1 = 0.5 + 0 = 0.5,
G_0 = 1 + 0.25 = 1.25; episode 3: G_1 = 2, G_0 = 1 + 1 = 2; episode 4: G_2 = 0, G_1 = 1,
G_0 = 0 + 0.5 = 0.5.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms.advantages import grpo
from rlvr.algorithms.credit import (
    CREDIT,
    assign_credit,
    broadcast_credit,
    discounted_returns,
    episode_returns,
    gate_turn_rewards,
    gigpo_credit,
    igpo_credit,
    information_gain_rewards,
    token_advantages,
    turn_discounted_credit,
)

REWARDS = [[0.0, 1.0], [1.0, 0.5, 0.0], [0.5], [1.0, 2.0], [0.0, 1.0, 0.0]]
GROUPS = torch.tensor([7, 7, 7, 3, 3])
ANCHORS = [["start", "a"], ["start", "b", "a"], ["start"], ["start", None], ["start", "x", "x"]]


def grpo_like(r: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """(r - mean_g) / (std_g unbiased + 1e-6); a group of one gets r."""
    out = torch.empty_like(r)
    for gid in g.unique():
        sel = g == gid
        x = r[sel]
        out[sel] = x if x.numel() == 1 else (x - x.mean()) / (x.std() + 1e-6)
    return out


def mean_baseline(r: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """r - mean_g r."""
    out = torch.empty_like(r)
    for gid in g.unique():
        sel = g == gid
        out[sel] = r[sel] - r[sel].mean()
    return out


def assert_ragged(actual: list[list[float]], expected: list[list[float]], rel: float = 1e-9):
    assert [len(row) for row in actual] == [len(row) for row in expected]
    for a_row, e_row in zip(actual, expected, strict=True):
        assert a_row == pytest.approx(e_row, rel=rel, abs=1e-9)


# ---------------------------------------------------------------- returns and rewards


def test_episode_returns():
    # 0 + 1, 1 + 0.5 + 0, 0.5, 1 + 2, 0 + 1 + 0
    returns = episode_returns(REWARDS)
    assert returns.dtype == torch.float64
    assert returns.tolist() == [1.0, 1.5, 0.5, 3.0, 1.0]


def test_discounted_returns():
    expected = [[0.5, 1.0], [1.25, 0.5, 0.0], [0.5], [2.0, 2.0], [0.5, 1.0, 0.0]]  # see top
    assert_ragged(discounted_returns(REWARDS, 0.5), expected)
    # gamma = 1: G_0 = R (undiscounted reward-to-go); gamma = 0: G = r
    undiscounted = discounted_returns(REWARDS, 1.0)
    assert [row[0] for row in undiscounted] == episode_returns(REWARDS).tolist()
    assert undiscounted[1] == [1.5, 0.5, 0.0]
    assert_ragged(discounted_returns(REWARDS, 0.0), REWARDS)


def test_gate_turn_rewards_zeroes_intermediate_rewards_of_failed_episodes():
    # threshold 1: outcomes (last rewards) 1, 0, 0.5, 2, 0; episodes 1 and 4 fail -> their
    # intermediate rewards become 0; episode 2 has no intermediate reward; last rewards kept
    gated = gate_turn_rewards(REWARDS, 1.0)
    assert gated == [[0.0, 1.0], [0.0, 0.0, 0.0], [0.5], [1.0, 2.0], [0.0, 0.0, 0.0]]
    # a failed outcome that is itself nonzero is kept: [3, 0.2] with threshold 1 -> [0, 0.2]
    assert gate_turn_rewards([[3.0, 0.2]], 1.0) == [[0.0, 0.2]]
    # every outcome passes -> unchanged
    assert gate_turn_rewards(REWARDS, -1.0) == REWARDS


# ---------------------------------------------------------------- credit rules


def test_broadcast_credit_mean_baseline():
    # R = 1, 1.5, 0.5 (group 7, mean 1) and 3, 1 (group 3, mean 2)
    # A = 0, 0.5, -0.5 and 1, -1, on every turn
    expected = [[0.0, 0.0], [0.5, 0.5, 0.5], [-0.5], [1.0, 1.0], [-1.0, -1.0, -1.0]]
    assert_ragged(broadcast_credit(REWARDS, GROUPS, mean_baseline), expected)


def test_broadcast_credit_grpo_like_and_the_package_grpo():
    # group 7: R = [1, 1.5, 0.5], mean 1, unbiased std sqrt((0 + 0.25 + 0.25) / 2) = 0.5
    #   A = [0, 0.5, -0.5] / (0.5 + 1e-6)
    # group 3: R = [3, 1], mean 2, std sqrt((1 + 1) / 1) = sqrt(2): A = [1, -1] / (sqrt2 + 1e-6)
    s7, s3 = 0.5 + 1e-6, math.sqrt(2) + 1e-6
    expected = [[0.0] * 2, [0.5 / s7] * 3, [-0.5 / s7], [1 / s3] * 2, [-1 / s3] * 3]
    assert_ragged(broadcast_credit(REWARDS, GROUPS, grpo_like), expected)
    assert_ragged(broadcast_credit(REWARDS, GROUPS.tolist(), grpo), expected)  # ids as a list


def test_turn_discounted_credit_mean_baseline():
    # group 7, depth 0: G = [0.5, 1.25, 0.5], mean 0.75 -> [-0.25, 0.5, -0.25]
    #          depth 1: G = [1 (ep 0), 0.5 (ep 1)], mean 0.75 -> [0.25, -0.25]
    #          depth 2: episode 1 alone -> 0
    # group 3, depth 0: G = [2, 0.5], mean 1.25 -> [0.75, -0.75]
    #          depth 1: G = [2, 1], mean 1.5 -> [0.5, -0.5]
    #          depth 2: episode 4 alone -> 0
    expected = [[-0.25, 0.25], [0.5, -0.25, 0.0], [-0.25], [0.75, 0.5], [-0.75, -0.5, 0.0]]
    assert_ragged(turn_discounted_credit(REWARDS, GROUPS, mean_baseline, 0.5), expected)


def test_turn_discounted_credit_grpo_like():
    # group 7, depth 0: G = [0.5, 1.25, 0.5], deviations [-0.25, 0.5, -0.25],
    #   unbiased var (0.0625 + 0.25 + 0.0625) / 2 = 0.1875, std = sqrt(0.1875)
    # every (group, depth) set of two distinct values gives +-d / (sqrt(2 d^2) + 1e-6) ~ +-1/sqrt2
    s = math.sqrt(0.1875) + 1e-6
    pair = [0.25 / (math.sqrt(0.125) + 1e-6), 0.75 / (math.sqrt(1.125) + 1e-6)]
    one = 0.5 / (math.sqrt(0.5) + 1e-6)  # group 3 depth 1: G = [2, 1], deviations +-0.5
    expected = [
        [-0.25 / s, pair[0]],
        [0.5 / s, -pair[0], 0.0],
        [-0.25 / s],
        [pair[1], one],
        [-pair[1], -one, 0.0],
    ]
    assert_ragged(turn_discounted_credit(REWARDS, GROUPS, grpo_like, 0.5), expected)


def test_gigpo_credit_mean_baseline():
    # A^E (mean baseline over R, as broadcast): 0, 0.5, -0.5, 1, -1
    # step groups (key (group, anchor)), G with gamma 0.5:
    #   (7, start): ep0 0.5, ep1 1.25, ep2 0.5, mean 0.75 -> -0.25, 0.5, -0.25
    #   (7, a): ep0 turn 1 G = 1, ep1 turn 2 G = 0, mean 0.5 -> 0.5, -0.5
    #   (7, b): ep1 turn 1 alone -> 0
    #   (3, start): ep3 2, ep4 0.5, mean 1.25 -> 0.75, -0.75
    #   (3, None): ep3 turn 1, no anchor -> 0
    #   (3, x): ep4 turns 1 and 2 (the same episode back in state x): G = 1, 0 -> 0.5, -0.5
    # A = A^E + 2 A^S:
    #   ep0: [0 - 0.5, 0 + 1] ; ep1: [0.5 + 1, 0.5 + 0, 0.5 - 1] ; ep2: [-0.5 - 0.5]
    #   ep3: [1 + 1.5, 1 + 0] ; ep4: [-1 - 1.5, -1 + 1, -1 - 1]
    expected = [[-0.5, 1.0], [1.5, 0.5, -0.5], [-1.0], [2.5, 1.0], [-2.5, 0.0, -2.0]]
    got = gigpo_credit(REWARDS, ANCHORS, GROUPS, mean_baseline, gamma=0.5, weight=2.0)
    assert_ragged(got, expected)


def test_gigpo_step_groups_of_one_and_no_anchor_give_episode_advantage():
    # every anchor distinct or None: A^S = 0 everywhere, so A = A^E = broadcast
    anchors = [[None, 1], [2, 3, 4], [5], [6, None], [7, 8, 9]]
    got = gigpo_credit(REWARDS, anchors, GROUPS, grpo_like, gamma=0.5, weight=3.0)
    assert_ragged(got, broadcast_credit(REWARDS, GROUPS, grpo_like))
    # the same anchor in two groups is two step groups: group 7 and group 3 each get one "s"
    got = gigpo_credit([[1.0], [0.0]], [["s"], ["s"]], torch.tensor([0, 1]), mean_baseline, 1, 1)
    assert got == [[0.0], [0.0]]  # groups of one: mean baseline 0, step groups of one: 0


def test_singleton_groups_give_zero_turn_advantage():
    # group 5 has one episode: nothing to compare its turns with -> 0 on every turn, while
    # broadcast keeps the estimator's group-of-one convention (grpo_like: A = R = 3)
    rewards = [[1.0, 2.0], [0.0], [1.0]]
    groups = torch.tensor([5, 9, 9])
    assert turn_discounted_credit(rewards, groups, grpo_like, 1.0)[0] == [0.0, 0.0]
    assert broadcast_credit(rewards, groups, grpo_like)[0] == [3.0, 3.0]
    # gigpo on the singleton: A^S = 0 (step group of one), A = A^E = 3
    anchors = [["s", "t"], ["s"], ["s"]]
    assert gigpo_credit(rewards, anchors, groups, grpo_like, 1.0, 1.0)[0] == [3.0, 3.0]


def test_gated_credit_zeroes_failed_intermediate_rewards():
    # gate 1: gated rewards [[0, 1], [0, 0, 0], [0.5], [1, 2], [0, 0, 0]], gamma 1:
    #   G = [1, 1], [0, 0, 0], [0.5], [3, 2], [0, 0, 0]
    # group 7: depth 0 [1, 0, 0.5], mean 0.5 -> [0.5, -0.5, 0]; depth 1 [1, 0] -> [0.5, -0.5];
    #   depth 2 alone -> 0
    # group 3: depth 0 [3, 0], mean 1.5 -> [1.5, -1.5]; depth 1 [2, 0] -> [1, -1]; depth 2 -> 0
    expected = [[0.5, 0.5], [-0.5, -0.5, 0.0], [0.0], [1.5, 1.0], [-1.5, -1.0, 0.0]]
    got = assign_credit("gated", REWARDS, None, GROUPS, mean_baseline, gamma=1.0, gate=1.0)
    assert_ragged(got, expected)
    # ungated (every outcome passes), gated is turn_discounted
    ungated = assign_credit("gated", REWARDS, None, GROUPS, grpo_like, gamma=0.5, gate=-1.0)
    assert_ragged(ungated, turn_discounted_credit(REWARDS, GROUPS, grpo_like, 0.5))


def test_information_gain_rewards_add_each_turns_gain_and_keep_the_outcome():
    """P = [0.1, 0.4, 0.3]: turn 0 gained 0.3, turn 1 lost 0.1, the last turn keeps its
    outcome 1; the environment's intermediate 0.5 is kept beside the gain 0.4."""
    got = information_gain_rewards(
        [[0.0, 0.0, 1.0], [0.5, 0.0], [1.0]], [[0.1, 0.4, 0.3], [0.2, 0.6], [0.9]]
    )
    assert_ragged(got, [[0.3, -0.1, 1.0], [0.9, 0.0], [1.0]])
    with pytest.raises(ValueError, match=r"answer_probs\[0\] must hold 3"):
        information_gain_rewards([[0.0, 0.0, 1.0]], [[0.1, 0.4]])
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        information_gain_rewards([[0.0, 1.0]], [[0.1, 1.5]])


def test_igpo_credit_normalises_a_groups_turns_together_then_sums_to_the_end():
    # mean baseline over all turns of a group: group 7's six turns [0, 1, 1, 0.5, 0, 0.5]
    # (mean 0.5) -> [-0.5, 0.5], [0.5, 0, -0.5], [0]; group 3's five [1, 2, 0, 1, 0] (mean 0.8)
    # -> [0.2, 1.2], [-0.8, 0.2, -0.8]; then G_k = r~_k + 0.5 G_{k+1}
    expected = [[-0.25, 0.5], [0.375, -0.25, -0.5], [0.0], [0.8, 1.2], [-0.9, -0.2, -0.8]]
    assert_ragged(igpo_credit(REWARDS, GROUPS, mean_baseline, 0.5), expected)
    got = assign_credit("igpo", REWARDS, None, GROUPS, mean_baseline, gamma=0.5)
    assert_ragged(got, expected)
    # an outcome tie (every episode 1) still credits the turn that raised the answer's probability
    tie = information_gain_rewards([[0.0, 1.0], [0.0, 1.0]], [[0.2, 0.6], [0.2, 0.1]])
    advantages = igpo_credit(tie, [0, 0], grpo, 1.0)
    assert advantages[0][0] > 0 > advantages[1][0]
    assert broadcast_credit(tie, [0, 0], grpo) != advantages


@pytest.mark.parametrize("estimator", [grpo_like, mean_baseline, grpo])
def test_one_turn_episodes_every_rule_is_broadcast(estimator):
    # one turn per episode, gamma 1, all anchors equal: the depth-0 sets and the step groups
    # are the episode groups and G_0 = R, so turn_discounted = gated = broadcast and
    # A^S = A^E, gigpo = (1 + weight) * broadcast
    gen = torch.Generator().manual_seed(0)
    rewards = [[float(r)] for r in torch.rand(12, generator=gen)]
    groups = torch.tensor([4, 4, 4, 4, 0, 0, 0, 0, 2, 2, 2, 2])
    anchors = [["s"]] * 12
    base = broadcast_credit(rewards, groups, estimator)
    for name in ("broadcast", "turn_discounted", "gated"):
        got = assign_credit(name, rewards, anchors, groups, estimator, gamma=1.0, gate=0.5)
        assert_ragged(got, base, rel=1e-6)
    assert_ragged(assign_credit("gigpo", rewards, anchors, groups, estimator, weight=0.0), base)
    gigpo = assign_credit("gigpo", rewards, anchors, groups, estimator, weight=0.5)
    assert_ragged(gigpo, [[1.5 * a for a in row] for row in base], rel=1e-6)


def test_assign_credit_dispatches_with_the_given_parameters():
    assert sorted(CREDIT) == ["broadcast", "gated", "gigpo", "igpo", "turn_discounted"]
    assert_ragged(
        assign_credit("turn_discounted", REWARDS, ANCHORS, GROUPS, mean_baseline, gamma=0.5),
        turn_discounted_credit(REWARDS, GROUPS, mean_baseline, 0.5),
    )
    assert_ragged(
        assign_credit("gigpo", REWARDS, ANCHORS, GROUPS, mean_baseline, gamma=0.5, weight=2.0),
        gigpo_credit(REWARDS, ANCHORS, GROUPS, mean_baseline, 0.5, 2.0),
    )
    assert assign_credit("broadcast", [], None, torch.tensor([], dtype=torch.long), grpo) == []


# ---------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    ("rewards", "anchors", "groups", "match"),
    [
        ([[1.0], []], None, [0, 0], r"turn_rewards\[1\] is empty"),
        ([[1.0, float("nan")]], None, [0], r"turn_rewards\[0\]\[1\] = nan is not finite"),
        ([[float("inf")]], None, [0], "not finite"),
        ([["yes"]], None, [0], r"turn_rewards\[0\]\[0\] = 'yes' is not a number"),
        ([[1.0], [2.0]], None, [0], r"group_ids must be 1-D with one id per episode \(2\)"),
        ([[1.0]], None, [0.5], "group_ids must be integers"),
        ([[1.0], [2.0]], [["s"]], [0, 0], "anchors has 1 episodes but turn_rewards has 2"),
        ([[1.0, 2.0]], [["s"]], [0], r"anchors\[0\] has 1 entries but episode 0 has 2 turns"),
        ([[1.0]], [[["s"]]], [0], r"anchors\[0\]\[0\] = \['s'\] is not hashable"),
    ],
)
def test_bad_inputs_are_named(rewards, anchors, groups, match):
    for name in CREDIT:
        if name == "gigpo" and anchors is None:
            anchors_used = [[None] * len(row) for row in rewards]
        else:
            anchors_used = anchors
        with pytest.raises(ValueError, match=match):
            assign_credit(name, rewards, anchors_used, torch.tensor(groups), mean_baseline)


def test_bad_names_and_parameters():
    with pytest.raises(
        ValueError, match="registered: broadcast, gated, gigpo, igpo, turn_discounted"
    ):
        assign_credit("turn", REWARDS, None, GROUPS, grpo)
    with pytest.raises(ValueError, match="'gigpo' needs anchors"):
        assign_credit("gigpo", REWARDS, None, GROUPS, grpo)
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\], got 1.5"):
        assign_credit("turn_discounted", REWARDS, None, GROUPS, grpo, gamma=1.5)
    with pytest.raises(ValueError, match="gate must be finite"):
        assign_credit("gated", REWARDS, None, GROUPS, grpo, gate=float("nan"))
    with pytest.raises(ValueError, match=r"the estimator must return a \[5\] tensor, got \(2,\)"):
        broadcast_credit(REWARDS, GROUPS, lambda r, g: r[:2])


# ---------------------------------------------------------------- onto tokens


def test_token_advantages_runs_are_turns():
    mask = torch.tensor([[1, 1, 0, 0, 1, 0], [0, 1, 1, 1, 0, 0], [1, 0, 1, 1, 0, 1]])
    turns = [[0.3, -0.7], [2.0], [1.0, 2.0, 3.0]]
    out = token_advantages(turns, mask)
    assert out.dtype == torch.float32
    expected = [
        [0.3, 0.3, 0.0, 0.0, -0.7, 0.0],  # turn 0 on the first two tokens, turn 1 on the fifth
        [0.0, 2.0, 2.0, 2.0, 0.0, 0.0],
        [1.0, 0.0, 2.0, 2.0, 0.0, 3.0],  # runs touching both ends
    ]
    assert torch.allclose(out, torch.tensor(expected))
    assert torch.equal(token_advantages(turns, mask.bool()), out)


def test_token_advantages_checks_runs_against_turns():
    mask = torch.tensor([[1, 1, 0, 0, 1, 0], [1, 1, 1, 0, 0, 0]])
    with pytest.raises(ValueError, match="row 1 of action_mask has 1 runs .* episode 1 has 2"):
        token_advantages([[0.3, -0.7], [1.0, 2.0]], mask)
    with pytest.raises(ValueError, match=r"action_mask must be \[N, T\] with N = 3"):
        token_advantages([[0.3, -0.7], [1.0], [1.0]], mask)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_token_advantages_on_cuda():
    mask = torch.tensor([[1, 1, 0, 0, 1, 0]], device="cuda")
    out = token_advantages([[0.3, -0.7]], mask)
    assert out.device.type == "cuda"
    assert out.cpu()[0].tolist() == pytest.approx([0.3, 0.3, 0.0, 0.0, -0.7, 0.0])
