"""Where a run's tensors live: ``train.device`` resolved to a ``torch.device``.

``auto`` is the first CUDA device when one is available, else the CPU. Everything of the
training side (policy, reference, value head, batches) and the rollout engine live there;
CPU-only speed-ups (oneDNN prepacked linears, the decode attention kernel) stay on the CPU,
and CUDA uses PyTorch's SDPA attention and bf16 autocast.
"""

from __future__ import annotations

import torch

from rlvr.errors import RlvrError


class DeviceError(RlvrError, ValueError):
    """A device was asked for that this machine does not have."""


def resolve_device(name: str, cuda_available: bool | None = None) -> torch.device:
    """``auto`` | ``cpu`` | ``cuda`` | ``cuda:N`` -> a device this machine has.

    Args:
        name: the config value (``train.device``).
        cuda_available: whether CUDA is usable (default: ``torch.cuda.is_available()``; a
            parameter for tests).
    Raises:
        DeviceError: CUDA was asked for and is not available, or ``cuda:N`` does not exist.
    """
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    if name == "auto":
        return torch.device("cuda" if cuda_available else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not cuda_available:
            raise DeviceError(
                f"train.device={name}: no CUDA device is available here (torch "
                f"{torch.__version__}); use train.device=cpu or auto"
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise DeviceError(f"train.device={name}: this machine has {count} CUDA device(s)")
    return device
