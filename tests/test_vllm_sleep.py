"""VLLMEngine's colocation on a GPU (sleep mode) as a sequence of vLLM calls, against a recording
stand-in for ``vllm.LLM`` (vLLM cannot sleep on a CPU, and no GPU is needed to check the order):
the KV cache and the weights sleep after every rollout, the weights wake alone for a reload, and
each tag wakes exactly once before the next rollout."""

from __future__ import annotations

import tempfile
from types import SimpleNamespace

import torch

from rlvr.rollout import SamplingParams
from rlvr.rollout.vllm_engine import VLLMEngine


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

    def generate(self, requests: list, params: list, use_tqdm: bool) -> list:
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
    engine._dir = tempfile.TemporaryDirectory()
    return engine


def test_sleep_mode_wakes_each_memory_tag_once_in_the_right_order():
    engine = sleeping_engine()
    policy = torch.nn.Linear(2, 2)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=4, stop_token_ids=(7,))
    out = engine.generate([[1, 2]], 2, sampling, torch.Generator().manual_seed(0))
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
