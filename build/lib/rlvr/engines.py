"""The rollout engine a config asks for (``rollout.engine``): rlvr's torch engine or vLLM."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rlvr.config import Config
from rlvr.rollout import RolloutEngine, TorchEngine


def build_engine(
    cfg: Config,
    policy: torch.nn.Module,
    tokenizer: Any,
    dtype: torch.dtype,
    decode: Callable[[list[int]], str],
) -> RolloutEngine:
    """The engine of ``cfg.rollout.engine`` over ``policy`` (on its device), computing in
    ``dtype``; ``decode`` turns token ids into text (stop strings)."""
    if cfg.rollout.engine == "torch":
        return TorchEngine(
            policy,
            tokenizer.pad_token_id,
            dtype=dtype,
            max_batch=cfg.rollout.max_batch,
            decode=decode,
        )
    from rlvr.rollout.vllm_engine import VLLMEngine  # vLLM imports only where it is asked for

    knobs = cfg.rollout.vllm
    return VLLMEngine(
        policy,
        tokenizer,
        dtype,
        seed=cfg.train.seed,
        max_model_len=knobs.max_model_len,
        gpu_memory_utilization=knobs.gpu_memory_utilization,
        kv_cache_gb=knobs.kv_cache_gb,
        enforce_eager=knobs.enforce_eager,
        sleep_mode=knobs.sleep_mode,
        lora_publish=lora_publish(cfg),
    )


VLLM_LORA_PUBLISH = "merged"
"""How a LoRA policy's updates reach vLLM where ``model.lora.publish`` is ``auto``: the way
measured faster (bench/lora.py, docs/lora.md)."""


def lora_publish(cfg: Config) -> str:
    """``model.lora.publish`` with ``auto`` resolved (:data:`VLLM_LORA_PUBLISH`)."""
    lora = cfg.model.lora
    if lora is None or lora.publish == "auto":
        return VLLM_LORA_PUBLISH
    return lora.publish


def close_engine(engine: RolloutEngine) -> None:
    """Free an engine's resources where it holds any (vLLM's KV cache and workers)."""
    close = getattr(engine, "close", None)
    if close is not None:
        close()
