"""Shared fixtures: an isolated rlvr cache and tiny random models built in-process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# A cache shared by the whole test session (tiny models are built once, SmolLM2 converted once).
os.environ.setdefault("RLVR_CACHE", str(Path(__file__).resolve().parent.parent / ".cache-tests"))
torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def tiny():
    """(model fp32, tokenizer) of the tiny random Llama."""
    from rlvr.models import load_model, load_tokenizer

    return load_model("tiny-random-llama"), load_tokenizer("tiny-random-llama")
