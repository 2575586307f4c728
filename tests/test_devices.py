"""train.device and what a one-card user expects (issue "the trainer as parts and GPU"): device
resolution, the CUDA branches exercised without a GPU, the out-of-memory message, gradient
checkpointing and torch.compile wiring, and train.device=cpu equal to the default."""

from __future__ import annotations

import json

import pytest
import torch
from test_trainer import step_rows, tiny_config

import rlvr.trainer.collect
import rlvr.trainer.learner
from rlvr.config import build_config
from rlvr.devices import DeviceError, resolve_device
from rlvr.errors import OutOfMemory
from rlvr.precision import auto_dtype
from rlvr.rollout.torch_engine import attention_for
from rlvr.trainer import train
from rlvr.trainer.backends import build_parts


def test_resolve_device(monkeypatch):
    assert resolve_device("auto", cuda_available=False) == torch.device("cpu")
    assert resolve_device("auto", cuda_available=True) == torch.device("cuda")
    assert resolve_device("cpu", cuda_available=True) == torch.device("cpu")
    with pytest.raises(DeviceError, match="no CUDA device is available"):
        resolve_device("cuda", cuda_available=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1", cuda_available=True) == torch.device("cuda:1")
    with pytest.raises(DeviceError, match="has 2 CUDA device"):
        resolve_device("cuda:2", cuda_available=True)


def test_cuda_branches_choose_sdpa_and_bf16(monkeypatch):
    assert attention_for(torch.device("cpu")) == "rlvr_decode"
    assert attention_for(torch.device("cuda", 0)) == "sdpa"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert auto_dtype("cuda") == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert auto_dtype("cuda") == torch.float32


def test_a_missing_gpu_is_a_clear_error_before_anything_loads(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    cfg = build_config(tiny_config(tmp_path / "run", train={"device": "cuda"}))
    with pytest.raises(DeviceError, match="train.device=cuda: no CUDA device"):
        train(cfg)
    assert not (tmp_path / "run").exists()


def test_explicit_cpu_equals_the_default(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("auto is cuda on this machine")
    train(build_config(tiny_config(tmp_path / "auto", steps=2)))
    train(build_config(tiny_config(tmp_path / "cpu", steps=2, train={"device": "cpu"})))
    auto, cpu = step_rows(tmp_path / "auto"), step_rows(tmp_path / "cpu")
    drop = ("time/", "rollout/tokens_per_s")
    for step in (1, 2):
        same = {k: v for k, v in auto[step].items() if not k.startswith(drop)}
        assert same == {k: v for k, v in cpu[step].items() if not k.startswith(drop)}


def test_running_out_of_memory_names_the_knobs(tmp_path, monkeypatch):
    def exhausted(self, data, meanwhile):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.20 GiB")

    monkeypatch.setattr(rlvr.trainer.learner.Learner, "update", exhausted)
    run_dir = tmp_path / "run"
    with pytest.raises(OutOfMemory) as info:
        train(build_config(tiny_config(run_dir, steps=2)))
    message = str(info.value)
    assert "out of memory on cpu while training" in message and "Tried to allocate" in message
    for knob in ("train.micro_batch_size (now 3)", "train.logprob_chunk_tokens", "gradient_che"):
        assert knob in message
    assert f"rlvr train --resume {run_dir}" in message


def test_cpu_allocation_failure_while_sampling_is_reported_too(tmp_path, monkeypatch):
    def exhausted(self, step):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 9 GB")

    monkeypatch.setattr(rlvr.trainer.collect.Collector, "collect", exhausted)
    with pytest.raises(OutOfMemory, match="while sampling.*rollout.max_batch"):
        train(build_config(tiny_config(tmp_path / "run", steps=1)))


def test_gradient_checkpointing_and_compile_are_wired(tmp_path, monkeypatch):
    compiled = []

    def fake_compile(module):
        compiled.append(module)
        return module

    monkeypatch.setattr(torch, "compile", fake_compile)
    cfg = tiny_config(tmp_path / "run", train={"gradient_checkpointing": True, "compile": True})
    parts = build_parts(build_config(cfg))
    policy = parts.learners.policy
    assert getattr(policy, "is_activation_checkpointing", None) or policy.is_gradient_checkpointing
    assert compiled == [parts.learners.policy] and parts.learners.compiled is compiled[0]
    data, _ = parts.collector.collect(1)
    metrics, bad = parts.learners.update(data)
    assert bad is None and "policy/loss" in metrics


def test_the_config_records_the_device(tmp_path):
    run_dir = tmp_path / "run"
    train(build_config(tiny_config(run_dir, steps=1, train={"device": "cpu"})))
    config = (run_dir / "config.yaml").read_text()
    assert "device: cpu" in config
    assert json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])["step"] == 1


def test_chunked_logprobs_in_training_match_the_whole_vocabulary(tmp_path):
    """train.logprob_chunk_tokens reaches the learner: the same step's loss to rounding."""
    rows = {}
    for chunk in (0, 5):
        run_dir = tmp_path / f"chunk{chunk}"
        train(build_config(tiny_config(run_dir, steps=1, train={"logprob_chunk_tokens": chunk})))
        rows[chunk] = step_rows(run_dir)[1]
    assert rows[0]["reward/mean"] == rows[5]["reward/mean"]
    assert rows[5]["policy/loss"] == pytest.approx(rows[0]["policy/loss"], rel=1e-5, abs=1e-7)
