"""The components of the estimate: :func:`estimate` lists a
:class:`~rlvr.trainer.plan.report.Plan`'s rows from a :class:`Setup`, each component on the
device and the phase it exists in, following what the code keeps where
(:mod:`rlvr.trainer.build`); the constants it uses, calibrated as :mod:`rlvr.trainer.plan`
says."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from rlvr.trainer.plan.report import PHASES, Plan, Row
from rlvr.trainer.plan.setup import Setup
from rlvr.trainer.plan.shape import ModelShape, layer_activation_bytes, model_shape
from rlvr.trainer.plan.units import GiB, size_text

CPU_RUNTIME = 600 * 2**20
"""Resident memory of a run's process besides its tensors (CPU): the interpreter, torch,
transformers, rlvr and the tokenizer; the measured peak RSS of a run of the tiny model."""
CUDA_RUNTIME = 768 * 2**20
"""What a CUDA device holds besides the tensors: the context, cuBLAS workspaces and the caching
allocator's rounding (not calibrated: no GPU was lent for it)."""
CPU_HEAP = 0.1
"""Fraction added to a CPU phase's activations, logits and KV cache: memory glibc's heap keeps
after they are freed (fitted to the measured runs :mod:`rlvr.trainer.plan` lists)."""
LOGIT_BYTES = {2: 20, 4: 16}
"""Bytes per logit element of the training forward, by the autocast dtype's size: the logits in
that dtype, their fp32 log-softmax and entropy, and the gradients of both (the difference of
the chunked and unchunked rows of bench/results/memory-chunked-logprobs-cpu.json: 19.1)."""
DECODE_BUFFERS = 4
"""fp32 [rows, vocabulary] tensors a decode step keeps at once (logits, probabilities, sampling)."""
QUANTIZED_BYTES = {"4bit": 0.52, "8bit": 1.0}
"""Bytes per linear weight of a QLoRA base: NF4 with double quantisation, or int8."""
LEAN_DECODER = ("llama", "qwen2")
"""Architectures the torch engine decodes with its lean decoder (prepacked on a CPU)."""


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
    both fits the runs :mod:`rlvr.trainer.plan` lists; counting half of it underestimates
    LoRA's)."""
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
    """The policy's weights, AdamW's moments (from the first optimizer step on) and the
    gradients: 1/``n`` each (AdamW is fused where it runs on the device: no temporaries)."""
    trained = _trained(setup, shape)
    shards = f"1/{n} each" if setup.sharding else "whole"
    base = f" (base {setup.quantize})" if setup.quantize else ""
    yield Row("policy weights", _policy_bytes(setup, shape) // n, f"fp32{base}, {shards}")
    moments = f"2 x fp32 x {trained / 1e6:,.1f}M trained, {shards}"
    when = "optimizer" if setup.optimizer_steps == 1 else "resident"  # one step: at its end
    yield Row("AdamW moments", 8 * trained // n, moments, when)
    for phase in ("train", "optimizer"):
        yield Row("gradients", 4 * trained // n, f"fp32, {shards}", phase)


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
    """The reference and the teacher (copies in the rollout dtype, sharded like the policy)."""
    if setup.reference == "copy":
        copy = setup.rollout_bytes * shape.params
        yield Row("reference", copy // n, f"{_dtype(setup.rollout_bytes)} copy, frozen")
        if setup.sharding:
            yield Row("whole reference", copy, "before sharding", "load")
    elif setup.reference == "adapter":
        yield Row("reference adapter", 4 * shape.lora, "frozen copy of the adapter")
    if setup.teacher is not None:
        teacher = model_shape(setup.teacher).params * setup.rollout_bytes
        note = f"{setup.teacher}, {_dtype(setup.rollout_bytes)}, frozen"
        yield Row("teacher", teacher // n, note + (f", 1/{n} each" if setup.sharding else ""))
        if setup.sharding:
            yield Row("whole teacher", teacher, "before sharding", "load")


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
    torchrun = setup.backend == "torchrun"
    if setup.semi_online:
        note = "whole fp32 policy the engine serves (objective.sync_every)"
        yield Row("served copy", _policy_bytes(setup, shape), note)
    if torchrun:  # rank 0's engine samples from it, in the rollout dtype
        note = f"{_dtype(rb)} whole policy rank 0's engine serves, refilled at each publish"
        yield Row("served copy", rb * (shape.params + shape.lora), note)
    if setup.engine == "vllm":
        yield from _vllm_rows(setup, shape)
        return
    if rb != 4 and not torchrun:
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
