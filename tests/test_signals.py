"""Signals produced on demand (rlvr.trainer.signals): a producer runs only when the estimator
requires its input, and a plug-in adds a signal-needing estimator with no edit to rlvr: one
producer and one estimator (here, both in this file)."""

from __future__ import annotations

import pytest
import torch
from test_trainer import tiny_config

from rlvr.algorithms import ADVANTAGES, AdvantageInputs, AdvantageOutput, grpo, register_advantage
from rlvr.config import ConfigError, build_config
from rlvr.trainer import train
from rlvr.trainer.signals import SIGNALS, Draw, needed, register_signal


def test_each_built_in_estimator_needs_the_signals_it_requires():
    assert needed("grpo") == [] and needed("gdpo") == []  # reward terms come with the scores
    assert needed("remax") == ["greedy_rewards"]
    assert needed("aapo") == ["reference_rewards"]
    assert needed("spo") == ["baselines"]
    assert SIGNALS["baselines"].before_update and not SIGNALS["greedy_rewards"].before_update


def test_a_run_whose_estimator_needs_no_signal_produces_none(tmp_path, monkeypatch):
    """GRPO reads no produced input: ReMax's greedy groups are never played for it."""

    def refuse(draw: Draw) -> torch.Tensor:
        raise AssertionError("produced without being needed")

    for name in SIGNALS:
        monkeypatch.setitem(SIGNALS, name, SIGNALS[name].__class__(refuse))
    train(build_config(tiny_config(tmp_path / "run", steps=1, checkpoint={"every": 0})))


@pytest.fixture
def prompt_length_estimator():
    """A plug-in's signal (each sample's prompt length in characters) and an estimator that
    requires it (GRPO's advantage minus 0.001 x that length), registered for one test; the
    estimator records the inputs it was given."""
    seen: dict[str, list] = {"problems": [], "chars": []}

    @register_signal("prompt_chars")
    def prompt_chars(draw: Draw) -> torch.Tensor:
        seen["problems"].append(draw.problems)
        lengths = torch.tensor([len(p.prompt) for p in draw.problems], dtype=torch.float)
        return lengths[draw.group_ids]

    @register_advantage("length_aware", requires=("prompt_chars",))
    def length_aware(inputs: AdvantageInputs) -> AdvantageOutput:
        chars = inputs["prompt_chars"]
        seen["chars"].append(chars)
        return AdvantageOutput(grpo(inputs.rewards, inputs.group_ids) - 0.001 * chars)

    yield seen
    SIGNALS.pop("prompt_chars")
    ADVANTAGES.pop("length_aware")


def test_a_plug_in_signal_reaches_the_estimator_that_requires_it(tmp_path, prompt_length_estimator):
    cfg = tiny_config(tmp_path / "run", steps=1, checkpoint={"every": 0})
    cfg["algorithm"]["advantage"] = "length_aware"
    train(build_config(cfg))
    (problems,), (chars,) = prompt_length_estimator["problems"], prompt_length_estimator["chars"]
    assert len(problems) == 2 and len({p.prompt for p in problems}) == 2
    assert chars.tolist() == [float(len(p.prompt)) for p in problems for _ in range(4)]


def test_an_estimator_requiring_an_input_nobody_produces_stops_before_the_run(tmp_path):
    @register_advantage("needs_nothing_known", requires=("no_such_signal",))
    def estimator(inputs: AdvantageInputs) -> AdvantageOutput:
        return AdvantageOutput(inputs.rewards)

    cfg = tiny_config(tmp_path / "run", steps=1)
    cfg["algorithm"]["advantage"] = "needs_nothing_known"
    try:
        with pytest.raises(ConfigError, match="no_such_signal, which is no input rlvr computes"):
            train(build_config(cfg))
    finally:
        ADVANTAGES.pop("needs_nothing_known")
    assert not (tmp_path / "run").exists()


def _old_batch_state(**extra) -> dict:
    """The attributes of a step's batch as an rlvr before the sample table pickled them (one
    attribute per field)."""
    return dict(
        problems=[], prompt_ids=[[1]], completion_ids=[[2], [3]], sampler_logprobs=[[0.0]] * 2,
        finished=[True, True], texts=["a", "b"], rewards=torch.ones(2),
        group_ids=torch.zeros(2, dtype=torch.long), tokens_per_s=1.0, terms={"r": [1.0, 0.5]},
        term_weights={"r": 1.0}, policy_version=3, action_mask=None, turn_rewards=None,
        anchors=None, transcripts=None, infos=None, teacher_logprobs=None,
        demonstration_ids=None, demonstration_mask=None, reasons=[{"r": "why"}, {}], **extra,
    )  # fmt: skip


@pytest.mark.parametrize(
    "extra",
    [
        {"greedy_rewards": torch.tensor([0.5, 0.5]), "baselines": None, "reference_rewards": None},
        {"signals": {"greedy_rewards": torch.tensor([0.5, 0.5])}},
    ],
    ids=["before signals had names", "before the sample table"],
)
def test_a_batch_pickled_by_an_older_rlvr_loads_as_a_table(extra):
    """A checkpoint's pending batch pickled with one attribute per field (and, older still,
    one per signal) resumes as the same table."""
    import pickle

    from rlvr.trainer.batch import Samples, Trajectories

    assert Trajectories is Samples  # what those pickles name
    restored = Samples.__new__(Samples)
    restored.__setstate__(_old_batch_state(**extra))
    assert set(restored.signals) == {"greedy_rewards"} and restored.policy_version == 3
    assert restored.terms == {"r": [1.0, 0.5]} and restored.term_weights == {"r": 1.0}
    assert restored.reasons(0) == {"r": "why"} and restored.reasons(1) == {}
    assert restored.texts == ["a", "b"] and restored.action_mask is None
    again = pickle.loads(pickle.dumps(restored))
    assert torch.equal(again.signals["greedy_rewards"], torch.tensor([0.5, 0.5]))
    assert again.select([1]).texts == ["b"]
