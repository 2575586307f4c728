"""LoRA adapters (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models") on a
transformers causal LM, through PEFT.

A linear layer ``y = x W^T`` of the frozen base model becomes ``y = x W^T + (alpha / r) x A^T B^T``
with trainable ``A`` [r, in] (random) and ``B`` [out, r] (zeros: the adapted model starts as the
base model). The adapters are injected with transformers' PEFT integration
(``model.add_adapter`` / ``load_adapter``), so the policy stays the same ``*ForCausalLM`` object
(its ``config``, ``base_model`` and output layer as without adapters) and only the adapter
parameters require gradients. "LoRA Without Regret" (Schulman et al. 2025) finds that rank 1-32
adapters on every linear layer match full fine-tuning in RL at about 10x the learning rate.

Names: the trained adapter is :data:`TRAINED`; a frozen copy :data:`REFERENCE` serves as the KL
reference where the reference is not the base model (an adapter that existed before the run, or
ProRL's reference reset). Everything here is a function of the model, in one process.
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rlvr.errors import RlvrError

TRAINED = "default"
"""The adapter being trained (PEFT's default adapter name)."""
REFERENCE = "reference"
"""A frozen copy of the trained adapter: the KL reference when it is not the base model."""
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


class _DropKernelsWarning(logging.Filter):
    """bitsandbytes, which PEFT imports whenever it is installed, warns as it is imported on a
    CPU with AVX512-BF16 that the optional ``kernels`` package of its CPU 4-bit matmul is
    missing; it then uses its own, and only a 4-bit base (QLoRA) would use either."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Failed to load CPU gemm_4bit_forward")


logging.getLogger("bitsandbytes.backends.cpu.ops").addFilter(_DropKernelsWarning())


class AdapterError(RlvrError, ValueError):
    """An adapter that does not fit its model (other base, other layers, unsupported variant)."""


@dataclass(frozen=True)
class LoraSpec:
    """The shape of a new adapter (``model.lora`` of a run's config).

    Attributes:
        rank: r, the rank of ``A`` and ``B``.
        alpha: the scale numerator: the update is ``(alpha / rank) B A``.
        target_modules: names (suffixes) of the linear layers to adapt, or ``"all-linear"``
            (every linear layer but the output layer).
        dropout: dropout on the adapter's input (0 in RL: see docs/lora.md).
        seed: seeds ``A``'s random initialisation, so that every process of a run (Ray's
            learners and rollout workers) builds the same adapter.
    """

    rank: int = 8
    alpha: float = 16.0
    target_modules: tuple[str, ...] | str = "all-linear"
    dropout: float = 0.0
    seed: int = 0
    base: str = field(default="", compare=False)  # the model spec written into the config


def is_quantized(model: torch.nn.Module) -> bool:
    """Whether ``model``'s weights are stored quantised (a QLoRA base: bitsandbytes)."""
    return getattr(model, "hf_quantizer", None) is not None or bool(
        getattr(model, "is_quantized", False)
    )


def has_lora(model: torch.nn.Module) -> bool:
    """Whether ``model`` carries PEFT adapters (injected with :func:`add_lora`)."""
    return bool(getattr(model, "_hf_peft_config_loaded", False))


def add_lora(model: torch.nn.Module, spec: LoraSpec, path: str | Path | None = None) -> None:
    """Inject the trained adapter into ``model`` in place and freeze everything else: a new one
    shaped by ``spec``, or the PEFT adapter saved in ``path`` (trained further; its own rank and
    layers, ``spec`` only names the base). Raises :class:`AdapterError` for an adapter that
    does not fit the model."""
    from peft import LoraConfig

    if path is not None:
        _load_existing(model, Path(path))
    else:
        targets = spec.target_modules
        config = LoraConfig(
            r=spec.rank,
            lora_alpha=spec.alpha,
            target_modules=targets if isinstance(targets, str) else list(targets),
            lora_dropout=spec.dropout,
            bias="none",
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(spec.seed)
            try:
                model.add_adapter(config, adapter_name=TRAINED)
            except ValueError as err:  # no module matches target_modules
                raise AdapterError(f"model.lora.target_modules {targets!r}: {err}") from None
    model.peft_config[TRAINED].base_model_name_or_path = spec.base or None
    model.peft_config[TRAINED].inference_mode = False
    for name, param in model.named_parameters():
        param.requires_grad_(_adapter_of(name) == TRAINED)


def _load_existing(model: torch.nn.Module, path: Path) -> None:
    config = read_adapter_config(path)
    if config is None:
        raise AdapterError(
            f"model.lora.path {str(path)!r} is not a PEFT adapter directory (no {ADAPTER_CONFIG})"
        )
    if config.get("peft_type", "LORA") != "LORA" or config.get("use_dora"):
        raise AdapterError(f"{path}: only plain LoRA adapters are supported (found {config})")
    try:
        model.load_adapter(str(path), adapter_name=TRAINED, is_trainable=True)
    except (ValueError, RuntimeError, KeyError) as err:
        raise AdapterError(f"the adapter {str(path)!r} does not fit this model: {err}") from None


def _adapter_of(name: str) -> str | None:
    """The adapter a parameter name belongs to (``...lora_A.default.weight`` -> ``default``)."""
    parts = name.split(".")
    for i, part in enumerate(parts[:-1]):
        if part.startswith("lora_"):
            return parts[i + 1]
    return None


def read_adapter_config(path: str | Path) -> dict | None:
    """The ``adapter_config.json`` of a PEFT adapter directory, or None when there is none."""
    file = Path(path) / ADAPTER_CONFIG
    if not file.is_file():
        return None
    return json.loads(file.read_text())


def lora_layers(model: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Module]]:
    """The adapted layers (PEFT ``LoraLayer``) of ``model`` with their names."""
    if "peft" not in sys.modules:  # never imported: no layer can be PEFT's (and importing it
        return  # takes seconds, bitsandbytes with it)
    from peft.tuners.lora import LoraLayer

    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            yield name, module


def adapter_parameters(
    model: torch.nn.Module, name: str = TRAINED
) -> dict[str, torch.nn.Parameter]:
    """The parameters of adapter ``name``, by their names in ``model``."""
    return {n: p for n, p in model.named_parameters() if _adapter_of(n) == name}


@contextmanager
def disabled(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``model`` computing as its base model (every adapter off) inside the block."""
    model.disable_adapters()
    try:
        yield model
    finally:
        model.enable_adapters()


@contextmanager
def active(model: torch.nn.Module, name: str) -> Iterator[torch.nn.Module]:
    """``model`` computing with adapter ``name`` instead of :data:`TRAINED` inside the block;
    which parameters require gradients is left as it was."""
    trainable = {n: p.requires_grad for n, p in model.named_parameters()}
    model.set_adapter(name)
    try:
        yield model
    finally:
        model.set_adapter(TRAINED)
        for n, p in model.named_parameters():
            p.requires_grad_(trainable[n])


def add_frozen_copy(model: torch.nn.Module, name: str = REFERENCE) -> None:
    """A second adapter ``name`` shaped like :data:`TRAINED`, holding a frozen copy of it."""
    import copy

    config = copy.deepcopy(model.peft_config[TRAINED])
    with warnings.catch_warnings():  # "multiple adapters in the model": that is the point
        warnings.filterwarnings("ignore", message=".*multiple adapters.*")
        model.add_adapter(config, adapter_name=name)
    model.set_adapter(TRAINED)
    copy_adapter(model, TRAINED, name)
    for param in adapter_parameters(model, name).values():
        param.requires_grad_(False)
    for param in adapter_parameters(model, TRAINED).values():
        param.requires_grad_(True)


@torch.no_grad()
def copy_adapter(model: torch.nn.Module, source: str, target: str) -> None:
    """Copy adapter ``source``'s weights into adapter ``target`` (same shapes)."""
    for _, layer in lora_layers(model):
        for part in ("lora_A", "lora_B"):
            getattr(layer, part)[target].weight.copy_(getattr(layer, part)[source].weight)


_PEFT_PREFIX = "base_model.model."
"""How PEFT names the tensors of ``adapter_model.safetensors`` (the model wrapped twice)."""


def peft_name(parameter: str, name: str = TRAINED) -> str:
    """The name in PEFT's files of adapter ``name``'s parameter ``parameter`` (its name in the
    model): ``base_model.model.<layer>.lora_A.weight``, the adapter's name left out."""
    return _PEFT_PREFIX + parameter.replace(f".{name}.", ".")


def adapter_state(model: torch.nn.Module, name: str = TRAINED) -> dict[str, torch.Tensor]:
    """Adapter ``name``'s tensors under PEFT's file names (:func:`peft_name`)."""
    return {peft_name(n, name): p.detach() for n, p in adapter_parameters(model, name).items()}


def save_adapter(
    model: torch.nn.Module,
    directory: str | Path,
    name: str = TRAINED,
    tensors: dict[str, torch.Tensor] | None = None,
) -> None:
    """Write adapter ``name`` in PEFT's format (``adapter_config.json`` +
    ``adapter_model.safetensors``: ``PeftModel.from_pretrained(base, directory)`` loads it),
    without the hub lookups of ``save_pretrained``; ``tensors``: its :func:`adapter_state`
    when given (a sharded model's, gathered whole)."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.peft_config[name].save_pretrained(str(directory))
    state = adapter_state(model, name) if tensors is None else tensors
    tensors = {k: v.contiguous() for k, v in state.items()}
    save_file(tensors, str(directory / ADAPTER_WEIGHTS), metadata={"format": "pt"})


@torch.no_grad()
def load_adapter_weights(model: torch.nn.Module, file: str | Path, name: str = TRAINED) -> None:
    """Load ``adapter_model.safetensors`` into adapter ``name`` of ``model`` in place (exact
    values); a ``ValueError`` naming the tensors when the file does not fit the adapter."""
    from safetensors.torch import load_file

    saved = load_file(str(file))
    own = {peft_name(n, name): p for n, p in adapter_parameters(model, name).items()}
    if set(saved) != set(own) or any(saved[k].shape != own[k].shape for k in own):
        missing, unexpected = sorted(set(own) - set(saved)), sorted(set(saved) - set(own))
        raise ValueError(
            f"the adapter {file} does not fit the model's: missing {missing[:3]}, unexpected "
            f"{unexpected[:3]} (or other shapes: another rank?)"
        )
    for key, param in own.items():
        param.copy_(saved[key])


class MergedWeights:
    """``W + (alpha / r) B A`` of adapted layers, for engines that run plain weights (the torch
    engine's Llama decoder). A merged weight is recomputed only when the base weight or the
    active adapter's ``A`` or ``B`` changed (a new tensor, or an in-place update seen by its
    version counter), or adapters were switched off or on; unadapted layers give their own
    weight. Memory: one merged copy of each adapted weight."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[tuple, torch.Tensor]] = {}

    @torch.no_grad()
    def __call__(self, module: torch.nn.Module) -> torch.Tensor:
        if "peft" not in sys.modules:  # never imported: no layer is PEFT's
            return module.weight
        from peft.tuners.lora import LoraLayer

        if not isinstance(module, LoraLayer):
            return module.weight
        base = module.get_base_layer().weight
        if base.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise AdapterError(
                "merging an adapter into quantised weights is not supported here: a quantised "
                "base is run through its own layers (the transformers forward)"
            )
        if module.disable_adapters or module.merged:
            return base
        names = [a for a in module.active_adapters if a in module.lora_A]
        tensors = [base] + [
            w for a in names for w in (module.lora_A[a].weight, module.lora_B[a].weight)
        ]
        key = (tuple(names), tuple((id(t), t._version) for t in tensors))
        kept = self._cache.get(id(module))
        if kept is not None and kept[0] == key:
            return kept[1]
        # a normal tensor even when called under inference mode (the engine's): its version
        # counter tells the decoder's packed copy that it has not changed
        with torch.inference_mode(False):
            merged = base.float()
            for a in names:
                merged = merged + module.get_delta_weight(a).float()
            merged = merged.to(base.dtype)
        self._cache[id(module)] = (key, merged)
        return merged


def merged_state_dict(
    model: torch.nn.Module, dtype: torch.dtype | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors of the model with its active adapter merged, under the names of the plain
    model (what a checkpoint of the merged model holds), one at a time (``dtype``: cast)."""
    merge = MergedWeights()
    layers = dict(lora_layers(model))
    for name, tensor in model.state_dict().items():
        if _adapter_of(name) is not None:
            continue
        owner, _, leaf = name.rpartition(".")
        layer_name = owner.removesuffix(".base_layer")
        if layer_name in layers and owner.endswith(".base_layer") and leaf == "weight":
            tensor = merge(layers[layer_name])
            merge._cache.clear()  # one at a time: nothing kept
        plain = name.replace(".base_layer.", ".")
        yield plain, tensor.detach() if dtype is None else tensor.detach().to(dtype)


class AdapterView(torch.nn.Module):
    """The parameters of one adapter of ``model`` as a module of their own (the same tensors,
    so loading a state dict into it loads the adapter in place): how a checkpoint stores
    :data:`REFERENCE` beside the policy."""

    def __init__(self, model: torch.nn.Module, name: str) -> None:
        super().__init__()
        self.params = torch.nn.ParameterDict(
            {n.replace(".", "__"): p for n, p in adapter_parameters(model, name).items()}
        )
