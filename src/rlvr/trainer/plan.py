"""The memory plan: a run's peak memory per device, estimated from its config before any model
loads (``rlvr plan CONFIG``, and the block every run prints at its start; docs/scaling.md, "The
memory plan").

Every size is in bytes. Parameter counts are exact: the model's architecture is built on the
meta device (no weights are read), a LoRA adapter's parameters counted from ``model.lora``'s
rank and layers. The estimate follows what the code keeps where (:mod:`rlvr.trainer.build`):

* resident, on the learner's device for the whole run: the runtime (CPU: the interpreter,
  torch, transformers, the tokenizer: :data:`CPU_RUNTIME`; CUDA: the context,
  :data:`CUDA_RUNTIME`), the policy's fp32 weights (a QLoRA base in 4 or 8 bits), AdamW's two
  fp32 moments of the trained parameters (all, or the adapter's), the reference (a copy in the
  rollout dtype; none for LoRA, which disables its adapter), a teacher, the value head, the
  fp32 snapshot of the initial trained weights (``logging.update_sparsity``; CPU memory), a
  learner actor's published copy (Ray, torchrun), and the colocated engine (``local``; rank 0
  under torchrun, with the whole fp32 policy it serves): its copy of the weights in the rollout
  dtype (none when that is fp32: it shares the policy's) and, on a CPU, the decoder's prepacked
  projections (:mod:`rlvr.rollout.linear`). With ``train.sharding: fsdp`` the weights,
  gradients, moments and reference are 1/N per learner; with ``train.shard_offload`` they are
  in CPU memory instead.
* one phase at a time on top of it, the largest counted: the training step (fp32 gradients,
  the activations of one micro-batch with or without gradient checkpointing, the logits, the
  low-precision copies of the weights autocast keeps for the backward; sharded: the gathered
  root unit and decoder layers with their gradients and communication buffers), the optimizer
  step (gradients and AdamW's temporaries), the rollout (KV cache, decode buffers, and on a
  CPU the projections packed again after an update) and, for a sharded policy, the load (the
  whole fp32 policy and reference before they are sharded, with nothing else yet). On a CPU
  the smaller of training step and rollout counts too (:func:`_carried`).

Completions are taken at their longest (``rollout.max_new_tokens``), prompts at
``task.max_prompt_tokens`` or :data:`DEFAULT_PROMPT_TOKENS`: a bound, which a run whose
completions stop early stays under.

Calibration (2-core AMD EPYC, peak RSS, ``ru_maxrss``): the activation constants
(:data:`LOGIT_BYTES`, :func:`layer_activation_bytes`) are derived per saved tensor of a Llama
decoder layer and checked against the forward+backward of bench/results/
memory-chunked-logprobs-cpu.json; :data:`CPU_HEAP` and counting both phases on a CPU were
fitted to 2-step runs of SmolLM2-135M's shape with random weights (every completion at its
longest; 0.99-1.07 of the measured peaks, with and without checkpointing), of SmolLM2-135M with
LoRA (1.02) and of the tiny model (1.04); bench/results/memory-*.json's rows give 0.96-1.17
(docs/scaling.md, "The memory plan", lists them). CUDA's constants are not calibrated.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from rlvr import adapters, algorithms, precision
from rlvr.config import Config, ConfigError
from rlvr.models import (
    RANDOM_PREFIX,
    ModelSpecError,
    adapter_base,
    resolve,
    shape_config,
)

GiB = 2**30
CPU_RUNTIME = 600 * 2**20
"""Resident memory of a run's process besides its tensors (CPU): the interpreter, torch,
transformers, rlvr and the tokenizer; the measured peak RSS of a run of the tiny model."""
CUDA_RUNTIME = 768 * 2**20
"""What a CUDA device holds besides the tensors: the context, cuBLAS workspaces and the caching
allocator's rounding (not calibrated: no GPU was lent for it)."""
CPU_HEAP = 0.1
"""Fraction added to a CPU phase's activations, logits and KV cache: memory glibc's heap keeps
after they are freed (fitted to the measured runs, see the module docstring)."""
LOGIT_BYTES = {2: 20, 4: 16}
"""Bytes per logit element of the training forward, by the autocast dtype's size: the logits in
that dtype, their fp32 log-softmax and entropy, and the gradients of both (the difference of
the chunked and unchunked rows of bench/results/memory-chunked-logprobs-cpu.json: 19.1)."""
DECODE_BUFFERS = 4
"""fp32 [rows, vocabulary] tensors a decode step keeps at once (logits, probabilities, sampling)."""
DEFAULT_PROMPT_TOKENS = 128
"""Prompt length assumed where ``task.max_prompt_tokens`` gives none (``--prompt-tokens``)."""
CHUNK_ADVICE = 1024
"""``train.logprob_chunk_tokens`` the advice proposes."""
LORA_ADVICE = 16
"""``model.lora.rank`` the advice proposes (all linear layers)."""
QUANTIZED_BYTES = {"4bit": 0.52, "8bit": 1.0}
"""Bytes per linear weight of a QLoRA base: NF4 with double quantisation, or int8."""
LEAN_DECODER = ("llama", "qwen2")
"""Architectures the torch engine decodes with its lean decoder (prepacked on a CPU)."""

_UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kb": 10**3,
    "kib": 2**10,
    "m": 2**20,
    "mb": 10**6,
    "mib": 2**20,
    "g": 2**30,
    "gb": 10**9,
    "gib": 2**30,
    "t": 2**40,
    "tb": 10**12,
    "tib": 2**40,
}


class PlanError(ConfigError):
    """A run whose estimated peak memory does not fit its device: the plan's "does not fit"
    line and the cheapest change that would make it fit."""


def parse_size(text: str) -> int:
    """``"80GB"`` -> bytes. KB/MB/GB/TB are powers of 10, KiB/MiB/GiB/TiB and the bare K/M/G/T
    powers of 2 (``24G`` = 24 GiB); a plain number is bytes. ConfigError for anything else."""
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = found.group(2).lower() if found else None
    if found is None or unit not in _UNITS:
        raise ConfigError(f"a memory size such as 80GB, 512MiB or 24G, got {text!r}")
    return int(float(found.group(1)) * _UNITS[unit])


def size_text(n: float) -> str:
    """Bytes as GiB (MiB below 1 GiB), e.g. ``"5.31 GiB"``."""
    return f"{n / GiB:.2f} GiB" if abs(n) >= GiB else f"{n / 2**20:.0f} MiB"


# ---------------------------------------------------------------- the model's shapes


@dataclass(frozen=True)
class ModelShape:
    """Parameter counts (numbers of elements) and dimensions of a causal LM.

    Attributes:
        params: every parameter, a tied one once.
        linear: the decoder layers' linear weights and biases.
        head: the output layer's weight (counted in ``params`` once when tied to the embeddings).
        layer: the largest decoder layer's parameters.
        largest: the largest single parameter tensor.
        lora: the trained adapter's parameters for ``model.lora`` (0 without).
    """

    architecture: str
    params: int
    linear: int
    head: int
    layer: int
    largest: int
    layers: int
    hidden: int
    intermediate: int
    q_width: int
    kv_width: int
    vocab: int
    lora: int = 0

    @property
    def root(self) -> int:
        """Parameters outside the decoder layers (embeddings, final norm, output layer)."""
        return self.params - self.layer * self.layers


def model_config(spec: str) -> object:
    """The transformers config of a model spec, read without its weights: ``random:`` shapes
    from :data:`rlvr.models.SHAPES`, a ``.gguf`` file's metadata, else the resolved directory's
    (an alias is built or converted once, as a run does; an adapter directory: its base's)."""
    from transformers import AutoConfig

    if spec.startswith(RANDOM_PREFIX):
        return shape_config(spec.removeprefix(RANDOM_PREFIX))
    path = Path(spec).expanduser()
    source = (path.parent, {"gguf_file": path.name}) if spec.endswith(".gguf") else None
    if source is None:
        resolved = resolve(spec)  # its own ModelSpecError for a spec it does not know
        base = adapter_base(resolved)
        if base is not None:
            return model_config(base)
        source = (resolved, {})
    try:
        return AutoConfig.from_pretrained(source[0], **source[1])
    except (OSError, ValueError) as err:
        raise ModelSpecError(f"cannot read the config of model {spec!r}: {err}") from None


@functools.lru_cache(maxsize=32)
def model_shape(
    spec: str, lora_rank: int = 0, lora_targets: tuple[str, ...] | str = "all-linear"
) -> ModelShape:
    """The :class:`ModelShape` of a model spec, its modules built on the meta device; the
    adapter of rank ``lora_rank`` on ``lora_targets`` (layer name suffixes, or all-linear:
    every linear layer but the output layer) counted as ``rank x (in + out)`` per layer."""
    from transformers import AutoModelForCausalLM

    config = model_config(spec)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    kinds = set(getattr(model, "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in kinds]
    head = model.get_output_embeddings()
    linears = [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and m is not head
    ]
    adapted = [
        m
        for name, m in linears
        if lora_targets == "all-linear" or name.rsplit(".", 1)[-1] in lora_targets
    ]
    text = getattr(config, "text_config", config)
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return ModelShape(
        architecture=text.model_type,
        params=_count(model),
        linear=sum(_count(m) for _, m in linears),
        head=head.weight.numel() if head is not None else 0,
        layer=max((_count(b) for b in blocks), default=0),
        largest=max(p.numel() for p in model.parameters()),
        layers=len(blocks),
        hidden=text.hidden_size,
        intermediate=getattr(text, "intermediate_size", 4 * text.hidden_size),
        q_width=heads * head_dim,
        kv_width=getattr(text, "num_key_value_heads", heads) * head_dim,
        vocab=text.vocab_size,
        lora=sum(lora_rank * (m.in_features + m.out_features) for m in adapted),
    )


def _count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def layer_activation_bytes(shape: ModelShape, autocast_bytes: int) -> int:
    """Bytes one token keeps for the backward in one decoder layer of the training forward: the
    fp32 residual stream at both norms (input and normalised: 16 h), the attention's q, k, v,
    output and the output projection's input (3 q + 2 kv), the MLP's gate, activation, up and
    product (4 i), in the autocast dtype, and under bf16 autocast the casts of the five
    projections' inputs (10 h)."""
    h = shape.hidden
    low = autocast_bytes * (3 * shape.q_width + 2 * shape.kv_width + 4 * shape.intermediate)
    casts = 10 * h if autocast_bytes == 2 else 0
    return 16 * h + low + casts


# ---------------------------------------------------------------- what a config asks for


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
    device = _device_kind(cfg.train.device)
    config = model_config(cfg.model.name)
    quantize = lora.quantize if lora is not None else None
    rollout_bytes = 4 if quantize else _dtype_bytes(cfg.rollout.dtype, device, config, "rollout")
    requires = algorithms.ADVANTAGES[algo.advantage.name].requires
    backend = cfg.distributed.backend
    reference = None
    if algorithms.needs_reference(algo):
        reference = "copy" if lora is None else "adapter"
        if lora is not None and lora.path is None and not algo.reference.reset_every:
            reference = "disabled"
    vllm = cfg.rollout.vllm
    evaluates = cfg.eval.before or cfg.eval.after or cfg.eval.every > 0
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
        samples=cfg.rollout.prompts_per_step * cfg.rollout.group_size,
        eval_samples=cfg.eval.n_prompts if evaluates else 0,
        group=cfg.rollout.group_size,
        prompt_tokens=prompt_tokens or cfg.task.max_prompt_tokens or DEFAULT_PROMPT_TOKENS,
        completion_tokens=cfg.max_completion_tokens,
        shared_prefix=cfg.train.shared_prefix and algo.objective.samples != "data",
        pairs=algorithms.OBJECTIVES[algo.objective.name].kind == "pairs",
        reference=reference,
        teacher=cfg.model.teacher if "teacher_logp" in requires else None,
        value_head=algo.advantage.name == "gae",
        snapshot=cfg.logging.update_sparsity,
        semi_online=algo.objective.sync_every > 1,
        reference_engine="reference_rewards" in requires,
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


def _device_kind(setting: str) -> str:
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


# ---------------------------------------------------------------- the estimate


@dataclass(frozen=True)
class Row:
    """One part of the estimate: ``bytes`` on the device; ``phase``: ``resident`` (all run
    long) or the phase it exists in (``train``, ``optimizer``, ``rollout``, ``load``);
    ``shared``: another process's, on the memory this one shares (:func:`_host_rows`)."""

    name: str
    bytes: int
    note: str
    phase: str = "resident"
    shared: bool = False


PHASES = {
    "train": "training step",
    "optimizer": "optimizer step",
    "rollout": "rollout",
    "load": "load (before sharding)",
}
"""The phases one at a time on top of the resident rows; the load's rows stand alone (the
runtime and the whole policy: nothing else exists yet)."""


@dataclass(frozen=True)
class Plan:
    """The estimated peak memory of a run's most loaded device: a learner's (with the engine
    when colocated; on a CPU with the run's processes on this machine, the machine's, which
    they share).

    Attributes:
        rows: the breakdown, in bytes.
        devices: the learners; device_memory: the device's bytes (None: not known).
        advice: the cheapest changes that would fit, cheapest first (empty when it fits).
    """

    title: str
    rows: tuple[Row, ...]
    devices: int
    device_memory: int | None
    advice: tuple[str, ...] = ()

    def total(self, phase: str, own: bool = False) -> int:
        """Bytes on the device during ``phase`` (``own``: this process's rows only)."""
        rows = [r for r in self.rows if not (own and r.shared)]
        phases = (phase,) if phase == "load" else ("resident", phase)
        return sum(r.bytes for r in rows if r.phase in phases)

    @property
    def largest_phase(self) -> str:
        return max(PHASES, key=self.total)

    @property
    def peak(self) -> int:
        """The estimated peak, in bytes: the resident rows and the largest phase's."""
        return self.total(self.largest_phase)

    @property
    def learner_peak(self) -> int:
        """The same of the most loaded learner's process alone (without the rows of the other
        processes sharing its memory)."""
        return max(self.total(phase, own=True) for phase in PHASES)

    @property
    def fits(self) -> bool:
        return self.device_memory is None or self.peak <= self.device_memory

    def _largest_rows(self) -> list[Row]:
        """The rows of the peak, largest first."""
        phase = self.largest_phase
        phases = (phase,) if phase == "load" else ("resident", phase)
        return sorted((r for r in self.rows if r.phase in phases), key=lambda r: -r.bytes)

    def verdict(self) -> str:
        """One line: the peak against the device's memory, and whether it fits."""
        where = f"{PHASES[self.largest_phase]} peak"
        if self.device_memory is None:
            return f"estimated {where}: {size_text(self.peak)} per device"
        if self.fits:
            return (
                f"estimated {where}: {size_text(self.peak)} of {size_text(self.device_memory)} "
                "per device: fits"
            )
        parts = ", ".join(f"{r.name} {size_text(r.bytes)}" for r in self._largest_rows()[:3])
        return (
            f"does not fit: estimated {where} {size_text(self.peak)} > "
            f"{size_text(self.device_memory)} per device (largest: {parts})"
        )

    def text(self) -> str:
        """The table ``rlvr plan`` prints: the rows by phase, then the verdict and the advice."""
        lines = [self.title]
        for phase in ("resident", *PHASES):
            rows = [r for r in self.rows if r.phase == phase]
            if rows:
                lines.append(f"  {PHASES.get(phase, 'resident')}: {size_text(self.total(phase))}")
                lines += [f"    {r.name:<26} {size_text(r.bytes):>10}  {r.note}" for r in rows]
        lines.append(self.verdict())
        lines += [f"  {a}" for a in self.advice]
        return "\n".join(lines)

    def summary(self) -> str:
        """The compact block a run prints at its start: the title, the rows of the peak (of a
        MiB or more) on one line, the verdict (``rlvr plan``: the whole table)."""
        rows = [r for r in self._largest_rows() if r.bytes >= 2**20]
        parts = ", ".join(f"{r.name} {size_text(r.bytes)}" for r in rows)
        return "\n".join([self.title, f"  {parts}", self.verdict()])


def plan(
    cfg: Config,
    devices: int | None = None,
    device_memory: int | None = None,
    prompt_tokens: int | None = None,
) -> Plan:
    """The memory plan of ``cfg`` on ``devices`` learners (default ``distributed.learners``)
    whose devices have ``device_memory`` bytes each (None: unknown, no verdict); with advice
    when it does not fit. ``prompt_tokens``: see :func:`setup_of`."""
    setup = setup_of(cfg, devices, prompt_tokens, device_memory)
    found = estimate(setup, device_memory)
    if found.fits:
        return found
    return dataclasses.replace(found, advice=advice(setup, found))


def estimate(setup: Setup, device_memory: int | None = None) -> Plan:
    """The :class:`Plan` of a :class:`Setup` (without advice)."""
    shape = model_shape(setup.model, setup.lora_rank, setup.lora_targets)
    rows = [
        *_learner_rows(setup, shape),
        *_activation_rows(setup, shape),
        *(_engine_rows(setup, shape) if setup.colocated else ()),
    ]
    if setup.device == "cpu":
        rows.append(_carried(rows))
    rows += _host_rows(setup, shape)
    where = f"{setup.device}, {setup.learners} learner(s)"
    if setup.sharding:
        where += f", fsdp{' offloaded' if setup.offload else ''}"
    lora = f", LoRA rank {setup.lora_rank}" if setup.lora_rank else ""
    title = (
        f"memory plan: {setup.model} ({shape.params / 1e6:,.1f}M parameters{lora}) on {where}; "
        f"micro-batch {setup.micro_batch} x ({setup.prompt_tokens} prompt + "
        f"{setup.completion_tokens} completion tokens)"
    )
    return Plan(title, tuple(r for r in rows if r.bytes), setup.learners, device_memory)


def _carried(rows: list[Row]) -> Row:
    """On a CPU, the smaller of the training step and the rollout, held while the other runs:
    they alternate all run long, and glibc's heap keeps what one freed (measured: counting
    both fits the runs of the module docstring; counting half of it underestimates LoRA's)."""
    smaller = min(sum(r.bytes for r in rows if r.phase == p) for p in ("train", "rollout"))
    return Row("heap kept", smaller, "what the other of training and rollout freed")


def _trained(setup: Setup, shape: ModelShape) -> int:
    """Trained parameters: the adapter's, or every one."""
    return shape.lora if setup.lora_rank else shape.params


def _policy_bytes(setup: Setup, shape: ModelShape) -> int:
    """The policy's weights: fp32, a QLoRA base's linear weights quantised, the adapter fp32."""
    if setup.quantize is None:
        return 4 * (shape.params + shape.lora)
    quantized = QUANTIZED_BYTES[setup.quantize] * shape.linear
    return int(quantized + 4 * (shape.params - shape.linear + shape.lora))


def _learner_rows(setup: Setup, shape: ModelShape) -> Iterator[Row]:
    """The learner's process: its runtime, state, copies of its weights and its reference."""
    runtime = CPU_RUNTIME if setup.device == "cpu" else CUDA_RUNTIME
    what = "interpreter, torch, transformers (measured)" if setup.device == "cpu" else "context"
    yield Row("runtime", runtime, what)
    n = setup.learners if setup.sharding else 1
    if not (setup.sharding and setup.offload):  # offloaded: the shards are in CPU memory
        yield from _state_rows(setup, shape, n)
    if setup.sharding:
        yield from _sharding_rows(setup, shape, runtime)
    yield from _copy_rows(setup, shape, n)
    yield from _reference_rows(setup, shape, n)


def _state_rows(setup: Setup, shape: ModelShape, n: int) -> Iterator[Row]:
    """The policy's weights, AdamW's moments (from the first optimizer step on), the gradients
    and, on CUDA, AdamW's foreach temporaries: 1/``n`` each."""
    trained = _trained(setup, shape)
    shards = f"1/{n} each" if setup.sharding else "whole"
    base = f" (base {setup.quantize})" if setup.quantize else ""
    yield Row("policy weights", _policy_bytes(setup, shape) // n, f"fp32{base}, {shards}")
    moments = f"2 x fp32 x {trained / 1e6:,.1f}M trained, {shards}"
    when = "optimizer" if setup.optimizer_steps == 1 else "resident"  # one step: at its end
    yield Row("AdamW moments", 8 * trained // n, moments, when)
    for phase in ("train", "optimizer"):
        yield Row("gradients", 4 * trained // n, f"fp32, {shards}", phase)
    if setup.device == "cuda":
        temporaries = "AdamW's foreach step: one fp32 copy"
        yield Row("optimizer temporaries", 4 * trained // n, temporaries, "optimizer")


def _sharding_rows(setup: Setup, shape: ModelShape, runtime: int) -> Iterator[Row]:
    """A sharded policy's gathered parameters and gradients while it trains, and its load."""
    params = setup.shard_bytes * (shape.root + 2 * shape.layer)
    grads = 4 * (shape.root + shape.layer)
    note = (
        "whole root unit (embeddings, output layer) and 2 decoder layers, and their "
        "gradients (1 layer), each twice: the tensors and the gather / reduce buffers"
    )
    yield Row("gathered parameters", 2 * (params + grads), note, "train")
    yield Row("runtime", runtime, "as above", "load")
    yield Row("whole policy", _policy_bytes(setup, shape), "fp32, before sharding", "load")


def _copy_rows(setup: Setup, shape: ModelShape, n: int) -> Iterator[Row]:
    """Copies of the trained weights: the initial ones (update sparsity, CPU memory), a learner
    actor's published ones, a semi-online run's snapshot; the value head."""
    trained = _trained(setup, shape)
    on_device = not (setup.sharding and setup.offload)
    if setup.snapshot and setup.device == "cpu":
        yield Row("initial weights", 4 * trained // n, "fp32 copy (logging.update_sparsity)")
    if setup.learner_actors and on_device:
        yield Row("published copy", 4 * trained // n, "fp32, what the engines were last sent")
    if setup.semi_online:
        yield Row("published snapshot", 4 * trained, "fp32 (objective.sync_every > 1)")
    if setup.value_head:
        yield Row("value head", 16 * (shape.hidden + 1), "weights, gradient, moments")


def _reference_rows(setup: Setup, shape: ModelShape, n: int) -> Iterator[Row]:
    """The reference (a copy in the rollout dtype, sharded like the policy) and the teacher."""
    if setup.reference == "copy":
        copy = setup.rollout_bytes * shape.params
        yield Row("reference", copy // n, f"{_dtype(setup.rollout_bytes)} copy, frozen")
        if setup.sharding:
            yield Row("whole reference", copy, "before sharding", "load")
    elif setup.reference == "adapter":
        yield Row("reference adapter", 4 * shape.lora, "frozen copy of the adapter")
    if setup.teacher is not None:
        teacher = model_shape(setup.teacher).params * setup.rollout_bytes
        yield Row("teacher", teacher, f"{setup.teacher}, {_dtype(setup.rollout_bytes)}")


def _activation_rows(setup: Setup, shape: ModelShape) -> Iterator[Row]:
    """The training forward's activations, logits and autocast's weight copies."""
    prompt, completion = setup.tokens
    tokens = prompt + completion
    per_layer = layer_activation_bytes(shape, setup.autocast_bytes)
    full = tokens * per_layer * shape.layers
    checkpointed = tokens * (4 * shape.hidden * shape.layers + 2 * per_layer)
    heap = 1 + (CPU_HEAP if setup.device == "cpu" else 0)
    chosen, other = (checkpointed, full) if setup.checkpointing else (full, checkpointed)
    yield Row(
        "activations",
        int(heap * chosen),
        f"{tokens:,} tokens; {'without' if setup.checkpointing else 'with'} gradient "
        f"checkpointing: {size_text(heap * other)}",
        "train",
    )
    chunk = min(completion, setup.chunk_tokens or completion)
    logits = chunk * shape.vocab * LOGIT_BYTES[setup.autocast_bytes]
    yield Row(
        "logits",
        int(heap * logits),
        f"{chunk:,} tokens x {shape.vocab:,} at a time (train.logprob_chunk_tokens)",
        "train",
    )
    if setup.autocast_bytes == 2 and not (setup.sharding and setup.shard_bytes == 2):
        held = shape.head + (shape.layer if setup.checkpointing else shape.linear)
        yield Row("autocast weight copies", 2 * held, "bf16 casts kept for the backward", "train")


def _engine_rows(setup: Setup, shape: ModelShape) -> Iterator[Row]:
    """The rollout engine beside the policy: its weights and its cache."""
    rb = setup.rollout_bytes
    served = (setup.backend == "torchrun") + setup.semi_online
    if served:
        note = "whole fp32 policy the engine serves (torchrun rank 0, or objective.sync_every)"
        yield Row("served copy", served * _policy_bytes(setup, shape), note)
    if setup.engine == "vllm":
        yield from _vllm_rows(setup, shape)
        return
    if rb != 4:
        copy = rb * (shape.params + shape.lora)
        yield Row("engine weights", copy, f"{_dtype(rb)} copy of the policy")
    lean = shape.architecture in LEAN_DECODER and setup.quantize is None
    packed = rb * (shape.linear + shape.head)
    if lean and setup.device == "cpu":
        yield Row("engine packed weights", packed, "oneDNN prepacked projections")
        repack = packed + (rb * shape.linear if setup.lora_rank else 0)
        yield Row("repacking", repack, "the projections packed again after an update", "rollout")
    elif lean and setup.lora_rank:
        yield Row("engine merged weights", rb * shape.linear, "W + BA of each projection")
    yield from _cache_rows(setup, shape)
    if setup.reference_engine:
        yield Row("reference engine", (4 + rb * (rb != 4)) * shape.params, "frozen copy (AAPO)")


def _cache_rows(setup: Setup, shape: ModelShape) -> Iterator[Row]:
    """The torch engine's KV cache and decode buffers for its largest batch: a training draw
    (``rows`` samples sharing ``prompt_rows`` prompts' keys and values) or a held-out one (a
    prompt per row)."""
    rows, length = setup.rows, setup.prompt_tokens
    draw = setup.prompt_rows * length + rows * setup.completion_tokens
    held_out = setup.eval_rows * (length + setup.completion_tokens)
    per_token = 2 * shape.layers * shape.kv_width * setup.rollout_bytes
    heap = 1 + (CPU_HEAP if setup.device == "cpu" else 0)
    widest = max(rows, setup.eval_rows)
    yield Row(
        "KV cache",
        int(heap * max(draw, held_out) * per_token),
        f"{widest} rows (rollout.max_batch) of up to {length} + {setup.completion_tokens} tokens",
        "rollout",
    )
    yield Row(
        "decode buffers", DECODE_BUFFERS * 4 * widest * shape.vocab, "logits, sampling", "rollout"
    )


def _vllm_rows(setup: Setup, shape: ModelShape) -> Iterator[Row]:
    """vLLM's weights and KV cache; asleep (CUDA, ``sleep_mode``) they leave the device while
    the learner trains."""
    phase = "rollout" if setup.vllm_sleeps else "resident"
    weights = setup.rollout_bytes * shape.params
    yield Row("vLLM weights", weights, f"{_dtype(setup.rollout_bytes)}", phase)
    kv, note = GiB, "rollout.vllm.kv_cache_gb unset: 1 GiB"
    if setup.vllm_kv_bytes is not None:
        kv, note = setup.vllm_kv_bytes, "rollout.vllm.kv_cache_gb"
    elif setup.vllm_budget is not None:
        kv, note = max(0, setup.vllm_budget - weights), "rollout.vllm.gpu_memory_utilization"
    yield Row("vLLM KV cache", kv, note, phase)


def _host_rows(setup: Setup, shape: ModelShape) -> Iterator[Row]:
    """Where the run's processes share this machine's memory (:attr:`Setup.host_shared`), the
    others': the other learners (training at the same time), the rollout workers (each a policy
    and an engine, sampling while the learners wait) and a Ray run's driver."""
    if not setup.host_shared:
        return
    others = setup.learners - 1
    rank = dataclasses.replace(  # a learner without the engine; only sharded ranks snapshot
        setup, backend="ray", host_shared=False, snapshot=setup.snapshot and setup.sharding
    )
    learner = estimate(rank).rows
    for phase in ("resident", *PHASES):
        total = others * sum(r.bytes for r in learner if r.phase == phase)
        if total:
            yield Row("other learners", total, f"{others} x", phase, shared=True)
    if setup.backend != "ray":
        return
    workers = setup.rollout_workers
    engine = list(_engine_rows(dataclasses.replace(setup, backend="local"), shape))
    resident = CPU_RUNTIME + _policy_bytes(setup, shape)
    resident += sum(r.bytes for r in engine if r.phase == "resident")
    sampling = sum(r.bytes for r in engine if r.phase == "rollout")
    note = f"{workers} x policy, engine, runtime"
    yield Row("rollout workers", workers * resident, note, shared=True)
    yield Row("rollout workers", workers * sampling, f"{workers} x KV cache", "rollout", True)
    yield Row("driver", CPU_RUNTIME, "the loop and the prompt sampler", shared=True)


def _dtype(nbytes: int) -> str:
    return {2: "bf16", 4: "fp32"}.get(nbytes, f"{nbytes}-byte")


# ---------------------------------------------------------------- advice


@dataclass(frozen=True)
class Change:
    """A config change the advice may propose: ``--set key=value`` and the setup with it."""

    key: str
    value: str
    setup: Setup
    note: str = ""

    @property
    def flag(self) -> str:
        return f"--set {self.key}={self.value}" + (f" ({self.note})" if self.note else "")


def _changes(setup: Setup) -> Iterator[Change]:
    """Changes that lower the peak, cheapest first (in time per step, then in what the run
    learns); a key's values from the mildest."""
    if setup.snapshot and setup.device == "cpu":
        yield Change("logging.update_sparsity", "false", _with(setup, snapshot=False))
    batch = setup.micro_batch // 2
    while batch >= 1:
        yield Change("train.micro_batch_size", str(batch), _with(setup, micro_batch=batch))
        batch //= 2
    if setup.chunk_tokens == 0 or setup.chunk_tokens > CHUNK_ADVICE:
        chunked = _with(setup, chunk_tokens=CHUNK_ADVICE)
        yield Change("train.logprob_chunk_tokens", str(CHUNK_ADVICE), chunked)
    if not setup.checkpointing:
        yield Change("train.gradient_checkpointing", "true", _with(setup, checkpointing=True))
    if setup.colocated and setup.engine == "torch" and setup.max_batch > 16:
        fewer = _with(setup, max_batch=setup.max_batch // 4)
        yield Change("rollout.max_batch", str(setup.max_batch // 4), fewer)
    if not setup.sharding and setup.learners > 1 and setup.quantize is None:
        note = f"over the {setup.learners} learners"
        yield Change("train.sharding", "fsdp", _with(setup, sharding=True), note)
    if not setup.lora_rank:
        lora = _with(
            setup,
            lora_rank=LORA_ADVICE,
            lora_targets="all-linear",
            reference="disabled" if setup.reference else None,
        )
        yield Change("model.lora.rank", str(LORA_ADVICE), lora, "LoRA on all linear layers")
    if setup.sharding and not setup.offload and setup.device == "cuda":
        yield Change("train.shard_offload", "true", _with(setup, offload=True))


def _with(setup: Setup, **changes: object) -> Setup:
    return dataclasses.replace(setup, **changes)


def _fits(setup: Setup, memory: int) -> bool:
    return estimate(setup).peak <= memory


def _combine(setup: Setup, changes: list[Change]) -> Setup:
    """``setup`` with every field each change altered set as it set it."""
    updates = {
        f.name: getattr(c.setup, f.name)
        for c in changes
        for f in dataclasses.fields(Setup)
        if getattr(c.setup, f.name) != getattr(setup, f.name)
    }
    return dataclasses.replace(setup, **updates)


def advice(setup: Setup, found: Plan) -> tuple[str, ...]:
    """The cheapest single change that makes ``found`` fit; else a combination (each key at its
    strongest, added in cost order until it fits, the unneeded ones dropped, dearest first,
    then each as mild as still fits); else the learners a sharded run needs."""
    memory = found.device_memory
    assert memory is not None
    changes = list(_changes(setup))
    for change in changes:
        if _fits(change.setup, memory):
            peak = size_text(estimate(change.setup).peak)
            return (f"cheapest change that fits: {change.flag} (estimated peak {peak})",)
    strongest = list({c.key: c for c in changes}.values())  # each key's last value
    fitting = [
        i for i in range(len(strongest)) if _fits(_combine(setup, strongest[: i + 1]), memory)
    ]
    if not fitting:
        return (_more_devices(setup, memory),)
    chosen = strongest[: fitting[0] + 1]
    for change in reversed(chosen[:-1]):
        rest = [c for c in chosen if c is not change]
        if _fits(_combine(setup, rest), memory):
            chosen = rest
    for i, change in enumerate(chosen):
        others = chosen[:i] + chosen[i + 1 :]
        milder = (c for c in changes if c.key == change.key)
        chosen[i] = next(c for c in milder if _fits(_combine(setup, [*others, c]), memory))
    peak = size_text(estimate(_combine(setup, chosen)).peak)
    return (f"fits with: {' '.join(c.flag for c in chosen)} (estimated peak {peak})",)


def _more_devices(setup: Setup, memory: int) -> str:
    """The fewest learners (a power of two, up to 1024) a sharded, checkpointed run fits."""
    n = 2
    while n <= 1024:
        sharded = _with(
            setup, sharding=True, learners=n, checkpointing=True, backend="ray", host_shared=False
        )
        peak = estimate(sharded).peak
        if peak <= memory:
            return (
                f"no change on {setup.learners} device(s) fits: shard over {n}: --set "
                "distributed.backend=ray --set train.sharding=fsdp --set "
                f"distributed.learners={n} --set train.gradient_checkpointing=true "
                f"(estimated peak {size_text(peak)})"
            )
        n *= 2
    return "no change rlvr offers fits this device: a larger device or a smaller model"


# ---------------------------------------------------------------- the run's device


def device_memory(cfg: Config) -> int | None:
    """The memory of the run's learner device in bytes: ``train.device_memory_gb``, else a CUDA
    device's total memory, else this machine's MemTotal (/proc/meminfo; None where unknown)."""
    if cfg.train.device_memory_gb is not None:
        return int(cfg.train.device_memory_gb * GiB)
    if _device_kind(cfg.train.device) == "cuda":
        if not torch.cuda.is_available():
            return None
        index = torch.device(cfg.train.device).index if ":" in cfg.train.device else None
        return torch.cuda.get_device_properties(index or 0).total_memory
    try:
        with open("/proc/meminfo") as f:
            total = next(line for line in f if line.startswith("MemTotal:"))
    except (OSError, StopIteration):
        return None
    return int(total.split()[1]) * 1024


def check_plan(cfg: Config) -> Plan:
    """The plan of a run about to start on this machine's device (:func:`device_memory`);
    :class:`PlanError` with its "does not fit" line and advice when it does not fit."""
    found = plan(cfg, device_memory=device_memory(cfg))
    if not found.fits:
        raise PlanError("\n".join([found.verdict(), *found.advice]))
    return found
