"""``make gpu-check`` (bench/gpu_check.py) where there is no GPU: it says so, runs nothing and
exits non-zero; its helpers name result files by device and read a demo run's figures."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "gpu_check.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_says_so_and_exits_non_zero(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "no CUDA GPU here" in done.stderr and "nothing was run" in done.stderr
    assert list(tmp_path.iterdir()) == []  # no figures claimed


def test_unknown_steps_are_refused():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--only", "tests,warp-drive"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "unknown steps ['warp-drive']" in done.stderr


def test_device_names_become_file_names_and_demo_figures_are_read(tmp_path):
    gpu_check = load_script()
    assert gpu_check.slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    rows = [
        {"step": 0, "eval/greedy_accuracy": 0.4},
        {"step": 1, "time/step": 2.0},
        {"step": 2, "time/step": 4.0},
        {"step": 2, "eval/greedy_accuracy": 0.7},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    figures = gpu_check.demo_figures(tmp_path)
    assert figures == {
        "greedy_accuracy_before": 0.4,
        "greedy_accuracy_after": 0.7,
        "steps": 2,
        "seconds_per_step_mean": 3.0,
    }
    assert gpu_check.demo_figures(tmp_path / "missing") == {}


def test_the_tests_step_collects_only_the_files_marked_cuda():
    files = [Path(f).name for f in load_script().cuda_test_files(ROOT / "tests")]
    assert "test_cuda.py" in files and "test_credit.py" in files
    assert "test_trainer.py" not in files and "test_gpu_check.py" not in files
