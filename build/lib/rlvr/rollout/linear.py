"""Linear layers on prepacked weights (oneDNN, CPU) for the decode loop.

On CPU ``F.linear`` runs bf16 on oneDNN with the weight in its plain layout, which oneDNN
reorders into its blocked layout at every call, and fp32 on MKL. Reordering once and calling
oneDNN on the packed weight (``mkldnn::_reorder_linear_weight`` / ``mkldnn::_linear_pointwise``,
the ops that ``torch.compile``'s CPU weight freezing emits) measured, per call on the 2-core AMD
EPYC of bench/generation.py at the shapes of SmolLM2-135M (576 x 576 .. 49152 x 576, 1-64 rows):
bf16 1.1-2.5x faster with bit-identical outputs; fp32 2.3-2.6x faster than MKL (which ran at
AVX2 speed on that CPU), the same fp32 arithmetic in another summation order (outputs differ by
~1e-6 relative).

:class:`PackedLinear` keeps one packed copy per weight (memory: a second copy of the projection
weights) and repacks a weight only when it changed (a new tensor, or an in-place update seen by
the tensor's version counter), so callers just pass the model's current weights. Where the ops
are missing or disagree with ``F.linear`` on a self-test (other builds, devices or dtypes) it
is ``F.linear`` on the plain weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_PACKABLE = (torch.float32, torch.bfloat16)


def _packed_ops_work(dtype: torch.dtype) -> bool:
    """Whether the oneDNN ops exist and agree with ``F.linear`` on a small CPU example."""
    try:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(3, 24, generator=g).to(dtype)
        w = torch.randn(40, 24, generator=g).to(dtype)
        b = torch.randn(40, generator=g).to(dtype)
        packed = torch.ops.mkldnn._reorder_linear_weight(w)
        got = torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], "")
    except (AttributeError, RuntimeError):
        return False
    return torch.allclose(got.float(), F.linear(x, w, b).float(), rtol=1e-2, atol=1e-2)


class PackedLinear:
    """``y = x @ W^T + b`` with W prepacked once per weight version (see module docstring).

    Args:
        dtype: the weights' dtype; device: their device. Packing is used for fp32 and bf16 on
            CPU when the self-test passes (``self.enabled``).
    """

    def __init__(self, dtype: torch.dtype, device: torch.device) -> None:
        self.enabled = (
            device.type == "cpu"
            and dtype in _PACKABLE
            and torch.backends.mkldnn.is_available()
            and _packed_ops_work(dtype)
        )
        self._packed: dict[int, tuple[torch.Tensor, int, torch.Tensor]] = {}

    def pack(self, weights: list[torch.Tensor]) -> list[torch.Tensor]:
        """The packed forms of ``weights`` (each [out, in]) to pass to :meth:`__call__`: the
        weights themselves when packing is disabled. Only changed weights are repacked; copies
        of weights not in this call are dropped."""
        if not self.enabled:
            return weights
        cache = {}
        for weight in weights:
            version = -1 if weight.is_inference() else weight._version  # -1: always repack
            entry = self._packed.get(id(weight))
            if entry is None or entry[0] is not weight or entry[1] != version or version < 0:
                with torch.no_grad():
                    entry = (weight, version, torch.ops.mkldnn._reorder_linear_weight(weight))
            cache[id(weight)] = entry
        self._packed = cache
        return [cache[id(w)][2] for w in weights]

    def __call__(
        self, x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        """[N, in] x, a weight from :meth:`pack` and an optional [out] bias -> [N, out]."""
        if not self.enabled:
            return F.linear(x, packed, bias)
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
