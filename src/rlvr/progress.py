"""What a user sees of a training run while it runs: a live status line in a terminal, one
plain line per step in a log file, and a warning when nothing is learning.

In a terminal (``console.is_terminal``) a rich live line shows the phase (sampling, scoring,
training, eval, checkpoint), step N/M, reward, accuracy, length, s/step, elapsed time and ETA.
Elsewhere (nohup, SLURM, a pipe) there is no live line: each step prints one line such as
``step 3/30 reward 0.412 acc 0.38 len 41 s/step 12.1 elapsed 0:00:36 eta 0:05:27`` (flushed at
once, no markup, never wrapped), and the long phases (eval, checkpoint) a line at their start
and end.

Timing is wall-clock time of this process only:

* elapsed time starts when step 1 of this process starts (its first ``sampling`` phase), so
  model loading and the evaluation before training do not count;
* s/step is the mean time from one step's end to the next one's, which includes everything
  the loop does (sampling, scoring, training, periodic evals and checkpoints); the first step
  of the process is left out of the mean because it alone pays one-off costs (CUDA context and
  kernel compilation, allocator growth, tokenizer and prompt caches), which would otherwise
  inflate the ETA of a long run; the ETA is s/step times the steps left, from step 2 on.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

STARTUP_QUIET_S = 2.0
"""A start-up phase that ends sooner prints nothing (a tiny model's run starts quietly)."""


@contextlib.contextmanager
def startup(what: str, quiet_s: float = STARTUP_QUIET_S) -> Iterator[None]:
    """A phase of a run's start-up (loading the policy, choosing the precision, building the
    engine): ``start: WHAT ...`` on stderr once it has run ``quiet_s`` seconds, and ``start:
    WHAT: N s`` when it ends, so a large model's minutes of start-up show where they go."""
    began = time.perf_counter()
    timer = threading.Timer(
        quiet_s, lambda: print(f"start: {what} ...", file=sys.stderr, flush=True)
    )
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        seconds = time.perf_counter() - began
        if seconds >= quiet_s:
            print(f"start: {what}: {seconds:.1f} s", file=sys.stderr, flush=True)


PHASES = ("sampling", "scoring", "training", "eval", "checkpoint")
"""Phases of a step; ``sampling`` starts a step."""

LONG_PHASES = ("eval", "checkpoint")
"""Phases that print a start and an end line when output is not a terminal."""

FIELDS = (
    ("reward", "reward/mean", "{:.3f}"),
    ("acc", "reward/accuracy", "{:.2f}"),
    ("len", "response/length_mean", "{:.0f}"),
    ("turns", "episodes/turns_mean", "{:.1f}"),  # agent episodes: turns per episode ...
    ("tool err", "tools/invalid_frac", "{:.0%}"),  # ... and the invalid (failed) actions
)
"""(label, metrics key, format) of the step metrics shown on the status line."""

PROMPT_CHARS = 300  # characters of a sample's prompt shown in the stall warning
COMPLETION_CHARS = 600  # ... and of its completion


def worker_throughput(metrics: Mapping[str, float]) -> list[float]:
    """Each rollout worker's sampled tokens per second (``rollout/worker{i}/tokens_per_s``), in
    worker order (empty in one process)."""
    found = {}
    for key, value in metrics.items():
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == "rollout" and parts[1].startswith("worker"):
            if parts[2] == "tokens_per_s" and parts[1][6:].isdigit():
                found[int(parts[1][6:])] = value
    return [found[i] for i in sorted(found)]


def clock_text(seconds: float | None) -> str:
    """``H:MM:SS`` of a duration ("-" when unknown), e.g. ``clock_text(327.4) == "0:05:27"``."""
    return "-" if seconds is None else str(_dt.timedelta(seconds=round(seconds)))


def mean_step_seconds(step_ends: list[float], step1_start: float) -> float | None:
    """Seconds per step for the ETA, from the end times of the steps done in this process.

    Args:
        step_ends: clock readings at the end of each step of this process, in order.
        step1_start: clock reading at the start of the process's first step.
    Returns:
        The mean interval between consecutive step ends (the first step left out) once two
        steps are done; the first step's duration after one; None before.
    """
    if len(step_ends) >= 2:
        return (step_ends[-1] - step_ends[0]) / (len(step_ends) - 1)
    return step_ends[0] - step1_start if step_ends else None


def stalled(metrics: Mapping[str, float]) -> bool:
    """True when no group of the step had a learning signal: every group's rewards were equal
    (``groups/zero_variance_frac`` 1), or dynamic sampling found no group with unequal rewards
    in any draw (``sampling/informative_frac`` 0, its batch then holds no group at all)."""
    return (
        metrics.get("groups/zero_variance_frac", 0.0) >= 1.0
        or metrics.get("sampling/informative_frac", 1.0) <= 0.0
    )


@dataclass
class StallDetector:
    """Says when ``k`` steps in a row had no learning signal (:func:`stalled`): once per stall,
    and again only after some step learned and the run stalled again.

    Attributes:
        k: stalled steps in a row that make a stall (>= 1).
        streak: stalled steps in a row so far.
        fired: whether the current stall was reported.
    """

    k: int = 3
    streak: int = 0
    fired: bool = False

    def observe(self, metrics: Mapping[str, float]) -> bool:
        """Account for one step's metrics; True exactly at the step that completes a stall."""
        if not stalled(metrics):
            self.streak, self.fired = 0, False
            return False
        self.streak += 1
        if self.streak >= self.k and not self.fired:
            self.fired = True
            return True
        return False


def _clip(text: Any, limit: int) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more chars)"


def _indented(label: str, text: str) -> str:
    return f"  {label}: " + text.replace("\n", "\n    ")


def first_action(transcript: list[Any], turn_rewards: list[Any] | None) -> int:
    """The index in an agent episode's ``transcript`` of the policy's first action: each action
    has a turn reward, so the actions are the last ``len(turn_rewards)`` assistant messages;
    assistant messages before them are the prompt's (a worked example the environment put in
    the chat). Without turn rewards: the first assistant message."""
    actions = [
        i for i, m in enumerate(transcript) if isinstance(m, dict) and m.get("role") == "assistant"
    ]
    if not actions:
        return len(transcript)
    n = len(turn_rewards) if isinstance(turn_rewards, list) else len(actions)
    return actions[max(0, len(actions) - n)] if n else len(transcript)


def episode_text(transcript: list[Any], turn_rewards: list[Any] | None) -> str:
    """The policy's part of an agent episode as plain text: every message from its first action
    on, one ``[role] content`` block each (actions labelled with their turn and reward)."""
    rewards = turn_rewards if isinstance(turn_rewards, list) else []
    blocks, turn = [], 0
    for message in transcript[first_action(transcript, turn_rewards) :]:
        role = message.get("role", "?") if isinstance(message, dict) else "?"
        content = message.get("content", "") if isinstance(message, dict) else str(message)
        if role == "assistant":
            reward = f"{float(rewards[turn]):.3f}" if turn < len(rewards) else "-"
            role, turn = f"turn {turn + 1}, reward {reward}", turn + 1
        blocks.append(f"[{role}] {content}")
    return "\n".join(blocks)


def stall_message(k: int, reward: float, sample: Mapping[str, Any]) -> str:
    """The "nothing is learning" warning (plain text) with one sample of the step.

    Args:
        k: stalled steps in a row.
        reward: the last step's mean reward (``reward/mean``).
        sample: a ``samples.jsonl`` row: ``prompt``, ``completion``, ``reward`` and optionally
            ``answer`` and ``terms`` (``{reward term: unweighted value}``, may be empty); an
            agent episode's row also has ``transcript`` and ``turn_rewards``, and the whole
            episode is shown (every action and observation), not only its last action.
    """
    terms = sample.get("terms") or {}
    breakdown = ", ".join(f"{name} {float(value):.3f}" for name, value in terms.items())
    lines = [
        f"nothing is learning: every group's rewards are equal for {k} steps "
        f"(reward {reward:.3f}); check the reward against a sample:",
        _indented("prompt", _clip(sample.get("prompt"), PROMPT_CHARS)),
    ]
    if sample.get("answer") is not None:
        lines.append(_indented("answer", _clip(sample["answer"], PROMPT_CHARS)))
    if isinstance(sample.get("transcript"), list):
        text = episode_text(sample["transcript"], sample.get("turn_rewards"))
        lines.append(_indented("episode", _clip(text, 4 * COMPLETION_CHARS)))
    else:
        lines.append(_indented("completion", _clip(sample.get("completion"), COMPLETION_CHARS)))
    reward_text = f"{float(sample['reward']):.3f}" if "reward" in sample else "-"
    lines.append(_indented("reward", reward_text + (f" ({breakdown})" if breakdown else "")))
    return "\n".join(lines)


class ProgressDisplay:
    """The training run's progress (see the module docstring)::

        with ProgressDisplay(cfg.train.steps, state.step, cfg.logging.progress) as p:
            while step < cfg.train.steps:
                p.phase("sampling")  # first, at the start of every step
                metrics, sample = run_one_step()  # sample, score, train
                step += 1
                p.update(step, metrics)
                p.stall_check(metrics, sample)

    A step without a ``sampling`` phase is timed from the ``with``.

    Args:
        total: the run's last step.
        start: the step the process starts after (0, or the resumed checkpoint's step).
        enabled: False shows no step lines or live line (``print`` and ``warn`` still print).
        console: where to write; default a new rich Console on stdout.
        stall_steps: stalled steps in a row before the "nothing is learning" warning.
        clock: monotonic seconds (a parameter for tests).
    """

    def __init__(
        self,
        total: int,
        start: int = 0,
        enabled: bool = True,
        console: Console | None = None,
        stall_steps: int = 3,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.console = console or Console()
        self.total, self.step, self.enabled = total, start, enabled
        self.live_mode = enabled and self.console.is_terminal
        self.clock = clock
        self.stall = StallDetector(stall_steps)
        self.current_phase: str | None = None
        self.phase_started = 0.0
        self.entered = clock()
        self.step1_start: float | None = None
        self.step_ends: list[float] = []
        self.metrics: Mapping[str, float] = {}
        self.live: Live | None = None

    def __enter__(self) -> ProgressDisplay:
        self.entered = self.clock()
        if self.live_mode:
            self.live = Live(console=self.console, get_renderable=self._renderable)
            self.live.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._end_phase()
        if self.live is not None:
            self.live.stop()
            self.live = None

    def phase(self, name: str) -> None:
        """Enter a phase of the current step (one of :data:`PHASES`); the first ``sampling``
        of the process starts the elapsed-time clock."""
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; expected one of {', '.join(PHASES)}")
        if name == "sampling" and self.step1_start is None:
            self.step1_start = self.clock()
        if name == self.current_phase or not self.enabled:
            return
        self._end_phase()
        self.current_phase, self.phase_started = name, self.clock()
        if not self.live_mode and name in LONG_PHASES:
            self._plain(f"{name}: started")

    def update(self, step: int, metrics: Mapping[str, float]) -> None:
        """Step ``step`` is done with these metrics (a ``metrics.jsonl`` row)."""
        now = self.clock()
        if self.step1_start is None:  # no phase was reported: the step ran since `with`
            self.step1_start = self.entered
        self.step, self.metrics = step, metrics
        self.step_ends.append(now)
        self._end_phase()
        if self.enabled and not self.live_mode:
            self._plain(self.status_text())

    def stall_check(self, metrics: Mapping[str, float], sample: Mapping[str, Any]) -> bool:
        """Feed a step's metrics to the stall detector; warn with ``sample`` (a
        ``samples.jsonl`` row of the step, see :func:`stall_message`) when the run has just
        stalled. Returns whether it warned."""
        if not self.stall.observe(metrics):
            return False
        self.warn(stall_message(self.stall.k, metrics.get("reward/mean", float("nan")), sample))
        return True

    def print(self, text: str) -> None:
        """A message above the live line (rich markup; printed as plain text when the output
        is not a terminal)."""
        if self.console.is_terminal:
            self.console.print(text)
        else:
            self._plain(Text.from_markup(text).plain)

    def warn(self, text: str) -> None:
        """A warning (plain text, may span lines), marked ``warning:``."""
        if self.console.is_terminal:
            self.console.print(Text.assemble(("warning: ", "bold yellow"), text))
        else:
            self._plain(f"warning: {text}")

    def elapsed(self) -> float | None:
        """Seconds since this process's first step started (None before)."""
        return None if self.step1_start is None else self.clock() - self.step1_start

    def fields(self) -> list[tuple[str, str]]:
        """(label, value) of the status line after the step: metrics, s/step, elapsed, eta."""
        out = [
            (label, fmt.format(self.metrics[key]))
            for label, key, fmt in FIELDS
            if key in self.metrics
        ]
        workers = worker_throughput(self.metrics)
        if workers:  # Ray rollout workers: sampled tokens per second, each
            out.append(("tok/s", "/".join(f"{v:.0f}" for v in workers)))
        if self.metrics.get("staleness/max"):
            out.append(("stale", f"{self.metrics['staleness/max']:.0f}"))
        per_step = mean_step_seconds(self.step_ends, self.step1_start or self.entered)
        eta = per_step * (self.total - self.step) if len(self.step_ends) >= 2 else None
        if per_step is not None:
            out.append(("s/step", f"{per_step:.1f}"))
        out += [("elapsed", clock_text(self.elapsed())), ("eta", clock_text(eta))]
        return out

    def status_text(self) -> str:
        """The plain status line, e.g. ``step 3/30 reward 0.412 ... eta 0:05:27``."""
        return " ".join([f"step {self.step}/{self.total}"] + [f"{k} {v}" for k, v in self.fields()])

    def _end_phase(self) -> None:
        if self.current_phase is None:
            return
        if not self.live_mode and self.current_phase in LONG_PHASES:
            took = clock_text(self.clock() - self.phase_started)
            self._plain(f"{self.current_phase}: done in {took}")
        self.current_phase = None

    def _plain(self, line: str) -> None:
        """One line of plain output: never wrapped, no markup, flushed (log files)."""
        self.console.print(Text(line), soft_wrap=True, highlight=False)
        self.console.file.flush()

    def _renderable(self) -> _StatusLine:
        return _StatusLine(self)


@dataclass
class _StatusLine:
    """The live line: phase, step N/M, a bar when there is room, then the fields."""

    display: ProgressDisplay

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        d = self.display
        head = Text(f"{d.current_phase or '':<10}", style="cyan")
        head.append(f" step {d.step}/{d.total}", style="bold")
        stats = Text("  ".join(f"{k} {v}" for k, v in d.fields()))
        bar_width = 20
        if options.max_width < head.cell_len + stats.cell_len + bar_width + 2:
            yield head + Text(" ") + stats
            return
        grid = Table.grid(padding=(0, 1))
        grid.add_row(
            head,
            ProgressBar(total=max(d.total, 1), completed=d.step, width=bar_width),
            stats,
        )
        yield grid
