"""What a config means for memory: a :class:`Setup` resolved from it (the device kind, the
dtypes' sizes, the batch and sequence lengths, what the algorithm keeps), which the estimate
reads and the advice varies."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from rlvr import adapters, algorithms, precision
from rlvr.config import Config, ConfigError
from rlvr.trainer.plan.shape import model_config
from rlvr.trainer.plan.units import GiB

DEFAULT_PROMPT_TOKENS = 128
"""Prompt length assumed where ``task.max_prompt_tokens`` gives none (``--prompt-tokens``)."""


@dataclass(frozen=True)
class Setup:
    """What the estimate reads from a config, resolved: the device kind, the dtypes' sizes in
    bytes, what the algorithm keeps. The advice varies it (:func:`dataclasses.replace`).

    Attributes:
        device: ``cpu`` or ``cuda``: where the learner's tensors live.
        learners: N, the learners (the devices a sharded policy is split over).
        rows: samples the engine decodes at once; prompt_rows: their distinct prompts;
            eval_rows: held-out prompts decoded at once (one sample each).
        tokens: prompt and completion tokens of one training micro-batch.
        optimizer_steps: in the run; with one, AdamW's moments appear only at its end.
        backend: ``local`` (the engine beside the learner), ``ray`` (learner actors: a published
            copy each; the engine on the rollout workers) or ``torchrun`` (learner processes;
            rank 0 also holds a whole fp32 copy the engine serves).
        host_shared: the run's processes share this machine's memory (a CPU run on Ray actors
            started here, or torchrun's processes): their rows count too.
        vllm_kv_bytes: ``rollout.vllm.kv_cache_gb``; vllm_budget: else, on CUDA, the device
            memory's ``gpu_memory_utilization`` (weights and KV cache).
    """

    model: str
    device: str
    learners: int
    sharding: bool
    shard_bytes: int
    offload: bool
    lora_rank: int
    lora_targets: tuple[str, ...] | str
    quantize: str | None
    micro_batch: int
    checkpointing: bool
    chunk_tokens: int
    autocast_bytes: int
    rollout_bytes: int
    engine: str
    backend: str
    max_batch: int
    samples: int
    eval_samples: int
    group: int
    prompt_tokens: int
    completion_tokens: int
    shared_prefix: bool
    pairs: bool
    reference: str | None
    teacher: str | None
    value_head: bool
    snapshot: bool
    semi_online: bool
    reference_engine: bool
    optimizer_steps: int
    rollout_workers: int
    host_shared: bool
    vllm_kv_bytes: int | None
    vllm_budget: int | None
    vllm_sleeps: bool

    @property
    def colocated(self) -> bool:
        """The engine is on the most loaded learner's device (rank 0's under torchrun)."""
        return self.backend != "ray"

    @property
    def learner_actors(self) -> bool:
        """The learners are :class:`~rlvr.trainer.backends.ray_actors.LearnerWorker` s, which
        keep a copy of the published weights."""
        return self.backend != "local"

    @property
    def rows(self) -> int:
        return max(1, min(self.max_batch, self.samples))

    @property
    def eval_rows(self) -> int:
        return min(self.max_batch, self.eval_samples)

    @property
    def prompt_rows(self) -> int:
        return max(1, math.ceil(self.rows / max(1, self.group)))

    @property
    def tokens(self) -> tuple[int, int]:
        sequences = self.micro_batch * (2 if self.pairs else 1)
        prompts = sequences
        if self.shared_prefix and not self.pairs:
            prompts = min(sequences, math.ceil(sequences / max(1, self.group)))
        return prompts * self.prompt_tokens, sequences * self.completion_tokens


def setup_of(
    cfg: Config,
    devices: int | None = None,
    prompt_tokens: int | None = None,
    device_memory: int | None = None,
) -> Setup:
    """The :class:`Setup` of ``cfg``; ``devices``: the learners (default
    ``distributed.learners``); ``prompt_tokens``: the prompt length assumed (default
    ``task.max_prompt_tokens``, else :data:`DEFAULT_PROMPT_TOKENS`); ``device_memory``: the
    device's bytes, which vLLM takes a fraction of."""
    try:
        algo = cfg.algorithm.resolve()
    except ValueError as err:
        raise ConfigError(f"algorithm: {err}") from None
    lora = cfg.model.lora
    rank, targets = _lora_settings(cfg)
    device = device_kind(cfg.train.device)
    config = model_config(cfg.model.name)
    quantize = lora.quantize if lora is not None else None
    rollout_bytes = 4 if quantize else _dtype_bytes(cfg.rollout.dtype, device, config, "rollout")
    backend = cfg.distributed.backend
    reference = None
    if algorithms.needs_reference(algo):
        reference = "copy" if lora is None else "adapter"
        if lora is not None and lora.path is None and not algo.reference.reset_every:
            reference = "disabled"
    vllm = cfg.rollout.vllm
    evaluates = cfg.eval.before or cfg.eval.after or cfg.eval.every > 0
    tree = cfg.rollout.tree  # tree rollouts: a group is its trees' leaves, at most
    leaves = tree.branching_rule().max_leaves if tree is not None else 1
    return Setup(
        model=cfg.model.name,
        device=device,
        learners=devices or cfg.distributed.learners,
        sharding=cfg.train.sharding == "fsdp",
        shard_bytes=2 if cfg.train.shard_param_dtype == "bf16" else 4,
        offload=cfg.train.shard_offload,
        lora_rank=rank,
        lora_targets=targets,
        quantize=quantize,
        micro_batch=cfg.train.micro_batch_size,
        checkpointing=cfg.train.gradient_checkpointing,
        chunk_tokens=cfg.train.logprob_chunk_tokens,
        autocast_bytes=_dtype_bytes(cfg.train.autocast, device, config, "train"),
        rollout_bytes=rollout_bytes,
        engine=cfg.rollout.engine,
        backend=backend,
        max_batch=cfg.rollout.max_batch,
        samples=cfg.rollout.prompts_per_step * cfg.rollout.group_size * leaves,
        eval_samples=cfg.eval.n_prompts if evaluates else 0,
        group=cfg.rollout.group_size * leaves,
        prompt_tokens=prompt_tokens or cfg.task.max_prompt_tokens or DEFAULT_PROMPT_TOKENS,
        completion_tokens=cfg.max_completion_tokens,
        shared_prefix=cfg.train.shared_prefix and algo.objective.samples != "data",
        pairs=algorithms.OBJECTIVES[algo.objective.name].kind == "pairs",
        reference=reference,
        teacher=cfg.model.teacher if algorithms.needs_teacher(algo) else None,
        value_head=algo.advantage.name == "gae",
        snapshot=cfg.logging.update_sparsity,
        semi_online=algo.objective.sync_every > 1,
        reference_engine=algorithms.plays_reference(algo.advantage.name),
        optimizer_steps=cfg.train.steps * algo.ppo_epochs * algo.minibatches,
        rollout_workers=cfg.distributed.rollout_workers if backend == "ray" else 0,
        host_shared=device == "cpu"
        and (backend == "torchrun" or (backend == "ray" and cfg.distributed.address is None)),
        vllm_kv_bytes=None if vllm.kv_cache_gb is None else int(vllm.kv_cache_gb * GiB),
        vllm_budget=int(vllm.gpu_memory_utilization * device_memory)
        if device_memory and device == "cuda"
        else None,
        vllm_sleeps=vllm.sleep_mode and device == "cuda",
    )


def _lora_settings(cfg: Config) -> tuple[int, tuple[str, ...] | str]:
    """``model.lora``'s rank and target layers (a saved adapter's own), or ``(0, "")``."""
    lora = cfg.model.lora
    if lora is None:
        return 0, ""
    rank, targets = lora.rank, lora.target_modules
    if lora.path is not None:
        saved = adapters.read_adapter_config(Path(lora.path)) or {}
        rank, targets = int(saved.get("r", rank)), saved.get("target_modules") or "all-linear"
    return rank, targets if isinstance(targets, str) else tuple(targets)


def device_kind(setting: str) -> str:
    """``train.device`` as ``cuda`` or ``cpu`` (auto: cuda where this machine has one)."""
    if setting.startswith("cuda") or (setting == "auto" and torch.cuda.is_available()):
        return "cuda"
    return "cpu"


def _dtype_bytes(setting: str, device: str, config: object, use: precision.Use) -> int:
    """Bytes per element of a precision setting: ``auto`` as the run resolves it here
    (:mod:`rlvr.precision`; a CUDA device this machine lacks: bf16)."""
    if setting == "auto" and device == "cuda" and not torch.cuda.is_available():
        return 2
    return precision.resolve(setting, device, config, use).itemsize
