"""The memory plan: a run's peak memory per device, estimated from its config before any model
loads (``rlvr plan CONFIG``, and the block every run prints at its start; docs/scaling.md, "The
memory plan").

Every size is in bytes. Parameter counts are exact: the model's architecture is built on the
meta device (no weights are read), a LoRA adapter's parameters counted from ``model.lora``'s
rank and layers. The estimate follows what the code keeps where (:mod:`rlvr.trainer.build`):

* resident, on the learner's device for the whole run: the runtime (CPU: the interpreter,
  torch, transformers, the tokenizer: :data:`.components.CPU_RUNTIME`; CUDA: the context,
  :data:`.components.CUDA_RUNTIME`), the policy's fp32 weights (a QLoRA base in 4 or 8 bits),
  AdamW's two fp32 moments of the trained parameters (all, or the adapter's), the reference (a
  copy in the rollout dtype; none for LoRA, which disables its adapter), a teacher, the value
  head, the fp32 snapshot of the initial trained weights (``logging.update_sparsity``; CPU
  memory), a learner actor's published copy (Ray, torchrun), and the colocated engine
  (``local``; rank 0 under torchrun, with the whole fp32 policy it serves): its copy of the
  weights in the rollout dtype (none when that is fp32: it shares the policy's) and, on a CPU,
  the decoder's prepacked projections (:mod:`rlvr.rollout.linear`). With ``train.sharding:
  fsdp`` the weights, gradients, moments and reference are 1/N per learner; with
  ``train.shard_offload`` they are in CPU memory instead.
* one phase at a time on top of it, the largest counted: the training step (fp32 gradients,
  the activations of one micro-batch with or without gradient checkpointing, the logits, the
  low-precision copies of the weights autocast keeps for the backward; sharded: the gathered
  root unit and decoder layers with their gradients and communication buffers), the optimizer
  step (gradients and AdamW's temporaries), the rollout (KV cache, decode buffers, and on a
  CPU the projections packed again after an update) and, for a sharded policy, the load (the
  whole fp32 policy and reference before they are sharded, with nothing else yet). On a CPU
  the smaller of training step and rollout counts too (:func:`.components._carried`).

Completions are taken at their longest (``rollout.max_new_tokens``), prompts at
``task.max_prompt_tokens`` or :data:`.setup.DEFAULT_PROMPT_TOKENS`: a bound, which a run whose
completions stop early stays under.

Calibration (2-core AMD EPYC, peak RSS, ``ru_maxrss``): the activation constants
(:data:`.components.LOGIT_BYTES`, :func:`.shape.layer_activation_bytes`) are derived per saved
tensor of a Llama decoder layer and checked against the forward+backward of bench/results/
memory-chunked-logprobs-cpu.json; :data:`.components.CPU_HEAP` and counting both phases on a
CPU were fitted to 2-step runs of SmolLM2-135M's shape with random weights (every completion at
its longest; 0.99-1.07 of the measured peaks, with and without checkpointing), of SmolLM2-135M
with LoRA (1.02) and of the tiny model (1.04); bench/results/memory-*.json's rows give
0.96-1.17 (docs/scaling.md, "The memory plan", lists them). CUDA's constants are not
calibrated.

The package, read in this order:

```
check.py       plan(): a config's plan with advice; device_memory, check_plan, PlanError: the
               check a run makes at its start
setup.py       Setup: what the config means for memory (device, dtypes, batch, what the
               algorithm keeps); setup_of
components.py  estimate(): each component's rows by phase (learner, activations, engine, the
               other processes on a shared host) and the calibrated constants
report.py      Row, Plan: the rows by phase, the peak, the verdict, the printed table
changes.py     advice(): the cheapest config change (or combination, or learners) that fits
shape.py       ModelShape: parameter counts on the meta device; layer_activation_bytes
units.py       GiB, parse_size, size_text
```
"""

from rlvr.trainer.plan.changes import Change, advice
from rlvr.trainer.plan.check import PlanError, check_plan, device_memory, plan
from rlvr.trainer.plan.components import estimate
from rlvr.trainer.plan.report import PHASES, Plan, Row
from rlvr.trainer.plan.setup import DEFAULT_PROMPT_TOKENS, Setup, setup_of
from rlvr.trainer.plan.shape import ModelShape, layer_activation_bytes, model_config, model_shape
from rlvr.trainer.plan.units import GiB, parse_size, size_text

__all__ = [
    "DEFAULT_PROMPT_TOKENS",
    "PHASES",
    "Change",
    "GiB",
    "ModelShape",
    "Plan",
    "PlanError",
    "Row",
    "Setup",
    "advice",
    "check_plan",
    "device_memory",
    "estimate",
    "layer_activation_bytes",
    "model_config",
    "model_shape",
    "parse_size",
    "plan",
    "setup_of",
    "size_text",
]
