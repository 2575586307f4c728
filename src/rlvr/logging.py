"""Metric sinks (``metrics.jsonl``, TensorBoard), completion samples, and the progress display."""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

from rlvr.config import ConfigError

NONFINITE_TEXT = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _json_value(value: float) -> float | str:
    """A metric as JSON: finite numbers as numbers, NaN/inf as the strings "nan", "inf" and
    "-inf" (never null: a non-finite metric is a fault that must stay visible)."""
    value = float(value)
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (nested in dicts and lists too) as its text."""
    if isinstance(value, float):
        return _json_value(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def _parse_row(row: dict[str, Any]) -> dict[str, Any]:
    """A metrics row with "nan"/"inf"/"-inf" strings turned back into floats."""
    return {k: NONFINITE_TEXT.get(v, v) if isinstance(v, str) else v for k, v in row.items()}


class MetricsLogger:
    """Appends one JSON line per step to ``RUN/metrics.jsonl`` and mirrors it to TensorBoard and,
    when ``wandb`` is given (``{"project", "mode", "name"}`` plus ``"config"``: the run's config
    as a dict), to Weights & Biases (offline mode writes under ``RUN/wandb``).

    On resume, lines of steps after the checkpoint are dropped first (they belong to the
    abandoned continuation), so the file holds exactly one line per completed step; TensorBoard
    drops their points too (the new event file starts with a purge of the steps after the
    checkpoint, SummaryWriter's ``purge_step``).
    """

    def __init__(
        self,
        run_dir: Path,
        tensorboard: bool = True,
        resume_step: int | None = None,
        wandb: dict[str, Any] | None = None,
    ):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.samples_path = Path(run_dir) / "samples.jsonl"
        self.repaired_lines = 0  # lines of a killed run's files that did not parse, dropped
        if resume_step is not None:
            self.repaired_lines += truncate_after(self.path, resume_step)
            self.repaired_lines += truncate_after(self.samples_path, resume_step)
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(
                log_dir=str(Path(run_dir) / "tensorboard"),
                purge_step=None if resume_step is None else resume_step + 1,
            )
        self.wandb_run = None if wandb is None else _start_wandb(Path(run_dir), **wandb)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{k: _json_value(v) for k, v in metrics.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self.writer is not None:
            for key, value in metrics.items():
                if math.isfinite(float(value)):
                    self.writer.add_scalar(key, float(value), step)
            self.writer.flush()
        if self.wandb_run is not None:
            self.wandb_run.log({k: float(v) for k, v in metrics.items()}, step=step)

    def log_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        with self.samples_path.open("a") as f:
            for sample in samples:
                f.write(json.dumps(_json_safe({"step": step, **sample})) + "\n")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()


def _start_wandb(
    run_dir: Path, project: str, mode: str, name: str | None, config: dict[str, Any]
) -> Any:
    """A W&B run for ``run_dir``; its id is derived from the directory, so a resumed run
    continues the same W&B run."""
    try:
        import wandb
    except ImportError:
        raise ConfigError(
            "logging.wandb is set but wandb is not installed: pip install 'rlvr[wandb]' "
            "(or pip install wandb), or remove logging.wandb"
        ) from None
    run_id = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16]
    return wandb.init(
        project=project,
        mode=mode,
        name=name or run_dir.name,
        id=run_id,
        resume="allow",
        dir=str(run_dir),
        config=config,
    )


def _json_lines(path: Path) -> list[tuple[str, dict[str, Any] | None]]:
    """Each line of a JSON-lines file with its parsed value (None where it does not parse: a
    line half-written when the process was killed)."""
    out: list[tuple[str, dict[str, Any] | None]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            value = None
        out.append((line, value if isinstance(value, dict) else None))
    return out


def truncate_after(path: Path, step: int) -> int:
    """Keep only the JSON lines of ``path`` whose ``step`` is at most ``step``; lines that do not
    parse (a half-written last line after a kill) are dropped. Returns how many were dropped
    for not parsing."""
    if not path.is_file():
        return 0
    lines = _json_lines(path)
    keep = [line for line, row in lines if row is not None and row.get("step", 0) <= step]
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")  # a kill mid-write keeps the old file
    tmp.write_text("".join(line + "\n" for line in keep), encoding="utf-8")
    os.replace(tmp, path)
    return sum(row is None for _, row in lines)


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """All rows of a run's ``metrics.jsonl`` (non-finite values as float NaN/inf; a line that
    does not parse is skipped)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    return [_parse_row(row) for _, row in _json_lines(path) if row is not None]
