"""Shared fixtures: an isolated rlvr cache and tiny random models built in-process; the
pytest-xdist groups of modules that must run on one worker."""

from __future__ import annotations

import os
from pathlib import Path

# Before torch loads libgomp (here, in every pytest-xdist worker, and inherited by the CLI
# subprocesses and Ray actors the tests start): OpenMP threads sleep as soon as a parallel
# region ends instead of spinning. Three workers of 2 threads each on CI's 2 cores otherwise
# burn the cores in spin-waits; on a 2-core Intel Xeon, where a PAUSE takes ~140 cycles, 3
# processes doing small matmuls took 20-25 s instead of 5-6 s (2.6 s alone either way), and the
# suite 1040 s instead of ~600 s (the Ray group 3x its time alone).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402

# A cache shared by the whole test session (tiny models are built once, SmolLM2 converted once).
# Its writes are atomic (save under a temporary name, then rename), so xdist workers can share it.
os.environ.setdefault("RLVR_CACHE", str(Path(__file__).resolve().parent.parent / ".cache-tests"))
torch.set_num_threads(min(2, os.cpu_count() or 1))

# pytest imports readline at start-up, and GNU readline exports the terminal's size (80x24
# without one) as COLUMNS and LINES to the C environment, so pytest-xdist's workers start with
# COLUMNS=80. rlvr.cli's console, made at import, would keep that width for good and ignore
# the COLUMNS the CLI tests set.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

# Modules whose tests run on one pytest-xdist worker, one after the other (`--dist loadgroup`
# in pyproject.toml; other tests go to whichever worker is free):
XDIST_GROUPS = {
    # One Ray cluster at a time: while ray.cluster_utils.Cluster (test_ray_nodes) is up, it
    # advertises itself in /tmp/ray/ray_current_cluster, and ray.init() without an address
    # (test_ray's module-scoped cluster) joins it instead of starting its own (and then refuses
    # num_cpus: ValueError).
    "test_ray.py": "ray",
    "test_ray_nodes.py": "ray",
    # module-scoped fixtures too costly to build once per worker: a vLLM engine, the reference
    # run of the resume tests, a trained reward model, a judged run
    "test_vllm_engine.py": "vllm_engine",
    "test_trainer.py": "trainer",
    "test_reward_model.py": "reward_model",
    "test_eval_judge.py": "eval_judge",
    "test_sharding.py": "sharding",  # one set of 2- and 4-rank process groups
    # checks that the groups above are applied (pytest-xdist 3.8 and pytest 9.2 do not)
    "test_xdist_groups.py": "self_check",
}


# The longest groups first: pytest-xdist hands out work in collection order, and a group runs
# on one worker from start to end, so the Ray group (about 300 s, more than half the suite's
# wall time) must start at once, while the other workers work through the rest; started last
# (test_ray.py sorts late), it ran alone at the end.
FIRST = ("test_ray.py", "test_ray_nodes.py", "test_vllm_engine.py", "test_vllm_training.py")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist turns the marks into its groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of :data:`XDIST_GROUPS`' modules with their ``xdist_group``, and put the
    modules of :data:`FIRST` first (in that order; the rest as collected)."""
    for item in items:
        group = XDIST_GROUPS.get(item.path.name)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))


@pytest.fixture(scope="session")
def tiny():
    """(model fp32, tokenizer) of the tiny random Llama."""
    from rlvr.models import load_model, load_tokenizer

    return load_model("tiny-random-llama"), load_tokenizer("tiny-random-llama")


@pytest.fixture(scope="session")
def smol_tok():
    """SmolLM2-135M-Instruct's tokenizer (its chat template: the episodes' token tests)."""
    from rlvr.models import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")
