"""Tree rollouts in the torch engine (rlvr.rollout.tree): the branching rules on hand-made
views, trees whose leaves share their ancestors' tokens and carry the training forward's
log-probs, branch factor 1 = flat sampling, streams independent of batching, stop strings
across segments."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.models import encode_prompt
from rlvr.policy import completion_logprobs, make_batch
from rlvr.rollout import SamplingParams, TorchEngine
from rlvr.rollout.decoder import LlamaDecoder
from rlvr.rollout.streams import group_keys, stream_key
from rlvr.rollout.tree import BRANCHING, Branching, BranchView

PROMPTS = ["What is 2 + 3?", "Compute 17 * 3 and explain."]


def _keys(seed: int, prompts: int, n: int) -> torch.Tensor:
    return group_keys(stream_key(seed), prompts, n)


def _view(segment_tokens, depth, tree, logits=None, used=None):
    b = len(segment_tokens)
    return BranchView(
        position=5,
        logits=torch.zeros(b, 4) if logits is None else logits,
        segment_tokens=segment_tokens,
        depth=depth,
        tree=tree,
        branch_points=used or {},
    )


def test_fixed_schedule_branches_full_segments_above_the_depth():
    rule = Branching.of("fixed", branch_factor=3, depth=2, segment_tokens=4)
    view = _view([4, 3, 5, 4, 0], [0, 0, 1, 2, 0], [0, 0, 1, 1, 2])
    # 4 tokens at depth 0: branch; 3 tokens: not yet; depth 1 at 5: branch; depth 2: the last
    assert rule(view) == [3, 1, 3, 1, 1]
    assert rule.max_leaves == 9
    # 20 tokens: 4 + 3 * 4 + 9 * 12; 6 tokens: 4 + 3 * 2 (the length runs out at level 1)
    assert rule.max_tokens(20) == 4 + 12 + 108 and rule.max_tokens(6) == 10


def test_entropy_rule_branches_the_most_uncertain_rows_within_each_trees_budget():
    # entropies: uniform over 4 = log 4 = 1.386; one-hot-ish ~ 0; two-way = log 2 = 0.693
    uniform, peaked, two = [0.0] * 4, [20.0, 0.0, 0.0, 0.0], [5.0, 5.0, -30.0, -30.0]
    logits = torch.tensor([uniform, two, peaked, uniform, uniform, two])
    rule = Branching.of(
        "entropy", branch_factor=2, max_branch_points=2, threshold=0.5, min_segment_tokens=2
    )
    view = _view([3, 3, 3, 1, 3, 3], [0] * 6, [0, 0, 0, 0, 1, 1], logits, used={1: 1})
    # tree 0: rows 0 (1.39), 1 (0.69) pass the threshold; row 2 is certain, row 3 too short.
    # tree 1 has used 1 of its 2 branch points: its highest-entropy row (4) branches, not 5
    assert rule(view) == [2, 2, 1, 1, 2, 1]
    assert rule.max_leaves == 3
    assert rule.max_tokens(10) == 10 + 2 * 8  # each branch point adds at most 10 - 2 tokens
    assert math.isclose(math.log(4), 1.3862943611198906)


def test_branching_rules_are_checked_and_listed():
    assert {"fixed", "entropy"} <= set(BRANCHING)
    with pytest.raises(ValueError, match="threshold"):
        Branching.of("fixed", threshold=1.0)
    with pytest.raises(ValueError, match="branch_factor must be >= 1"):
        Branching.of("fixed", branch_factor=0)
    with pytest.raises(ValueError, match="unknown branching rule"):
        Branching.of("nope")


@pytest.fixture(params=["lean", "transformers"])
def engine_and_prompts(tiny, request, monkeypatch):
    """The tiny model with the lean decoder and with the transformers-forward fallback."""
    if request.param == "transformers":
        monkeypatch.setattr(LlamaDecoder, "supports", staticmethod(lambda model: False))
    model, tok = tiny
    return model, tok, [encode_prompt(tok, p) for p in PROMPTS]


def test_a_tree_shares_its_segments_and_its_leaves_carry_the_training_logprobs(
    engine_and_prompts,
):
    model, tok, prompts = engine_and_prompts
    engine = TorchEngine(model, tok.pad_token_id)
    params = SamplingParams(temperature=1.0, max_new_tokens=8)
    rule = Branching.of("fixed", branch_factor=2, depth=2, segment_tokens=3)
    tree = engine.generate_tree(prompts, 2, params, rule, _keys(0, 2, 2))
    assert tree.groups == [0] * 8 + [1] * 8  # 2 trees x 4 leaves per prompt
    assert all(len(c) == 8 for c in tree.completion_ids)
    # depth-first labels: 0 -> {1 -> {2, 3}, 4 -> {5, 6}}; the second tree 7..13
    assert tree.segment_parents[0] == [-1, 0, 1, 1, 0, 4, 4, -1, 7, 8, 8, 7, 11, 11]
    assert tree.token_segments[0] == [0, 0, 0, 1, 1, 1, 2, 2]
    assert tree.token_segments[3] == [0, 0, 0, 4, 4, 4, 6, 6]
    assert tree.token_segments[4] == [7, 7, 7, 8, 8, 8, 9, 9]
    for t in range(2):  # leaves share their ancestors' tokens, and branches differ
        leaves = tree.completion_ids[4 * t : 4 * t + 4]
        assert len({tuple(c[:3]) for c in leaves}) == 1
        assert leaves[0][:6] == leaves[1][:6] and leaves[2][:6] == leaves[3][:6]
        assert len({tuple(c) for c in leaves}) == 4
    # per tree 3 + 2 * 3 + 4 * 2 = 17 tokens generated for 32 leaf tokens; 3 branch points
    assert tree.stats["rollout/generated_tokens"] == 4 * 17
    assert tree.stats["rollout/leaf_tokens"] == 16 * 8
    assert tree.stats["rollout/branch_points"] == 4 * 3
    assert tree.stats["rollout/leaves_per_prompt"] == 8
    # every leaf's log-probs are the training forward's (the forked caches are right)
    batch = make_batch(prompts, tree.completion_ids, tok.pad_token_id, tree.groups)
    with torch.no_grad():
        logp, _ = completion_logprobs(model, batch)
    for i, lps in enumerate(tree.logprobs):
        torch.testing.assert_close(logp[i, : len(lps)], torch.tensor(lps), atol=1e-4, rtol=0)


def test_a_tree_with_branch_factor_one_is_the_flat_sample_and_its_first_leaf_too(
    engine_and_prompts,
):
    """The first child keeps its parent's stream: branch factor 1 samples the flat
    completions, and a tree's first leaf is the flat completion of the tree's key."""
    model, tok, prompts = engine_and_prompts
    engine = TorchEngine(model, tok.pad_token_id)
    params = SamplingParams(temperature=1.0, max_new_tokens=8)
    keys = _keys(1, 2, 3)
    flat = engine.generate(prompts, 3, params, keys)
    single = engine.generate_tree(prompts, 3, params, Branching.of("fixed", branch_factor=1), keys)
    assert single.completion_ids == flat.completion_ids and single.logprobs == flat.logprobs
    assert single.groups == flat.group_ids.tolist()
    tree = engine.generate_tree(
        prompts, 3, params, Branching.of("fixed", branch_factor=2, depth=1, segment_tokens=2), keys
    )
    assert tree.completion_ids[0::2] == flat.completion_ids


def test_trees_depend_on_their_streams_not_on_their_batch(engine_and_prompts):
    model, tok, prompts = engine_and_prompts
    params = SamplingParams(temperature=1.0, max_new_tokens=7)
    rule = Branching.of("fixed", branch_factor=2, depth=2, segment_tokens=2)
    keys = _keys(2, 2, 2)
    whole = TorchEngine(model, tok.pad_token_id).generate_tree(prompts, 2, params, rule, keys)
    # max_batch 5 holds one tree of 4 leaves at a time
    apart = TorchEngine(model, tok.pad_token_id, max_batch=5).generate_tree(
        prompts, 2, params, rule, keys
    )
    assert apart.completion_ids == whole.completion_ids
    assert apart.segment_parents == whole.segment_parents
    alone = TorchEngine(model, tok.pad_token_id).generate_tree(
        prompts[1:], 2, params, rule, keys[2:]
    )
    assert alone.completion_ids == whole.completion_ids[8:]


def test_entropy_branching_in_the_engine_spends_each_trees_budget(engine_and_prompts):
    model, tok, prompts = engine_and_prompts
    params = SamplingParams(temperature=1.0, max_new_tokens=10)
    rule = Branching.of(
        "entropy", branch_factor=2, max_branch_points=3, threshold=0.0, min_segment_tokens=2
    )
    tree = TorchEngine(model, tok.pad_token_id).generate_tree(
        prompts, 1, params, rule, _keys(3, 2, 1)
    )
    # a random model is uncertain everywhere: each tree branches 3 times, so 4 leaves
    assert tree.groups == [0] * 4 + [1] * 4
    assert tree.stats["rollout/branch_points"] == 6
    for path in tree.token_segments:  # no segment is shorter than min_segment_tokens
        runs = [path.count(label) for label in dict.fromkeys(path)]
        assert all(r >= 2 for r in runs[:-1])


def test_stop_strings_see_the_tokens_of_earlier_segments(engine_and_prompts):
    model, tok, prompts = engine_and_prompts
    engine = TorchEngine(model, tok.pad_token_id, decode=tok.decode)
    free = SamplingParams(temperature=1.0, max_new_tokens=12)
    keys = _keys(4, 2, 2)
    flat = engine.generate(prompts, 2, free, keys)
    # a stop string made of the last two tokens' text of the first sample, which a tree
    # branching after 1 token sees only across its segments
    stop = tok.decode(flat.completion_ids[0][4:6])
    params = SamplingParams(temperature=1.0, max_new_tokens=12, stop=(stop,))
    stopped = engine.generate(prompts, 2, params, keys)
    rule = Branching.of("fixed", branch_factor=2, depth=1, segment_tokens=5)
    tree = engine.generate_tree(prompts, 2, params, rule, keys)
    assert tree.completion_ids[0] == stopped.completion_ids[0]
    assert tree.finished[0] == stopped.finished[0]
    assert tree.finished[0] and len(tree.completion_ids[0]) <= 6
