"""The measured precision choice (issue "fast by default"): ``auto`` decides from timings, not
CPU flags; the decision rule on fake timings, the cache (hit, key, corrupt file), the shapes
read from a model config, and the choice shown in a run's log and recorded in its directory."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest
import torch
from test_trainer import tiny_config

from rlvr import precision
from rlvr.config import build_config, load_config
from rlvr.precision import BF16_MARGIN, Choice, Shapes, Timings, decide


def timings(train: float, rollout: float) -> Timings:
    """Timings where bf16 runs ``train`` / ``rollout`` times as fast as fp32."""
    return Timings(
        train_fp32=1.0, train_bf16=1.0 / train, rollout_fp32=1.0, rollout_bf16=1 / rollout
    )


def test_bf16_is_chosen_only_where_it_measured_faster_by_the_margin():
    assert decide(timings(0.6, 0.8)) == (torch.float32, torch.float32)  # emulated bf16
    assert decide(timings(1.9, 1.5)) == (torch.bfloat16, torch.bfloat16)  # AMX-like
    assert decide(timings(1.9, 0.9)) == (torch.float32, torch.bfloat16)  # sides decide alone
    assert decide(timings(1.05, 1.05)) == (torch.float32, torch.float32)  # not worth precision
    assert decide(timings(BF16_MARGIN, BF16_MARGIN)) == (torch.bfloat16, torch.bfloat16)
    assert decide(timings(1.05, 1.05), margin=1.0) == (torch.bfloat16, torch.bfloat16)


def test_the_probe_reads_the_models_shapes():
    config = SimpleNamespace(hidden_size=64, intermediate_size=128, num_attention_heads=4)
    shapes = Shapes.of(config)
    assert (shapes.hidden, shapes.intermediate, shapes.heads) == (64, 128, 4)
    assert shapes.train_tokens == 512  # small layers: a micro-batch's 512 tokens
    # Qwen2.5-0.5B's layer: 4 * 896^2 + 3 * 896 * 4864 = 16.3M parameters, so 1.5e10 FLOPs
    # are 1.5e10 / (6 * 16.3M) = 153 tokens, in blocks of 4
    qwen = Shapes.of(SimpleNamespace(hidden_size=896, intermediate_size=4864))
    assert qwen.train_tokens == 152
    wide = Shapes.of(SimpleNamespace(hidden_size=4096, intermediate_size=14336))
    assert wide.heads == 64 and wide.train_tokens == 64  # 10 tokens by the budget: the floor
    assert Shapes.of(None) == Shapes()


def test_measure_times_both_precisions_at_the_shapes():
    t = precision.measure(Shapes(hidden=32, intermediate=64, heads=2, train_tokens=16), repeats=1)
    assert all(v > 0 for v in (t.train_fp32, t.train_bf16, t.rollout_fp32, t.rollout_bf16))
    assert t.speedup("train") == pytest.approx(t.train_fp32 / t.train_bf16)


def test_the_measurement_is_cached_per_machine_and_shapes(tmp_path, monkeypatch):
    calls = []

    def fake_measure(shapes: Shapes, repeats: int = 3) -> Timings:
        calls.append(shapes)
        return timings(0.5, 2.0)

    monkeypatch.setattr(precision, "measure", fake_measure)
    first = precision.cpu_choice(Shapes(), tmp_path)
    assert (first.source, first.rollout, first.train) == ("measured", torch.bfloat16, torch.float32)
    again = precision.cpu_choice(Shapes(), tmp_path)
    assert again.source == "cached" and again.timings == first.timings and len(calls) == 1
    stored = json.loads(open(first.cache_file).read())
    assert stored["key"]["torch"] == torch.__version__ and stored["key"]["threads"] >= 1
    assert "cpu" in stored["key"] and "flags" in stored["key"]
    precision.cpu_choice(Shapes(hidden=64, heads=4), tmp_path)  # other shapes: measured
    assert len(calls) == 2
    monkeypatch.setattr(torch, "get_num_threads", lambda: 97)  # another thread count
    precision.cpu_choice(Shapes(), tmp_path)
    assert len(calls) == 3


def test_a_corrupt_or_foreign_cache_file_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "measure", lambda shapes, repeats=3: timings(2.0, 2.0))
    choice = precision.cpu_choice(Shapes(), tmp_path)
    with open(choice.cache_file, "w") as f:
        f.write("{not json")
    assert precision.cpu_choice(Shapes(), tmp_path).source == "measured"
    stored = json.loads(open(choice.cache_file).read())
    stored["key"]["cpu"] = "another CPU"
    with open(choice.cache_file, "w") as f:
        json.dump(stored, f)
    assert precision.cpu_choice(Shapes(), tmp_path).source == "measured"


def test_an_unwritable_cache_only_costs_the_shortcut(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(precision, "measure", lambda shapes, repeats=3: timings(2.0, 2.0))
    blocker = tmp_path / "file"
    blocker.write_text("")
    with caplog.at_level(logging.WARNING):
        choice = precision.cpu_choice(Shapes(), blocker)  # its "precision" dir cannot be made
    assert choice.rollout == torch.bfloat16 and "could not cache" in caplog.text


def test_cuda_keeps_bf16_where_supported_without_measuring(monkeypatch):
    monkeypatch.setattr(precision, "measure", lambda *a, **k: pytest.fail("measured on CUDA"))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert precision.choose("cuda").dtype("train") == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert precision.choose("cuda").dtype("rollout") == torch.float32


def test_explicit_settings_are_kept():
    assert precision.resolve("bf16", "cpu", None, "train") == torch.bfloat16
    assert precision.resolve("fp32", "cpu", None, "rollout") == torch.float32


def test_the_choice_describes_itself():
    choice = Choice(torch.float32, torch.bfloat16, "measured", timings(1.5, 0.5), "/c/x.json")
    line = choice.describe()
    assert line.startswith("auto precision: rollout fp32, train bf16 (measured on this machine")
    assert "1.50x" in line and "0.50x" in line
    record = choice.record()
    assert record["rollout.dtype"] == "fp32" and record["train.autocast"] == "bf16"
    assert record["timings_s"]["train_fp32"] == 1.0
    # a run that sets one side: that side is its setting, named as set
    mixed = choice.applied("auto", "fp32")
    assert (mixed.rollout, mixed.train) == (torch.float32, torch.float32)
    assert mixed.describe().startswith("auto precision: rollout fp32, train fp32 (set) (measured")
    assert mixed.record()["train.autocast"] == "fp32"


def test_a_run_shows_and_records_its_choice(tmp_path, monkeypatch, capsys):
    from rlvr.trainer import train

    fake = Choice(torch.float32, torch.float32, "measured", timings(0.5, 0.5), "/c/x.json")
    monkeypatch.setattr(precision, "_cpu_choice_once", lambda shapes: fake)
    cfg = build_config(
        tiny_config(
            tmp_path / "run", steps=1, train={"autocast": "auto"}, rollout={"dtype": "auto"}
        )
    )
    train(cfg)
    assert "auto precision: rollout fp32, train fp32 (measured" in capsys.readouterr().err
    record = json.loads((tmp_path / "run" / "precision.json").read_text())
    assert record["rollout.dtype"] == "fp32" and record["source"] == "measured"
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "# auto precision: rollout fp32, train fp32" in saved
    assert load_config(tmp_path / "run" / "config.yaml").rollout.dtype == "auto"
