"""Tree training (rlvr.policy's tree forward): the prefix-trie layout on a hand-made batch, and
log-probs, entropies, values and gradients equal to the plain forward over the expanded leaves
of trees of 1-3 levels sampled by the engine."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_trainer import COMPARED, step_rows, tiny_config

from rlvr.config import ConfigError, build_config
from rlvr.models import encode_prompt
from rlvr.policy import ValueHead, completion_logprobs, make_batch, trie_rows
from rlvr.rollout import SamplingParams, TorchEngine
from rlvr.rollout.streams import group_keys, stream_key
from rlvr.rollout.tree import Branching
from rlvr.trainer import train


def test_trie_rows_merge_shared_prefixes_per_prompt_and_split_wide_rows():
    # prompt 0 (3 tokens): [5 6 7], [5 6 8], [5 9]; prompt 1 (2 tokens): [5 6], [5 6]
    completions = [[5, 6, 7], [5, 6], [5, 6, 8], [5, 9], [5, 6]]
    rows, nodes = trie_rows([0, 1, 0, 0, 1], [3, 2], completions)
    # prompt 0's trie: 5 -> 6 -> {7, 8}, 5 -> 9: five nodes for 8 tokens
    assert rows[0] == (0, [5, 6, 7, 8, 9], [-1, 0, 1, 1, 0])
    assert rows[1] == (1, [5, 6], [-1, 0])  # identical completions are one path
    assert nodes == [[0, 1, 2], [5, 6], [0, 1, 3], [0, 4], [5, 6]]
    # a capacity of 7 slots: prompt 0's row holds 3 + 4 nodes; [5 9] starts a second row
    rows, nodes = trie_rows([0, 1, 0, 0, 1], [3, 2], completions, capacity=7)
    assert [r[1] for r in rows] == [[5, 6, 7, 8], [5, 9], [5, 6]]
    assert nodes == [[0, 1, 2], [6, 7], [0, 1, 3], [4, 5], [6, 7]]


def _trees(tiny, depth: int):
    """Leaves of 2 trees per prompt of 2 prompts, branch factor 2 at every 3 tokens."""
    model, tok = tiny
    prompts = [encode_prompt(tok, p) for p in ["What is 2 + 3?", "Name a colour."]]
    engine = TorchEngine(model, tok.pad_token_id)
    rule = Branching.of("fixed", branch_factor=2, depth=depth, segment_tokens=3)
    params = SamplingParams(temperature=1.0, max_new_tokens=3 * depth + 2)
    tree = engine.generate_tree(prompts, 2, params, rule, group_keys(stream_key(7), 2, 2))
    return make_batch(prompts, tree.completion_ids, tok.pad_token_id, tree.groups)


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("chunk_tokens", [0, 7])
def test_tree_forward_equals_the_plain_forward_over_the_leaves(tiny, depth, chunk_tokens):
    model, _ = tiny
    batch = _trees(tiny, depth)
    head = ValueHead(model.config.hidden_size)
    torch.nn.init.normal_(head.linear.weight)  # not zero: values that depend on the states
    weights = torch.randn(batch.completion_mask.shape, generator=torch.Generator().manual_seed(0))
    results = []
    for tree in (False, True):
        model.zero_grad()
        head.zero_grad()
        logp, entropy, values = completion_logprobs(
            model,
            batch,
            temperature=0.8,
            entropy_grad=True,
            value_head=head,
            chunk_tokens=chunk_tokens,
            tree=tree,
        )
        ((logp + 0.1 * entropy + 0.01 * values) * weights).sum().backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        results.append((logp.detach(), entropy.detach(), values.detach(), grads))
    (logp, entropy, values, grads), (t_logp, t_entropy, t_values, t_grads) = results
    assert (logp - t_logp).abs().max() <= 1e-6
    assert (entropy - t_entropy).abs().max() <= 1e-5
    assert (values - t_values).abs().max() <= 1e-5
    assert len(grads) == len(t_grads) > 0
    for g, t in zip(grads, t_grads, strict=True):
        assert (g - t).abs().max() <= 1e-5 * max(1.0, g.abs().max().item())


def test_tree_forward_runs_each_shared_segment_once(tiny):
    batch = _trees(tiny, 3)
    lengths = batch.completion_mask.sum(-1).tolist()
    completions = [batch.completion_ids[i, :n].tolist() for i, n in enumerate(lengths)]
    rows, _ = trie_rows(
        batch.prompt_index.tolist(), batch.prompt_mask.sum(-1).tolist(), completions
    )
    # per tree: 3 + 2*3 + 4*3 + 8*2 = 37 nodes for 8 leaves of 11 tokens (88); 2 trees a prompt
    assert [len(tokens) for _, tokens, _ in rows] == [74, 74]
    assert sum(lengths) == 4 * 88


# ---------------------------------------------------------------- tree runs end to end

TREE = {"group_size": 2, "tree": {"branching": "fixed", "depth": 2, "segment_tokens": 3}}
CONSTANT = {"lr_schedule": "constant", "warmup_steps": 0}  # same LR whatever the length


def _tree_config(run_dir, steps, advantage="treerpo", train=None, **sections):
    named = advantage if isinstance(advantage, dict) else {"name": advantage}
    algorithm = {"preset": "grpo", "kl": {"beta": 0.0}, "advantage": named}
    return build_config(
        tiny_config(
            run_dir, steps, rollout=TREE, algorithm=algorithm, train={**CONSTANT, **(train or {})}
        )
    )


@pytest.fixture(scope="module")
def tree_reference(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("tree") / "run"
    train(_tree_config(run_dir, 3))
    return step_rows(run_dir)


def test_a_tree_run_logs_its_trees_and_resumes_exactly(tmp_path, tree_reference):
    rows = tree_reference
    for row in rows.values():  # 2 prompts x 2 trees x 4 leaves of 12 tokens
        assert row["tree/leaves_per_prompt"] == 8 and row["tree/branch_points"] == 6
        assert row["tokens/completions"] == 2 * 8 * 12
        assert row["tokens/generated"] == 4 * (3 + 2 * 3 + 4 * 6)
        # the tree forward trains each segment once (trees that start alike share more)
        assert 0 < row["tokens/trained"] <= row["tokens/generated"] < row["tokens/completions"]
        assert row["policy/grad_norm"] > 0 and row["advantages/abs_mean"] > 0
    run_dir = tmp_path / "run"
    train(_tree_config(run_dir, 2))
    train(_tree_config(run_dir, 3), resume=run_dir)
    resumed = step_rows(run_dir)
    for step in (1, 2, 3):
        for key in (*COMPARED, "tokens/generated", "advantages/abs_mean"):
            assert resumed[step][key] == pytest.approx(rows[step][key], rel=1e-5, abs=1e-7)


def test_the_tree_forward_trains_as_the_plain_forward(tmp_path, tree_reference):
    """train.shared_prefix false: every leaf's whole sequence in the plain forward; the same
    steps to fp32 rounding."""
    flat = tmp_path / "flat"
    train(_tree_config(flat, 3, train={"shared_prefix": False}))
    rows = step_rows(flat)
    for step in (1, 2, 3):
        for key in COMPARED:
            assert rows[step][key] == pytest.approx(tree_reference[step][key], rel=1e-4, abs=1e-6)


@pytest.mark.parametrize(
    "advantage",
    ["tree_grpo", "treerl", "leaf_grpo", "grpo", {"name": "branchgrpo", "width_pruning": 0.5}],
    ids=str,
)
def test_each_tree_estimator_trains_from_the_config(tmp_path, advantage):
    run_dir = tmp_path / "run"
    train(_tree_config(run_dir, 1, advantage))
    row = step_rows(run_dir)[1]
    assert row["policy/grad_norm"] > 0 and row["advantages/abs_mean"] > 0


def test_tree_settings_are_checked_before_a_run():
    def config(**sections):
        return build_config(tiny_config(Path("/tmp/unused"), 1, **sections))

    with pytest.raises(ConfigError, match="set rollout.tree"):
        config(algorithm={"advantage": {"name": "treerpo"}})
    with pytest.raises(ConfigError, match="vLLM engine does not give"):
        config(rollout={"engine": "vllm", "tree": {"branching": "entropy"}})
    with pytest.raises(ConfigError, match="tree rollouts sample the policy"):
        config(rollout={"tree": {"branching": "fixed"}}, algorithm={"preset": "sft"})
    with pytest.raises(ConfigError, match="unknown parameter"):
        config(rollout={"tree": {"branching": "entropy", "depth": 2}})
    with pytest.raises(ConfigError, match="unknown branching rule"):
        config(rollout={"tree": {"branching": "mcts"}})
    with pytest.raises(ConfigError, match="group_filter count a group's samples"):
        config(
            rollout={"tree": {"branching": "fixed"}},
            algorithm={"stages": [{"name": "group_filter"}]},
        )
    with pytest.raises(ConfigError, match="needs env.name"):
        config(rollout={"tree": {"branching": "turns"}})
    with pytest.raises(ConfigError, match="agent episodes .env.name. branch at turn boundaries"):
        config(
            rollout={"tree": {"branching": "fixed"}},
            env={"name": "envs_for_tests:CountdownEnv"},
            reward={"function": None},
        )
    # one tree of 4 leaves is a group GRPO can compare: group_size 1 is allowed
    config(rollout={"group_size": 1, "tree": {"branching": "fixed", "depth": 2}})


def test_a_tree_run_states_its_token_budget():
    from rlvr.trainer.run import tree_budget

    line = tree_budget(_tree_config(Path("/tmp/unused"), 1))
    # 2 trees x (3 + 2 * 3 + 4 * 6) tokens of 12-token leaves; flat: 8 x 12
    assert "at most 8 leaves and 66 generated tokens per prompt" in line
    assert "flat sampling of 8 completions: 96" in line
