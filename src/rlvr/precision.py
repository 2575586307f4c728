"""Which floating-point precision is fast here, measured: ``rollout.dtype: auto`` and
``train.autocast: auto``.

A CPU flag says what a CPU can execute, not what is fast: a Xeon with AVX512-BF16 but no AMX
runs a 2048x2048 bf16 matmul at 80 GFLOP/s against 136 in fp32. So on a CPU, ``auto`` times one
decoder layer at the model's shapes in both precisions, the way each side uses it:

- ``train``: the layer's forward and backward under ``torch.autocast`` (fp32 weights, bf16
  matmuls) against plain fp32, on a block of a micro-batch's size (up to 512 tokens,
  :data:`TRAIN_PROBE_FLOP`);
- ``rollout``: the layer's forward with its weights cast (the engine holds the policy in its
  dtype), on one new token for each of a decoding batch's rows, plus a prompt block;

and picks bf16 for a side only where it is at least :data:`BF16_MARGIN` times faster (bf16
costs precision: the trainer-sampler mismatch grows). The measurement takes about a second
(a side that cannot win stops after one call: emulated bf16 runs 5 to 25 times slower than
fp32) and is cached per machine (CPU model and flags), torch version, thread count and shapes
under rlvr's cache directory (:func:`rlvr.models.cache_dir`), so a machine measures once. On
CUDA, bf16 where the device supports it (its tensor cores are made for it); elsewhere fp32.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from rlvr import train_attention
from rlvr.models import cache_dir

BF16_MARGIN = 1.1
"""bf16 is chosen for a side only when its probe runs at least this many times faster."""
PROBE_VERSION = 4
"""Part of the cache key: a changed probe measures again."""
TRAIN_PROBE_FLOP = 1.5e10
"""The training probe's block holds about this many FLOPs of forward and backward (6 per
parameter and token), up to 512 tokens. Autocast casts every fp32 weight to bf16 at each
forward, a cost of the weights, not the tokens: on a small block it decides the result. On a
2-core Intel Xeon with AMX (2026-11-29) SmolLM2-135M's layer ran bf16 at 0.6-1.0x fp32's speed
on 40 tokens (the block before this constant) and at 1.4x on 512, and the whole model's forward
and backward on 512-1024 tokens (a demo micro-batch's size) at 1.6-1.8x."""
_log = logging.getLogger(__name__)

Use = Literal["rollout", "train"]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}


@dataclass(frozen=True)
class Shapes:
    """A decoder layer's shapes (from the model's config) and the probe's token counts.

    Attributes:
        hidden: d_model; intermediate: the MLP's inner width; heads: attention heads.
        train_tokens: tokens of the training probe's block, [4, train_tokens / 4]: a
            micro-batch's worth (see :data:`TRAIN_PROBE_FLOP`).
        decode_rows: sequences of the decoding probe, one new token each ([decode_rows, 1]).
    """

    hidden: int = 576
    intermediate: int = 1536
    heads: int = 9
    train_tokens: int = 512
    decode_rows: int = 64

    @classmethod
    def of(cls, model_config: Any | None) -> Shapes:
        """The shapes of a Hugging Face config (``hidden_size``, ``intermediate_size``,
        ``num_attention_heads``); the defaults (SmolLM2-135M's) for what it lacks. The
        training block is 512 tokens, fewer (at least 64) for wide layers so that one probe
        call stays within :data:`TRAIN_PROBE_FLOP`."""
        if model_config is None:
            return cls()
        hidden = int(getattr(model_config, "hidden_size", cls.hidden))
        inner = int(getattr(model_config, "intermediate_size", None) or 4 * hidden)
        heads = int(getattr(model_config, "num_attention_heads", None) or max(1, hidden // 64))
        if hidden % heads:
            heads = 1
        params = 4 * hidden * hidden + 3 * hidden * inner
        tokens = int(min(512, max(64, TRAIN_PROBE_FLOP / (6 * params))) // 4 * 4)
        return cls(hidden, inner, heads, tokens, 64)


@dataclass(frozen=True)
class Timings:
    """Seconds of one probe (the best of several repeats), each side in both precisions."""

    train_fp32: float
    train_bf16: float
    rollout_fp32: float
    rollout_bf16: float

    def speedup(self, use: Use) -> float:
        """How many times faster bf16 ran than fp32 for ``use`` (< 1: slower)."""
        fp32, bf16 = getattr(self, f"{use}_fp32"), getattr(self, f"{use}_bf16")
        return fp32 / bf16 if bf16 > 0 else float("inf")


@dataclass(frozen=True)
class Choice:
    """The precisions ``auto`` stands for on one device, and why.

    Attributes:
        rollout: the engine's (and the reference model's) dtype.
        train: the autocast dtype of training forwards.
        source: ``"measured"``, ``"cached"`` (measured earlier on this machine), ``"cuda"``
            or ``"no bf16"`` (a device without bf16).
        timings: the probe's timings (None on CUDA and devices without bf16).
        cache_file: where the measurement is kept (None when not measured).
        set: the sides a run set explicitly (:meth:`applied`): their dtypes are the settings.
    """

    rollout: torch.dtype
    train: torch.dtype
    source: str
    timings: Timings | None = None
    cache_file: str | None = None
    set: tuple[Use, ...] = ()

    def applied(self, rollout: str, train: str) -> Choice:
        """The precisions of a run whose settings (``rollout.dtype``, ``train.autocast``) are
        ``rollout`` and ``train``: ``auto`` where set so, the setting elsewhere."""
        settings: dict[Use, str] = {"rollout": rollout, "train": train}
        fixed = tuple(use for use, value in settings.items() if value != "auto")
        dtypes = {
            use: DTYPES[settings[use]] if use in fixed else self.dtype(use) for use in settings
        }
        return dataclasses.replace(
            self, rollout=dtypes["rollout"], train=dtypes["train"], set=fixed
        )

    def dtype(self, use: Use) -> torch.dtype:
        return self.rollout if use == "rollout" else self.train

    def describe(self) -> str:
        """One log line, e.g. ``auto precision: rollout fp32, train fp32 (measured: bf16 is
        0.62x as fast as fp32 for a decoder layer's forward+backward, 0.81x for decoding)``."""
        named = {
            use: DTYPE_NAMES[self.dtype(use)] + (" (set)" if use in self.set else "")
            for use in ("rollout", "train")
        }
        head = f"auto precision: rollout {named['rollout']}, train {named['train']}"
        if self.timings is None:
            return f"{head} ({self.source})"
        t = self.timings
        return (
            f"{head} ({self.source} on this machine: bf16 runs {t.speedup('train'):.2f}x as fast "
            f"as fp32 for a decoder layer's forward+backward, {t.speedup('rollout'):.2f}x for "
            f"decoding; bf16 needs {BF16_MARGIN}x)"
        )

    def record(self) -> dict[str, Any]:
        """The choice as plain data (the run directory's ``precision.json``)."""
        return {
            "summary": self.describe(),
            "rollout.dtype": DTYPE_NAMES[self.rollout],
            "train.autocast": DTYPE_NAMES[self.train],
            "source": self.source,
            "timings_s": None if self.timings is None else asdict(self.timings),
            "bf16_margin": BF16_MARGIN,
            "cache_file": self.cache_file,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        }


def decide(timings: Timings, margin: float = BF16_MARGIN) -> tuple[torch.dtype, torch.dtype]:
    """(rollout dtype, train dtype): bf16 for a side whose probe ran at least ``margin`` times
    faster in bf16, fp32 otherwise."""

    def pick(use: Use) -> torch.dtype:
        return torch.bfloat16 if timings.speedup(use) >= margin else torch.float32

    return pick("rollout"), pick("train")


class _Layer(nn.Module):
    """A pre-norm decoder layer of Llama's form at the given shapes: RMSNorm, causal
    multi-head attention (fused q/k/v; in fp32 under autocast while training, as
    :mod:`rlvr.train_attention` computes it), RMSNorm, SwiGLU MLP. The same matmuls as the
    model's layer, without its architecture's details (the probe times precision, not a
    model)."""

    def __init__(self, shapes: Shapes) -> None:
        super().__init__()
        h, i = shapes.hidden, shapes.intermediate
        self.heads = shapes.heads
        self.norm1, self.norm2 = nn.RMSNorm(h), nn.RMSNorm(h)
        self.qkv, self.out = nn.Linear(h, 3 * h, bias=False), nn.Linear(h, h, bias=False)
        self.gate_up, self.down = nn.Linear(h, 2 * i, bias=False), nn.Linear(i, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, T, hidden] -> [B, T, hidden]."""
        b, t, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, h // self.heads).unbind(2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if train_attention.upcast(q, k, v):  # as the training forward computes it
            with torch.autocast("cpu", enabled=False):
                attn = F.scaled_dot_product_attention(
                    q.float(), k.float(), v.float(), is_causal=True
                ).to(v.dtype)
        else:
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attn.transpose(1, 2).reshape(b, t, h))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


def _best_of(fn: Callable[[], Any], repeats: int, slower_than: float | None = None) -> float:
    """The best time of ``repeats`` calls of ``fn`` after a warm-up call. With
    ``slower_than`` (the other precision's best), stop as soon as a call shows this side
    cannot win: a warm-up 3 times slower, or a timed call slower (emulated bf16 can be 20
    times slower than fp32: measuring it well would cost seconds and decide nothing)."""
    start = time.perf_counter()
    fn()  # warm-up: kernels picked, buffers allocated
    warm = time.perf_counter() - start
    if slower_than is not None and warm > 3 * slower_than:
        return warm
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
        if slower_than is not None and best > slower_than:
            break
    return best


def measure(shapes: Shapes, repeats: int = 3) -> Timings:
    """Time the probes on the CPU (see the module docstring): about a second at most."""
    generator = torch.Generator().manual_seed(0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer = _Layer(shapes)
    block = torch.randn(4, max(1, shapes.train_tokens // 4), shapes.hidden, generator=generator)
    rows = torch.randn(shapes.decode_rows, 1, shapes.hidden, generator=generator)
    prompt = torch.randn(4, 32, shapes.hidden, generator=generator)

    def train(dtype: torch.dtype, slower_than: float | None = None) -> float:
        def step() -> None:
            layer.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
                loss = layer(block).float().square().mean()
            loss.backward()

        return _best_of(step, repeats, slower_than)

    def rollout(dtype: torch.dtype, slower_than: float | None = None) -> float:
        cast = _Layer(shapes).to(dtype)
        cast.load_state_dict(layer.state_dict())
        inputs = (rows.to(dtype), prompt.to(dtype))

        @torch.inference_mode()
        def forward() -> None:
            for _ in range(4):  # four decoding steps per prompt block, as a rollout runs
                cast(inputs[0])
            cast(inputs[1])

        return _best_of(forward, repeats, slower_than)

    train_fp32, rollout_fp32 = train(torch.float32), rollout(torch.float32)
    timings = Timings(
        train_fp32=train_fp32,
        train_bf16=train(torch.bfloat16, slower_than=train_fp32),
        rollout_fp32=rollout_fp32,
        rollout_bf16=rollout(torch.bfloat16, slower_than=rollout_fp32),
    )
    if max(timings.speedup("train"), timings.speedup("rollout")) < BF16_MARGIN:
        return timings
    # bf16 won a side: measure both precisions once more, in the other order, and keep each
    # one's best. A CPU shared with another busy process can slow one measurement tens of
    # times (threads waiting on a core taken away); one noisy round must not pick bf16.
    again_bf16 = (train(torch.bfloat16), rollout(torch.bfloat16))
    again_fp32 = (train(torch.float32), rollout(torch.float32))
    return Timings(
        train_fp32=min(timings.train_fp32, again_fp32[0]),
        train_bf16=min(timings.train_bf16, again_bf16[0]),
        rollout_fp32=min(timings.rollout_fp32, again_fp32[1]),
        rollout_bf16=min(timings.rollout_bf16, again_bf16[1]),
    )


def cpu_identity() -> dict[str, Any]:
    """What makes one CPU's timings differ from another's: model, flags, threads, torch."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())  # the first CPU's lines
    except OSError:
        pass
    model = fields.get("model name") or platform.processor() or platform.machine()
    flags = " ".join(sorted((fields.get("flags") or fields.get("Features") or "").split()))
    return {
        "cpu": model,
        "flags": hashlib.sha256(flags.encode()).hexdigest()[:16],
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "probe": PROBE_VERSION,
    }


def _cache_file(shapes: Shapes, root: Path) -> tuple[Path, dict[str, Any]]:
    key = {**cpu_identity(), "shapes": asdict(shapes)}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return root / "precision" / f"{digest}.json", key


def _read_cached(path: Path, key: dict[str, Any]) -> Timings | None:
    try:
        stored = json.loads(path.read_text())
        if stored.get("key") != key:
            return None
        return Timings(**stored["timings_s"])
    except (OSError, ValueError, TypeError, KeyError):
        return None  # missing, unreadable or from another format: measure again


def _write_cache(path: Path, key: dict[str, Any], timings: Timings) -> None:
    """Write atomically; a cache that cannot be written is only a lost shortcut."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps({"key": key, "timings_s": asdict(timings)}, indent=2) + "\n")
        os.replace(tmp, path)
    except OSError as err:
        _log.warning("could not cache the precision measurement in %s: %s", path, err)


def cpu_choice(shapes: Shapes, root: Path | None = None) -> Choice:
    """The CPU's choice for ``shapes``: cached, else measured now and cached."""
    path, key = _cache_file(shapes, root or cache_dir())
    timings = _read_cached(path, key)
    source = "cached"
    if timings is None:
        timings, source = measure(shapes), "measured"
        _write_cache(path, key, timings)
    rollout, train = decide(timings)
    return Choice(rollout, train, source, timings, str(path))


@functools.cache
def _cpu_choice_once(shapes: Shapes) -> Choice:
    choice = cpu_choice(shapes)
    _log.info(choice.describe())
    return choice


def choose(device: torch.device | str = "cpu", model_config: Any | None = None) -> Choice:
    """What ``auto`` means on ``device`` for a model of ``model_config``'s shapes (see the
    module docstring); on a CPU, one measurement per process and shapes (then the cache's)."""
    device = torch.device(device)
    if device.type == "cuda":
        bf16 = torch.cuda.is_bf16_supported()
        dtype = torch.bfloat16 if bf16 else torch.float32
        return Choice(dtype, dtype, "cuda" if bf16 else "no bf16")
    if device.type != "cpu":
        return Choice(torch.float32, torch.float32, "no bf16")
    return _cpu_choice_once(Shapes.of(model_config))


def auto_dtype(
    device: torch.device | str = "cpu", model_config: Any | None = None, use: Use = "rollout"
) -> torch.dtype:
    """The dtype ``auto`` stands for on ``device``, for the engine (``"rollout"``) or training
    autocast (``"train"``)."""
    return choose(device, model_config).dtype(use)


def resolve(
    setting: str, device: torch.device | str, model_config: Any | None, use: Use
) -> torch.dtype:
    """A precision setting (``rollout.dtype``, ``train.autocast``: ``auto``, ``bf16`` or
    ``fp32``) as the dtype it stands for on ``device``."""
    return auto_dtype(device, model_config, use) if setting == "auto" else DTYPES[setting]
