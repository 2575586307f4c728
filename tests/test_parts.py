"""The trainer as parts (rlvr.trainer: collect, batch, learner): each alone, the
batch crossing a process boundary by pickle, and the learner's state moved between learners."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from test_trainer import tiny_config

from rlvr.config import build_config
from rlvr.data import Problem
from rlvr.rewards.combined import RewardBreakdown
from rlvr.trainer.backends import build_parts
from rlvr.trainer.batch import Samples


def _parts(tmp_path, **sections):
    cfg = build_config(tiny_config(tmp_path / "run", **sections))
    return build_parts(cfg)


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _table(problems: int, samples: int, version: int, **columns) -> Samples:
    return Samples(
        problems=[Problem(f"p{i}", "q", "a") for i in range(problems)],
        prompt_ids=[[1, 2]] * problems,
        columns={
            "completion_ids": [[3]] * samples,
            "sampler_logprobs": [[-0.5]] * samples,
            "finished": [True] * samples,
            "texts": ["x"] * samples,
            "group_ids": torch.arange(samples) % problems,
            "breakdown": RewardBreakdown.single("r", [1.0] * samples),
            "rewards": torch.ones(samples),
            **columns,
        },
        info={"tokens_per_s": 10.0, "policy_version": version},
    )


def test_tables_join_with_their_groups_offset_and_every_column():
    merged = Samples.concat([_table(2, 4, 3), _table(1, 2, 2)], policy_version=2)
    assert merged.group_ids.tolist() == [0, 1, 0, 1, 2, 2]
    assert len(merged) == 6 and len(merged.problems) == 3 and merged.policy_version == 2
    assert merged.terms["r"] == [1.0] * 6 and merged.rewards.tolist() == [1.0] * 6


def test_a_column_a_part_adds_is_carried_by_select_and_join_and_never_dropped():
    """A part's column (here a produced signal and a per-token list) goes through select and
    concat with no edit of the table; joining tables with other columns is an error."""
    extra = {"signal/baselines": torch.arange(4.0), "token_scores": [[0.1], [0.2], [0.3], [0.4]]}
    table = _table(2, 4, 0, **extra)
    picked = table.select([3, 0])
    assert picked.signals["baselines"].tolist() == [3.0, 0.0]
    assert picked.columns["token_scores"] == [[0.4], [0.1]] and picked.terms["r"] == [1.0, 1.0]
    assert picked.group_ids.tolist() == [1, 0] and picked.problems == table.problems
    second = table.groups([1])
    assert second.group_ids.tolist() == [0, 0] and second.problems == [table.problems[1]]
    assert second.columns["token_scores"] == [[0.2], [0.4]]
    joined = Samples.concat([table, table])
    assert joined.columns["token_scores"][4:] == extra["token_scores"]
    with pytest.raises(ValueError, match="other columns"):
        Samples.concat([table, _table(2, 4, 0)])
    with pytest.raises(ValueError, match="'texts' has 3 rows"):
        table.with_columns(texts=["a", "b", "c"])


def test_a_batch_crosses_a_process_boundary_and_trains_the_same(tmp_path):
    """The collector's batch, pickled and unpickled, gives a second learner (loaded with the
    first's state) the same update to the bit."""
    parts = _parts(tmp_path)
    data, metrics = parts.collector.collect(1)
    assert len(data) == 2 * 4 and data.policy_version == 0 and "time/reward" in metrics
    assert data.rewards.shape == (8,) and data.group_ids.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    wire = pickle.dumps(data)
    assert len(wire) < 20_000  # plain tensors and lists: cheap to send
    copy_of_data = pickle.loads(wire)

    other = _parts(tmp_path)
    other.learners.load_state_dict(copy.deepcopy(parts.learners.state_dict()))
    other.learners.generator.set_state(parts.learners.generator.get_state())
    first, bad = parts.learners.update(data)
    second, bad_other = other.learners.update(copy_of_data)
    assert bad is None and bad_other is None and first == second
    a, b = _weights(parts.learners.policy), _weights(other.learners.policy)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert parts.learners.version == 1


def test_publishing_gives_the_collector_the_new_weights_and_version(tmp_path):
    parts = _parts(tmp_path, rollout={"dtype": "bf16"})  # the engine holds its own copy
    collector, learner = parts.collector, parts.learners
    engine_model = collector.rollouts.engine.model
    assert engine_model is not learner.policy
    data, _ = collector.collect(1)
    learner.update(data)
    changed = dict(learner.policy.named_parameters())
    served = dict(engine_model.named_parameters())
    assert any(not torch.equal(served[k], p.to(served[k].dtype)) for k, p in changed.items())
    collector.publish(learner.policy, learner.version)
    assert all(torch.equal(served[k], p.to(served[k].dtype)) for k, p in changed.items())
    assert collector.collect(2)[0].policy_version == 1


def test_learner_state_round_trips(tmp_path):
    parts = _parts(tmp_path, algorithm={"preset": "ppo"})  # a value head as well
    learner = parts.learners
    assert set(learner.modules()) == {"value_head"}
    data, _ = parts.collector.collect(1)
    learner.update(data)
    state = copy.deepcopy(learner.state_dict())
    other = _parts(tmp_path, algorithm={"preset": "ppo"}).learners
    other.load_state_dict(state)
    assert other.version == learner.version == 1
    assert other.scheduler.last_epoch == learner.scheduler.last_epoch
    ours, theirs = _weights(learner.value_head), _weights(other.value_head)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_a_collector_and_learner_step_by_hand_equals_the_trainers_step(tmp_path):
    """The parts wired by hand (collect, update) give the trainer's step 1 to the last bit."""
    from safetensors.torch import load_file
    from test_trainer import step_rows

    from rlvr.trainer import train

    run_dir = tmp_path / "trained"
    train(build_config(tiny_config(run_dir, steps=1)))
    torch.manual_seed(0)  # as train() seeds torch before building the parts
    parts = _parts(tmp_path)
    data, sampling_metrics = parts.collector.collect(1)
    metrics, bad = parts.learners.update(data)
    assert bad is None
    logged = step_rows(run_dir)[1]
    assert logged["reward/mean"] == data.rewards.mean().item()
    assert logged["policy/loss"] == metrics["policy/loss"]
    saved = load_file(str(run_dir / "checkpoints" / "step_000001" / "model.safetensors"))
    ours = parts.learners.policy.state_dict()
    assert all(torch.equal(saved[k], ours[k]) for k in saved)
