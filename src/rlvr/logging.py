"""Metric sinks (``metrics.jsonl``, TensorBoard), completion samples, and the progress display."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


class MetricsLogger:
    """Appends one JSON line per step to ``RUN/metrics.jsonl`` and mirrors it to TensorBoard.

    On resume, lines of steps after the checkpoint are dropped first (they belong to the
    abandoned continuation), so the file holds exactly one line per completed step.
    """

    def __init__(self, run_dir: Path, tensorboard: bool = True, resume_step: int | None = None):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.samples_path = Path(run_dir) / "samples.jsonl"
        if resume_step is not None:
            truncate_after(self.path, resume_step)
            truncate_after(self.samples_path, resume_step)
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{k: _finite(float(v)) for k, v in metrics.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self.writer is not None:
            for key, value in metrics.items():
                if math.isfinite(float(value)):
                    self.writer.add_scalar(key, float(value), step)
            self.writer.flush()

    def log_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        with self.samples_path.open("a") as f:
            for sample in samples:
                f.write(json.dumps({"step": step, **sample}) + "\n")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def truncate_after(path: Path, step: int) -> None:
    """Keep only the JSON lines of ``path`` whose ``step`` is at most ``step``."""
    if not path.is_file():
        return
    keep = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= step]
    path.write_text("".join(line + "\n" for line in keep))


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """All rows of a run's ``metrics.jsonl``."""
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


class ProgressDisplay:
    """A rich progress bar: step, reward, accuracy, length, KL, entropy, step time and ETA."""

    FIELDS = (
        ("reward", "reward/mean", "{:.3f}"),
        ("acc", "reward/accuracy", "{:.2f}"),
        ("len", "response/length_mean", "{:.0f}"),
        ("kl", "policy/kl_ref", "{:.4f}"),
        ("ent", "policy/entropy", "{:.3f}"),
        ("s/step", "time/step", "{:.1f}"),
    )

    def __init__(
        self, total: int, start: int = 0, enabled: bool = True, console: Console | None = None
    ):
        self.console = console or Console()
        self.progress = Progress(
            TextColumn("[bold]step"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.console,
            disable=not enabled,
        )
        self.task = self.progress.add_task("train", total=total, completed=start, stats="")

    def __enter__(self) -> ProgressDisplay:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def update(self, metrics: dict[str, float]) -> None:
        parts = [
            f"{label} {fmt.format(metrics[key])}"
            for label, key, fmt in self.FIELDS
            if key in metrics
        ]
        self.progress.update(self.task, advance=1, stats=" · ".join(parts))

    def print(self, *args: Any) -> None:
        self.progress.console.print(*args)
