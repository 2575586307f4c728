"""The model's shapes: exact parameter counts and dimensions of a causal LM, its architecture
built on the meta device (no weights are read), a LoRA adapter's parameters counted from its rank
and target layers; and the activations one token keeps in a decoder layer."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from rlvr.models import (
    RANDOM_PREFIX,
    ModelSpecError,
    adapter_base,
    resolve,
    shape_config,
)


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
