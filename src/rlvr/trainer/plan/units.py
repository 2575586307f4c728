"""Memory sizes: bytes from the text a user writes (``80GB``, ``24GiB``), and bytes as the plan
prints them (GiB, MiB below one)."""

from __future__ import annotations

import re

from rlvr.config import ConfigError

GiB = 2**30
"""Bytes in a gibibyte (2**30)."""

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
