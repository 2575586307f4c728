"""Tree rollouts: a prompt's completions sampled as trees of segments.

A tree starts at the prompt with one sample; while it decodes, a **branching rule** may end the
current segment of a row and continue it as several children, each a copy of the row's key/value
cache (:meth:`rlvr.rollout.decoder.Decoder.select` forks a row listed more than once), so a
shared segment is generated once. Every leaf is a full completion (the tokens on its path),
scored by the task like a flat one; the segments give step-level credit
(:mod:`rlvr.algorithms.tree`) and the learner runs each shared segment once. Tree sampling is
TreeRPO's (Yang et al. 2025, fixed segments and branch factor), BranchGRPO's (Li et al. 2025,
branching rollouts with pruning), TreeRL's (Hou et al. 2025, EPTree: branching at high-entropy
tokens) and Tree-GRPO's (Ji et al. 2025, agent turns as nodes).

Random streams (the torch engine): the first child of a branch point continues its parent's
stream (at the positions after the parent's) and child j > 0 takes the derived stream
``derive(derive(key, position), j)``, so a tree with branch factor 1 samples exactly the flat
completion of its key, and no two rows draw the same uniform at the same position. (The vLLM
engine seeds each segment's request with a stream of its own: see its ``generate_tree``.)

Branching rules are registered functions (:data:`BRANCHING`, :func:`register_branching`):
``fn(view: BranchView, **params) -> list[int]``, the number of children of each live row at
this position (1: the row goes on as it is).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from rlvr.registry import Registry, check_params
from rlvr.rollout.base import Rollout
from rlvr.rollout.sampling import token_stats


@dataclass(frozen=True)
class BranchView:
    """What a branching rule sees at one decode position, for the B live rows.

    Attributes:
        position: the completion position of the token about to be sampled (0: the first).
        logits: [B, V] the next-token logits of each row.
        segment_tokens: [B] tokens of each row's current segment so far.
        depth: [B] branch points above each row's segment (0: the tree's first segment).
        tree: [B] each row's tree (its index in the call).
        branch_points: branch points each tree has used so far, by tree.
    """

    position: int
    logits: torch.Tensor
    segment_tokens: list[int]
    depth: list[int]
    tree: list[int]
    branch_points: dict[int, int]


@dataclass(frozen=True)
class BranchRule:
    """A registered branching rule: ``fn(view, **params) -> children per row``, the most leaves
    a tree can have under ``params`` (``max_leaves(**params)``: the engine decodes as many trees
    at once as ``max_batch`` holds), the most tokens a tree can generate
    (``max_tokens(length, **params)``, completions of at most ``length`` tokens) and the paper
    it follows."""

    fn: Callable[..., list[int]]
    max_leaves: Callable[..., int]
    paper: str
    max_tokens: Callable[..., int]


BRANCHING: Registry[BranchRule] = Registry("branching rule")
"""The branching rules of tree rollouts by name (``fixed``, ``entropy`` while decoding;
``turns`` at agent turn boundaries), users' included."""


def register_branching(
    name: str,
    max_leaves: Callable[..., int],
    paper: str,
    max_tokens: Callable[..., int] | None = None,
) -> Callable[[Callable[..., list[int]]], Callable[..., list[int]]]:
    """Decorator: add ``fn(view: BranchView, **params) -> list[int]`` as the rule ``name``
    (``max_tokens(length, **params)``: the most tokens a tree generates; by default every leaf
    a whole completion of its own, ``max_leaves * length``)."""

    def most(length: int, **params: float) -> int:
        return int(max_leaves(**params)) * length

    def decorator(fn: Callable[..., list[int]]) -> Callable[..., list[int]]:
        BRANCHING.add(name, BranchRule(fn, max_leaves, paper, max_tokens or most))
        return fn

    return decorator


def _fixed_tokens(
    length: int, branch_factor: int = 2, depth: int = 1, segment_tokens: int = 16
) -> int:
    """A fixed-schedule tree's tokens when every segment runs full: level d < depth has
    branch_factor**d segments of ``segment_tokens`` (while the length lasts), the last level
    branch_factor**depth leaves of the rest."""
    total, used = 0, 0
    for level in range(depth + 1):
        if used >= length:
            break
        size = length - used if level == depth else min(segment_tokens, length - used)
        total += branch_factor**level * size
        used += size
    return total


@register_branching(
    "fixed",
    lambda branch_factor=2, depth=1, segment_tokens=16: branch_factor**depth,
    "TreeRPO (Yang et al. 2025); BranchGRPO (Li et al. 2025)",
    _fixed_tokens,
)
def fixed(
    view: BranchView, branch_factor: int = 2, depth: int = 1, segment_tokens: int = 16
) -> list[int]:
    """A fixed schedule: every segment of fewer than ``depth`` branch points ends after
    ``segment_tokens`` tokens and continues as ``branch_factor`` children, so a tree that runs
    to the end has ``branch_factor ** depth`` leaves (TreeRPO's segments of fixed length and
    branch factor; BranchGRPO's branching schedule)."""
    return [
        branch_factor if n >= segment_tokens and d < depth else 1
        for n, d in zip(view.segment_tokens, view.depth, strict=True)
    ]


@register_branching(
    "entropy",
    lambda branch_factor=2, max_branch_points=4, threshold=1.0, min_segment_tokens=4: (
        1 + max_branch_points * (branch_factor - 1)
    ),
    "TreeRL (Hou et al. 2025), EPTree's entropy-guided forking",
    lambda length, branch_factor=2, max_branch_points=4, threshold=1.0, min_segment_tokens=4: (
        length + max_branch_points * (branch_factor - 1) * max(0, length - min_segment_tokens)
    ),
)
def entropy(
    view: BranchView,
    branch_factor: int = 2,
    max_branch_points: int = 4,
    threshold: float = 1.0,
    min_segment_tokens: int = 4,
) -> list[int]:
    """Branch where the policy is uncertain: a row whose next-token entropy (nats, temperature
    1) exceeds ``threshold`` after at least ``min_segment_tokens`` tokens of its segment
    continues as ``branch_factor`` children, at most ``max_branch_points`` times per tree (the
    highest entropies first when more rows of a tree qualify than it has left). TreeRL's
    EPTree forks at the tokens of highest entropy of complete chains; this rule forks while
    decoding, at the tokens above a threshold (one pass, no re-generation)."""
    values, _ = token_stats(view.logits)
    children = [1] * len(view.tree)
    candidates = [
        b
        for b, (n, h) in enumerate(zip(view.segment_tokens, values.tolist(), strict=True))
        if n >= min_segment_tokens and h > threshold
    ]
    used = dict(view.branch_points)
    for b in sorted(candidates, key=lambda b: -float(values[b])):
        if used.get(view.tree[b], 0) < max_branch_points:
            used[view.tree[b]] = used.get(view.tree[b], 0) + 1
            children[b] = branch_factor
    return children


@register_branching(
    "turns",
    lambda branch_factor=2, depth=1: branch_factor**depth,
    'Tree-GRPO (Ji et al. 2025, "Tree Search for LLM Agent Reinforcement Learning")',
)
def turns(view: BranchView, branch_factor: int = 2, depth: int = 1) -> list[int]:
    """Agent episodes branch at turn boundaries, not while decoding (the episode loop forks
    them: :class:`rlvr.envs.episodes.TurnBranching`): after each of its first ``depth`` turns,
    an episode that goes on continues as ``branch_factor`` episodes."""
    return [1] * len(view.tree)


@dataclass(frozen=True)
class Branching:
    """A branching rule with its parameters, checked: ``Branching.of("fixed", depth=2)``."""

    name: str
    params: dict[str, float | int] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, **params: float | int) -> Branching:
        """Raises ValueError on an unknown rule, a parameter the rule does not take, or a
        branch factor below 1 / a count below 0."""
        check_params(BRANCHING.get_or_raise(name).fn, params, f"branching rule {name!r}", ("view",))
        for key in ("branch_factor", "segment_tokens"):
            if key in params and int(params[key]) < 1:
                raise ValueError(f"branching {key} must be >= 1, got {params[key]}")
        for key in ("depth", "max_branch_points", "min_segment_tokens"):
            if key in params and int(params[key]) < 0:
                raise ValueError(f"branching {key} must be >= 0, got {params[key]}")
        return cls(name, dict(params))

    def settings(self) -> dict[str, float | int]:
        """Every parameter of the rule: the given ones, the others at their defaults."""
        signature = inspect.signature(BRANCHING.get_or_raise(self.name).fn)
        defaults = {
            k: p.default for k, p in signature.parameters.items() if p.default is not p.empty
        }
        return {**defaults, **self.params}

    @property
    def max_leaves(self) -> int:
        """The most leaves one tree can have."""
        return int(BRANCHING.get_or_raise(self.name).max_leaves(**self.params))

    def max_tokens(self, length: int) -> int:
        """The most tokens one tree can generate with completions of at most ``length``."""
        return int(BRANCHING.get_or_raise(self.name).max_tokens(length, **self.params))

    def __call__(self, view: BranchView) -> list[int]:
        """Children of each live row; segments of no tokens never branch."""
        children = BRANCHING.get_or_raise(self.name).fn(view, **self.params)
        return [c if n > 0 else 1 for c, n in zip(children, view.segment_tokens, strict=True)]


@dataclass
class Segments:
    """The segments a decode produced (flat decoding: one per sample, no parents).

    Attributes (S segments): tokens, logprobs, entropy, certainty (lists per segment; the last
    two empty without ``token_stats``), finished [S] (True: ended at a stop; False: truncated or
    branched), parents [S] (-1: a tree's first segment), roots [S] (the tree, i.e. the row of
    the call, each segment descends from), child_index [S] (place among its parent's children).
    """

    tokens: list[list[int]]
    logprobs: list[list[float]]
    finished: list[bool]
    entropy: list[list[float]]
    certainty: list[list[float]]
    parents: list[int]
    roots: list[int]
    child_index: list[int]

    def children(self) -> list[list[int]]:
        """[S] each segment's children in their order."""
        kids: list[list[int]] = [[] for _ in self.parents]
        for s, p in enumerate(self.parents):
            if p >= 0:
                kids[p].append(s)
        for k in kids:
            k.sort(key=lambda s: self.child_index[s])
        return kids


@dataclass
class TreeRollout(Rollout):
    """The leaves of tree rollouts as a :class:`Rollout` (sample i a leaf: its completion is the
    tokens on its path), leaves grouped by prompt and, within a prompt, by tree and depth-first
    in child order.

    Attributes (besides :class:`Rollout`'s; ``n`` is the number of trees per prompt):
        groups: [L] the prompt of each leaf.
        token_segments: [L] per completion token, the label of its segment, unique within the
            leaf's prompt (its trees' segments numbered depth-first), so the leaves of a prompt
            give back its forest: a leaf's path is the sequence of labels on its tokens.
        segment_parents: per prompt, the parent label of each label (-1: a first segment).
    """

    groups: list[int] = field(default_factory=list)
    token_segments: list[list[int]] = field(default_factory=list)
    segment_parents: list[list[int]] = field(default_factory=list)

    @property
    def group_ids(self) -> torch.Tensor:
        return torch.tensor(self.groups, dtype=torch.long)


def tree_rollout(
    prompts: list[list[int]], trees: int, segments: Segments, with_stats: bool, seconds: float
) -> TreeRollout:
    """The :class:`TreeRollout` of ``segments`` decoded from ``len(prompts) * trees`` rows (row
    r a tree of prompt ``r // trees``) in ``seconds``; ``stats`` holds the trees' counts and the
    throughput in generated tokens (a shared segment once) per second."""
    kids = segments.children()
    completions, logprobs, finished, entropy, certainty = [], [], [], [], []
    groups, token_segments = [], []
    segment_parents: list[list[int]] = [[] for _ in prompts]
    firsts = [s for s, p in enumerate(segments.parents) if p < 0]
    firsts.sort(key=lambda s: segments.roots[s])
    for first in firsts:
        prompt = segments.roots[first] // trees
        labels = segment_parents[prompt]
        # depth-first: (segment, parent label, path so far)
        todo: list[tuple[int, int, list[tuple[int, int]]]] = [(first, -1, [])]
        while todo:
            s, parent_label, path = todo.pop()
            label = len(labels)
            labels.append(parent_label)
            path = path + [(s, label)]
            if kids[s]:
                todo += [(c, label, path) for c in reversed(kids[s])]
                continue
            groups.append(prompt)
            completions.append([t for seg, _ in path for t in segments.tokens[seg]])
            logprobs.append([x for seg, _ in path for x in segments.logprobs[seg]])
            token_segments.append([lab for seg, lab in path for _ in segments.tokens[seg]])
            finished.append(segments.finished[s])
            if with_stats:
                entropy.append([x for seg, _ in path for x in segments.entropy[seg]])
                certainty.append([x for seg, _ in path for x in segments.certainty[seg]])
    leaves = len(completions)
    generated = float(sum(len(t) for t in segments.tokens))
    stats = {
        "rollout/seconds": seconds,
        "rollout/tokens_per_s": generated / max(seconds, 1e-9),
        "rollout/generated_tokens": generated,
        "rollout/leaf_tokens": float(sum(len(c) for c in completions)),
        "rollout/leaves_per_prompt": leaves / max(len(prompts), 1),
        "rollout/branch_points": float(sum(1 for k in kids if k)),
    }
    return TreeRollout(
        prompt_ids=prompts,
        completion_ids=completions,
        logprobs=logprobs,
        finished=finished,
        n=trees,
        stats=stats,
        token_entropy=entropy,
        self_certainty=certainty,
        groups=groups,
        token_segments=token_segments,
        segment_parents=segment_parents,
    )
