"""Tree advantages: credit for the segments of rollout trees from their leaves' outcome rewards.

A tree rollout samples a prompt's completions as a tree of segments: a first segment starts at
the prompt, each segment's children continue it from its last token, and every leaf segment ends
a full completion (the tokens on the path from a first segment to the leaf), scored by the task
as a flat completion is. Tree sampling is TreeRPO's, BranchGRPO's, TreeRL's and Tree-GRPO's
(agent turns as segments): shared segments are generated once, and every branch point gives a
step-level comparison from outcome rewards alone.

Layout (one batch, any number of prompts, any number of trees per prompt):

- ``parents`` [S]: the parent segment of each segment, -1 for a first segment;
- ``groups`` [S]: the prompt (group) of each segment; a segment's children share it;
- ``leaves`` [L]: the leaf segments (no children), ``rewards`` [L] their completions' rewards.

A tree is a first segment and everything under it. Node values are means over leaves:
V(s) = mean of the rewards of the leaves under s (s included when it is a leaf).

Every estimator returns ``(leaf [L], segment [S])``: the advantage of a token of leaf l's
completion that lies in segment s is ``leaf[l] + segment[s]`` (:func:`path_advantages`). A
leaf-level estimator fills ``leaf`` (every token of a completion gets its completion's value), a
step-level one ``segment`` (a segment's tokens get that segment's value, in every completion
through it). Registered in :data:`TREE_ADVANTAGES`; :func:`tree_advantages` calls one by name.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rlvr.algorithms.advantages import (
    AdvantageInputs,
    AdvantageOutput,
    _group_sums,
    _need,
    grpo,
    register_advantage,
)
from rlvr.registry import Registry

TreeAdvantages = tuple[torch.Tensor, torch.Tensor]
"""(leaf [L], segment [S]) advantages: see the module docstring."""


@dataclass(frozen=True)
class Forest:
    """The segments of a batch's rollout trees (see the module docstring).

    Attributes:
        parents: [S] long, each segment's parent (-1: a first segment, starting at the prompt).
        groups: [S] long, each segment's prompt (group) id.
        leaves: [L] long, the leaf segments, in the order of the rewards.
    """

    parents: torch.Tensor
    groups: torch.Tensor
    leaves: torch.Tensor

    @classmethod
    def of(cls, parents: list[int], groups: list[int]) -> Forest:
        """The forest of ``parents`` and ``groups`` (lists of S ints); its leaves in segment
        order. Raises ValueError on a parent that is not an earlier segment of the same group
        (segments are listed parents first, so the lists form trees)."""
        if len(parents) != len(groups):
            raise ValueError(f"{len(parents)} parents for {len(groups)} groups")
        for s, p in enumerate(parents):
            if p != -1 and not (0 <= p < s and groups[p] == groups[s]):
                raise ValueError(
                    f"segment {s}'s parent {p} is not an earlier segment of its group "
                    f"{groups[s]}: list parents before their children, -1 for a first segment"
                )
        has_child = set(parents)
        leaves = [s for s in range(len(parents)) if s not in has_child]
        long = torch.long
        return cls(
            torch.tensor(parents, dtype=long),
            torch.tensor(groups, dtype=long),
            torch.tensor(leaves, dtype=long),
        )

    @classmethod
    def of_paths(cls, paths: list[list[int]], groups: list[int]) -> tuple[Forest, list[list[int]]]:
        """The forest whose leaves are completions: ``paths`` [L] the segment labels of each
        completion's segments, first segment first (labels unique within a group), ``groups``
        [L] its group. Returns the forest, leaf l being completion l, and each completion's path
        as segment indices. Raises ValueError where a completion ends inside another's path (its
        last segment would not be a leaf) or two completions end in the same segment."""
        index: dict[tuple[int, int], int] = {}
        parents: list[int] = []
        seg_groups: list[int] = []
        out_paths = []
        for path, group in zip(paths, groups, strict=True):
            parent, segs = -1, []
            for label in path:
                s = index.get((group, label))
                if s is None:
                    s = index[(group, label)] = len(parents)
                    parents.append(parent)
                    seg_groups.append(group)
                elif parents[s] != parent:
                    raise ValueError(f"segment {label} of group {group} has two parents")
                segs.append(s)
                parent = s
            out_paths.append(segs)
        leaves = [p[-1] if p else -1 for p in out_paths]
        inner = set(parents)
        if -1 in leaves or len(set(leaves)) < len(leaves) or inner & set(leaves):
            raise ValueError(
                "tree paths: every completion must end in a segment of its own (a leaf)"
            )
        long = torch.long
        forest = cls(
            torch.tensor(parents, dtype=long),
            torch.tensor(seg_groups, dtype=long),
            torch.tensor(leaves, dtype=long),
        )
        return forest, out_paths

    @property
    def num_segments(self) -> int:
        return int(self.parents.numel())

    def roots(self) -> torch.Tensor:
        """[S] the first segment (tree) of every segment."""
        root = torch.arange(self.num_segments)
        for s in range(self.num_segments):  # parents come first: their roots are known
            p = int(self.parents[s])
            if p >= 0:
                root[s] = root[p]
        return root

    def depths(self) -> torch.Tensor:
        """[S] each segment's depth: 1 for a first segment, its parent's + 1 below."""
        depth = torch.ones(self.num_segments, dtype=torch.long)
        for s in range(self.num_segments):  # parents come first
            p = int(self.parents[s])
            if p >= 0:
                depth[s] = depth[p] + 1
        return depth

    def leaves_under(self) -> torch.Tensor:
        """[S, L] bool: leaf l lies under segment s (a leaf lies under itself)."""
        below = torch.zeros(self.num_segments, len(self.leaves), dtype=torch.bool)
        for column, leaf in enumerate(self.leaves.tolist()):
            s = leaf
            while s >= 0:
                below[s, column] = True
                s = int(self.parents[s])
        return below

    def check(self, rewards: torch.Tensor) -> None:
        if rewards.shape != self.leaves.shape:
            raise ValueError(
                f"{tuple(rewards.shape)} rewards for {len(self.leaves)} leaves: one per leaf"
            )


def node_values(forest: Forest, rewards: torch.Tensor) -> torch.Tensor:
    """V(s) [S]: the mean reward of the leaves under each segment (TreeRPO's expected reward of
    a step, estimated by the tree's own samples)."""
    below = forest.leaves_under().to(rewards.dtype)
    return (below @ rewards) / below.sum(-1)


# ---------------------------------------------------------------- the registry


@dataclass(frozen=True)
class TreeEstimator:
    """A registered tree advantage: ``fn(forest, rewards [L], **params) -> (leaf [L], segment
    [S])``, the paper it follows, and whether it is step-level (fills ``segment``)."""

    fn: Callable[..., TreeAdvantages]
    paper: str
    step_level: bool


TREE_ADVANTAGES: Registry[TreeEstimator] = Registry("tree advantage estimator")
"""The tree advantage estimators by name (``leaf_grpo``, ``tree_grpo``, ``treerpo``,
``treerl``, ``branchgrpo``), users' included (:func:`register_tree_advantage`)."""


def register_tree_advantage(
    name: str, paper: str, step_level: bool
) -> Callable[[Callable[..., TreeAdvantages]], Callable[..., TreeAdvantages]]:
    """Decorator: add ``fn(forest, rewards, **params) -> (leaf [L], segment [S])`` as ``name``,
    and as the advantage estimator ``name`` of a run with tree rollouts
    (``algorithm.advantage.name``; :func:`token_advantages` on the batch's ``tree_segments``)."""

    def decorator(fn: Callable[..., TreeAdvantages]) -> Callable[..., TreeAdvantages]:
        TREE_ADVANTAGES.add(name, TreeEstimator(fn, paper, step_level))

        def estimator(inputs: AdvantageInputs, **params: float) -> AdvantageOutput:
            segments = _need(name, inputs, "tree_segments")
            return AdvantageOutput(token_advantages(fn, segments, inputs, **params))

        estimator.__doc__ = fn.__doc__
        estimator.__signature__ = _estimator_signature(fn)  # type: ignore[attr-defined]
        register_advantage(
            name,
            requires=("mask", "tree_segments"),
            token_level=True,
            paper=paper,
            group_relative=True,
        )(estimator)
        return fn

    return decorator


def _estimator_signature(fn: Callable[..., TreeAdvantages]) -> inspect.Signature:
    """``fn``'s signature with ``(inputs)`` for ``(forest, rewards)``: the hyperparameters a
    config may set are checked against it."""
    params = list(inspect.signature(fn).parameters.values())[2:]
    first = inspect.Parameter("inputs", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return inspect.Signature([first, *params])


def token_advantages(
    fn: Callable[..., TreeAdvantages],
    segments: torch.Tensor,
    inputs: AdvantageInputs,
    **params: float,
) -> torch.Tensor:
    """Per-token advantages [N, T] of a tree estimator ``fn`` on a batch: ``segments`` [N, T]
    the segment label of each completion token (unique within its group, -1 on padding), the
    completions the leaves. A token of segment s in completion l gets ``leaf[l] + segment[s]``;
    0 where ``inputs.mask`` is 0."""
    labels = segments.cpu().tolist()
    paths = [list(dict.fromkeys(x for x in row if x >= 0)) for row in labels]
    forest, seg_paths = Forest.of_paths(paths, inputs.group_ids.cpu().tolist())
    leaf, segment = fn(forest, inputs.rewards.detach().float().cpu(), **params)
    out = torch.zeros(segments.shape)
    for i, (row, path, segs) in enumerate(zip(labels, paths, seg_paths, strict=True)):
        value = {label: float(leaf[i] + segment[s]) for label, s in zip(path, segs, strict=True)}
        out[i] = torch.tensor([value.get(x, 0.0) for x in row])
    return out.to(segments.device) * inputs.mask


# ---------------------------------------------------------------- estimators


@register_tree_advantage(
    "leaf_grpo", "DeepSeekMath (Shao et al. 2024), over a tree's leaves", False
)
def leaf_grpo(forest: Forest, rewards: torch.Tensor, eps: float = 1e-6) -> TreeAdvantages:
    """GRPO over all the leaves of a prompt (the flat baseline on tree samples): every token of
    leaf l's completion gets A_l = (r_l - mean r) / (std r + eps) over the prompt's leaves
    (DeepSeekMath's group advantage, :func:`rlvr.algorithms.grpo`)."""
    forest.check(rewards)
    leaf = grpo(rewards, forest.groups[forest.leaves], eps)
    return leaf, torch.zeros(forest.num_segments, dtype=leaf.dtype)


@register_tree_advantage("tree_grpo", "Tree-GRPO (Ji et al. 2025)", False)
def tree_grpo(forest: Forest, rewards: torch.Tensor, eps: float = 1e-6) -> TreeAdvantages:
    """Tree-GRPO's intra- plus inter-tree group advantage (Ji et al. 2025, "Tree Search for LLM
    Agent Reinforcement Learning"; read in AMAP-ML/Tree-GRPO's ``compute_advantage``,
    adv_estimator ``tree``):

        A_l = GRPO(r_l; the leaves of l's tree) + GRPO(r_l; the leaves of l's prompt)

    each term (r - mean) / (std + eps) with the unbiased std (their
    ``compute_grpo_outcome_advantage``, :func:`rlvr.algorithms.grpo`). The intra-tree term is a
    step-level preference between the branches of one tree (the paper's equivalence to
    step-level DPO), the inter-tree term GRPO across the prompt's trees. A tree of one leaf
    (one that ended before its first branch point) has no branches to compare: its intra-tree
    term is 0 (their code, whose trees always branch, would give a group of one its reward,
    favouring completions that end early)."""
    forest.check(rewards)
    trees = forest.roots()[forest.leaves]
    intra = grpo(rewards, trees, eps)
    _, inverse, count, _ = _group_sums(rewards, trees)
    intra = torch.where(count[inverse] > 1, intra, torch.zeros_like(intra))
    inter = grpo(rewards, forest.groups[forest.leaves], eps)
    return intra + inter, torch.zeros(forest.num_segments, dtype=intra.dtype)


@register_tree_advantage("treerpo", "TreeRPO (Yang et al. 2025)", True)
def treerpo(forest: Forest, rewards: torch.Tensor, eps: float = 1e-6) -> TreeAdvantages:
    """TreeRPO's step-level group advantage (Yang et al. 2025, "TreeRPO: Tree Relative Policy
    Optimization"; from the paper's text: its code was not retrievable): node values
    V(s) are the means of the leaf rewards under s; the children of one parent form a
    step-level group (the first segments of a prompt form one too), and each segment's tokens
    get

        A_s = (V(s) - mean_{siblings} V) / (std_{siblings} V + eps)

    with the unbiased std; siblings of equal values get 0, and so does a lone child (its value
    is its parent's: the step decided nothing)."""
    forest.check(rewards)
    values = node_values(forest, rewards)
    # siblings: the same parent, or the same prompt for first segments (parent -1)
    key = torch.where(forest.parents >= 0, forest.parents, -1 - forest.groups)
    segment = grpo(values, key, eps)
    _, inverse, counts, _ = _group_sums(values, key)
    segment = torch.where(counts[inverse] > 1, segment, torch.zeros_like(segment))
    return torch.zeros(len(forest.leaves), dtype=segment.dtype), segment


@register_tree_advantage("treerl", "TreeRL (Hou et al. 2025)", True)
def treerl(forest: Forest, rewards: torch.Tensor) -> TreeAdvantages:
    """TreeRL's global plus local advantage of a segment (Hou et al. 2025, "TreeRL: LLM
    Reinforcement Learning with On-Policy Tree Search"; read in THUDM/TreeRL,
    ``tree_node.py`` / ``parallel_mcts.py`` with state-value rewards and sqrt weighting, every
    leaf selected):

        R^_l = r_l - mean_{l' != l} r_l'          (leave-one-out over the prompt's leaves)
        V(s) = mean_{l under s} R^_l / sqrt(|L(s)|)   (V of the prompt's root = 0)
        A_s = (V(s) - V(parent(s))) + V(s)          (local + global; parent of a first segment:
                                                    the root)

    The paper writes (GA + LA) / sqrt(|L(s)|); the code scales each V by the square root of its
    own leaf count before subtracting, which is what is computed here. A prompt with one leaf
    has no baseline: its R^ is its reward."""
    forest.check(rewards)
    _, inverse, count, total = _group_sums(rewards, forest.groups[forest.leaves])
    n = count[inverse]
    others = (total[inverse] - rewards) / (n - 1).clamp_min(1)
    centred = torch.where(n > 1, rewards - others, rewards)  # R^_l
    below = forest.leaves_under().to(rewards.dtype)
    count = below.sum(-1)
    values = (below @ centred) / count / count.sqrt()  # V(s)
    parent = torch.where(
        forest.parents >= 0, values[forest.parents.clamp_min(0)], torch.zeros_like(values)
    )
    return torch.zeros(len(forest.leaves), dtype=values.dtype), (values - parent) + values


@register_tree_advantage("branchgrpo", "BranchGRPO (Li et al. 2025)", True)
def branchgrpo(
    forest: Forest,
    rewards: torch.Tensor,
    eps: float = 1e-8,
    depth_pruning: tuple[int, ...] = (),
    width_pruning: float = 0.0,
) -> TreeAdvantages:
    """BranchGRPO's depth-wise advantage with its pruning (Li et al. 2025, "BranchGRPO: Stable
    and Efficient GRPO with Structured Branching in Diffusion Models"; read in
    Fredreic1849/BranchGRPO, ``train_branchgrpo_flux.py``: ``compute_node_rewards_from_leaves``,
    ``compute_hierarchical_advantages_by_depth``, the pruning of the training steps; the
    paper's method section was not retrievable). Node values are the mean leaf reward under a
    segment (its default fusion, not the path-probability weighting), normalised among the
    segments at the same depth of the same tree:

        A_s = (V(s) - mean_D V) / (std_D V + eps),  D = the segments of s's tree at s's depth

    with the unbiased std; a depth of one segment, or of std < 1e-6, gets 0. Pruning cuts what
    the update trains, not what was sampled, after the advantages are computed over the whole
    tree: ``depth_pruning`` zeroes the segments at the listed depths (1: the first segments);
    ``width_pruning`` r > 0 keeps, among each prompt's leaf segments (each leaf's last segment,
    N of them; with a fixed schedule those after the last branch point, and the last segment of
    a tree that ended early), the best floor(k/2) and the worst k - floor(k/2) by advantage,
    k = max(2, int(r N)), zeroing the others (the code's mode 2, over one GPU's trees there,
    one prompt's here). A zeroed segment gets no gradient; it still counts in the
    aggregation's token count."""
    forest.check(rewards)
    values = node_values(forest, rewards)
    depth = forest.depths()
    key = forest.roots() * (int(depth.max()) + 1) + depth
    _, inverse, count, total = _group_sums(values, key)
    mean = (total / count)[inverse]
    squares = torch.zeros_like(total).index_add_(0, inverse, (values - mean) ** 2)
    std = (squares / (count - 1).clamp_min(1)).sqrt()[inverse]
    segment = (values - mean) / (std + eps)
    segment = torch.where((count[inverse] > 1) & (std >= 1e-6), segment, torch.zeros_like(segment))
    keep = ~torch.isin(depth, torch.tensor(list(depth_pruning), dtype=torch.long))
    if width_pruning > 0:
        leaf_groups = forest.groups[forest.leaves]
        for group in leaf_groups.unique().tolist():
            finals = forest.leaves[leaf_groups == group]
            k = max(2, int(width_pruning * len(finals)))
            if len(finals) <= k:
                continue
            ranked = finals[torch.sort(-segment[finals], stable=True).indices]
            kept = torch.cat([ranked[: k // 2], ranked[len(ranked) - (k - k // 2) :]])
            keep[finals[~torch.isin(finals, kept)]] = False
    segment = torch.where(keep, segment, torch.zeros_like(segment))
    return torch.zeros(len(forest.leaves), dtype=segment.dtype), segment


def tree_advantages(
    name: str, forest: Forest, rewards: torch.Tensor, **params: float
) -> TreeAdvantages:
    """The tree advantage estimator ``name`` of :data:`TREE_ADVANTAGES` on ``forest``'s leaves'
    ``rewards`` [L]: (leaf [L], segment [S]). Raises ValueError on an unknown name, rewards not
    one per leaf or non-finite rewards."""
    estimator = TREE_ADVANTAGES.get_or_raise(name)
    if not torch.isfinite(rewards).all():
        raise ValueError("tree_advantages: rewards must be finite")
    return estimator.fn(forest, rewards.float(), **params)


def path_advantages(forest: Forest, leaf: torch.Tensor, segment: torch.Tensor) -> list[list[float]]:
    """For each leaf l, the advantage of each segment on its path, first segment first:
    ``leaf[l] + segment[s]`` (the value every token of s gets in l's completion)."""
    out = []
    for column, s in enumerate(forest.leaves.tolist()):
        path = []
        while s >= 0:
            path.append(float(leaf[column] + segment[s]))
            s = int(forest.parents[s])
        out.append(path[::-1])
    return out
