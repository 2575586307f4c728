"""Tree advantages (rlvr.algorithms.tree) on a hand-computed forest.

Prompt 0: one tree. Segment 0 (first) has children 1 and 2; segment 1 has children 3 and 4.
Leaves 2, 3, 4 with rewards 1, 1, 0. Prompt 1: two one-segment trees, 5 and 6, rewards 1, 0.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms.tree import (
    TREE_ADVANTAGES,
    Forest,
    node_values,
    path_advantages,
    tree_advantages,
)

PARENTS = [-1, 0, 0, 1, 1, -1, -1]
GROUPS = [0, 0, 0, 0, 0, 1, 1]
REWARDS = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0])
H = math.sqrt(0.5)  # 0.7071: (1 - 0.5) / std of (1, 0)


@pytest.fixture
def forest() -> Forest:
    return Forest.of(PARENTS, GROUPS)


def close(actual: torch.Tensor, expected: list[float]) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected), atol=1e-5, rtol=0)


def test_the_forest_finds_leaves_roots_and_values(forest):
    assert forest.leaves.tolist() == [2, 3, 4, 5, 6]
    assert forest.roots().tolist() == [0, 0, 0, 0, 0, 5, 6]
    # V(0) = mean(1, 1, 0); V(1) = mean(r3, r4) = mean(1, 0)
    close(node_values(forest, REWARDS), [2 / 3, 0.5, 1.0, 1.0, 0.0, 1.0, 0.0])


def test_leaf_grpo_is_grpo_over_a_prompts_leaves(forest):
    leaf, segment = tree_advantages("leaf_grpo", forest, REWARDS)
    # prompt 0: mean 2/3, unbiased std sqrt(1/3); prompt 1: mean 1/2, std sqrt(1/2)
    s = math.sqrt(1 / 3)
    close(leaf, [(1 / 3) / s, (1 / 3) / s, (-2 / 3) / s, H, -H])
    close(segment, [0.0] * 7)


def test_tree_grpo_adds_the_intra_tree_and_the_inter_tree_terms(forest):
    leaf, _ = tree_advantages("tree_grpo", forest, REWARDS)
    s = math.sqrt(1 / 3)
    # prompt 0 is one tree: intra = inter; prompt 1's trees are single leaves: no branches to
    # compare, intra = 0
    close(leaf, [2 * (1 / 3) / s, 2 * (1 / 3) / s, 2 * (-2 / 3) / s, H, -H])


def test_treerpo_compares_siblings_values(forest):
    leaf, segment = tree_advantages("treerpo", forest, REWARDS)
    close(leaf, [0.0] * 5)
    # {0}: a lone first segment, 0; {1, 2}: V 0.5, 1; {3, 4}: V 1, 0; {5, 6}: V 1, 0
    close(segment, [0.0, -H, H, H, -H, H, -H])
    paths = path_advantages(forest, leaf, segment)
    expected = [[0, H], [0, -H, H], [0, -H, -H], [H], [-H]]
    assert [len(p) for p in paths] == [len(p) for p in expected]
    for path, want in zip(paths, expected, strict=True):
        assert path == pytest.approx(want, abs=1e-5)


def test_treerl_adds_the_local_and_the_global_value(forest):
    _, segment = tree_advantages("treerl", forest, REWARDS)
    # leave-one-out R^: prompt 0 (0.5, 0.5, -1), prompt 1 (1, -1)
    # V = mean R^ below / sqrt(count): V0 = 0, V1 = -0.25 / sqrt 2, V2 = 0.5, V3 = 0.5,
    # V4 = -1, V5 = 1, V6 = -1; A = (V - V(parent)) + V, V(root) = 0
    v1 = -0.25 / math.sqrt(2)
    close(segment, [0.0, 2 * v1, 1.0, 0.5 - v1 + 0.5, -1 - v1 - 1, 2.0, -2.0])


def test_equal_rewards_give_no_advantage(forest):
    ones = torch.ones(5)
    for name in ("tree_grpo", "treerpo"):
        leaf, segment = tree_advantages(name, forest, ones)
        prompt0 = [0, 1, 2]  # prompt 1's single-leaf trees keep their reward in tree_grpo
        assert leaf[prompt0].abs().max() < 1e-6 and segment[:5].abs().max() < 1e-6


def test_the_registry_and_its_errors(forest):
    assert {"leaf_grpo", "tree_grpo", "treerpo", "treerl"} <= set(TREE_ADVANTAGES)
    assert TREE_ADVANTAGES["treerpo"].step_level and not TREE_ADVANTAGES["tree_grpo"].step_level
    with pytest.raises(ValueError, match="one per leaf"):
        tree_advantages("treerpo", forest, torch.ones(4))
    with pytest.raises(ValueError, match="finite"):
        tree_advantages("treerpo", forest, torch.tensor([1.0, math.nan, 0, 1, 0]))
    with pytest.raises(Exception, match="treerpo"):  # the unknown-name error lists the names
        tree_advantages("tree_rpo", forest, REWARDS)
    with pytest.raises(ValueError, match="earlier segment"):
        Forest.of([-1, 2, 0], [0, 0, 0])
    with pytest.raises(ValueError, match="earlier segment"):
        Forest.of([-1, 0], [0, 1])  # a child in another prompt


def test_branchgrpo_normalises_values_per_depth_of_a_tree_and_prunes(forest):
    leaf, segment = tree_advantages("branchgrpo", forest, REWARDS)
    # depths: 0 -> 1; 1, 2 -> 2 (values .5, 1); 3, 4 -> 3 (values 1, 0); 5 and 6 are alone at
    # depth 1 of their trees: 0. Two values at a depth are +-(1/2 d)/(d/sqrt 2) = +-0.7071
    close(segment, [0.0, -H, H, H, -H, 0.0, 0.0])
    close(leaf, [0.0] * 5)
    _, pruned = tree_advantages("branchgrpo", forest, REWARDS, depth_pruning=(2,))
    close(pruned, [0.0, 0.0, 0.0, H, -H, 0.0, 0.0])
    # width 0.5: prompt 0's 3 leaf segments (2: H, 3: H, 4: -H) keep k = 2, the best (2, the
    # first of the tie) and the worst (4); prompt 1's 2 keep both
    _, pruned = tree_advantages("branchgrpo", forest, REWARDS, width_pruning=0.5)
    close(pruned, [0.0, -H, H, 0.0, -H, 0.0, 0.0])
