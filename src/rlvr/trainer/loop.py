"""The loop: one training step after another, each visibly collect -> learn -> publish ->
record (docs/design.md, "One training step").

:meth:`Loop.step` is the whole step:

  1-3. :meth:`~Loop.collect`: the collector's batch of this step (prompts, a group of
       episodes each, rewards; refilled by dynamic sampling), or the batch sampled ahead;
  4.   :meth:`~Loop.learn`: advantages and the policy update (:mod:`rlvr.trainer.learner`);
       with ``rollout.max_staleness`` = k >= 1 the batches of the next k steps are sampled
       meanwhile with the weights before it (:class:`Ahead`);
  5.   :meth:`~Loop.publish`: the rollouts serve the new weights, checked on a probe
       (:mod:`rlvr.trainer.publish_check`: an engine that does not serve them stops the run);
       every ``sync_every`` updates only (semi-online: a snapshot served between syncs);
then :meth:`~Loop.record` logs the step's metrics and samples and runs the guards, and an
evaluation and a checkpoint follow when due. The same loop drives every backend
(:mod:`rlvr.trainer.backends`): only the parts differ.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from rlvr import algorithms, interrupts
from rlvr.checkpoint import CheckpointError, TrainerState, latest_checkpoint, set_aside
from rlvr.config import Config
from rlvr.data import Problem
from rlvr.errors import CollapseError, NonFiniteError
from rlvr.guards import CollapseGuard, NonFiniteGuard, first_nonfinite, memory_hint, resume_hint
from rlvr.logging import MetricsLogger
from rlvr.progress import ProgressDisplay
from rlvr.trainer.batch import Sampled, Samples
from rlvr.trainer.build import RunParts, encode_problem
from rlvr.trainer.collect import Collector
from rlvr.trainer.metrics import fmt_eval, note, sample_rows, staleness, step_metrics
from rlvr.trainer.protocols import Learners, Update
from rlvr.trainer.publish_check import check_publish, make_probe, rounding_floor


def how_to_resume(run_dir: Path, kept: bool) -> str:
    """How a stopped run goes on, as a clause: with ``--resume`` from its last checkpoint, or
    from step 0 when none was written yet (``kept``: the run directory stays, so a new
    ``rlvr train`` would refuse it); a run whose directory was removed starts again."""
    if not kept:
        return "no checkpoint was written yet: start the run again"
    last = latest_checkpoint(run_dir)
    if last is None:
        return (
            "no checkpoint was written yet: resume it from step 0 with: "
            f"rlvr train --resume {run_dir}"
        )
    return f"resume from its last checkpoint ({last.name}) with: rlvr train --resume {run_dir}"


class StopRequested:
    """SIGINT/SIGTERM set a flag; the loop checkpoints at the end of the step and exits.
    A second SIGINT interrupts at once, after ``forced()`` (which says how to resume)."""

    def __init__(self, forced: Callable[[], None] = lambda: None) -> None:
        self.signal: int | None = None
        self.forced = forced

    def __enter__(self) -> StopRequested:
        interrupts.check()  # a Ctrl-C of the start-up that library code swallowed stops it here
        self._old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in self._old:
            signal.signal(s, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            self.forced()
            raise KeyboardInterrupt
        self.signal = signum

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)


class Ahead:
    """Batches sampled ahead of the learner (``rollout.max_staleness`` = k >= 1): while step t
    trains, the batches of steps up to t + k are sampled with the weights before its update, so
    no batch is more than k policy versions old when it is trained on (AReaL, Fu et al. 2025;
    verl's one-step off-policy with k = 1). k = 0 samples every batch when its step starts."""

    def __init__(
        self,
        collector: Collector,
        limit: int,
        last_step: int,
        batches: list[Sampled],
    ) -> None:
        self.collector, self.limit, self.last_step = collector, limit, last_step
        self.batches = batches  # [(step, Samples, metrics)], oldest first

    def take(self, step: int) -> tuple[Samples, dict[str, float]]:
        """Step ``step``'s batch: sampled ahead, or now."""
        if self.batches:
            sampled_for, data, metrics = self.batches.pop(0)
            assert sampled_for == step, (sampled_for, step)
            return data, metrics
        return self.collector.collect(step)

    def fill(self, step: int) -> None:
        """Sample the batches of steps step + 1 .. step + k not sampled yet."""
        while len(self.batches) < self.limit:
            nxt = step + 1 + len(self.batches)
            if nxt > self.last_step:
                return
            self.batches.append((nxt, *self.collector.collect(nxt)))


class Loop:
    """The steps of a run over its built parts, from ``state`` (step 0, or a checkpoint's).

    Attributes:
        cfg, run_dir, parts: the run's config, directory and parts.
        state: the step reached and its counters (checkpointed).
        ahead: the batches sampled ahead (``pending`` of a loaded checkpoint at first).
        logger, progress: the metrics sinks and the progress display.
        eval_problems: the held-out problems evaluated.
        guard, collapse: the non-finite and collapsed-policy streaks that stop a run.
        last_saved: the step of the newest checkpoint written or loaded (-1: none).
        first_step_done: called once the first step is logged (the run directory is then the
            run's for good).
        kept: whether the run directory stays if the run stops now: a resumed run's always
            does (``resumed``), a new run's once its first step is logged.
        pending_stats: what loading the data left out, logged with the first row.
    """

    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        parts: RunParts,
        state: TrainerState,
        pending: list[Sampled],
        logger: MetricsLogger,
        progress: ProgressDisplay,
        eval_problems: list[Problem],
        last_saved: int,
        first_step_done: Callable[[], None],
        resumed: bool,
    ) -> None:
        self.cfg, self.run_dir, self.parts, self.state = cfg, run_dir, parts, state
        self.learners: Learners = parts.learners
        self.collector = parts.collector
        self.ahead = Ahead(self.collector, cfg.rollout.max_staleness, cfg.train.steps, pending)
        self.logger, self.progress, self.eval_problems = logger, progress, eval_problems
        self.guard = NonFiniteGuard(cfg.train.max_nonfinite_steps)
        self.collapse = CollapseGuard(cfg.train.max_collapsed_steps, parts.vocab_size)
        self.last_saved = last_saved
        self.first_step_done = first_step_done
        self.kept = resumed
        self.pending_stats: dict[str, float] = {}
        prompt = encode_problem(
            parts.tokenizer, cfg.model.system_prompt, parts.task.train_problem(0)
        )
        self.probe = make_probe(prompt, self.collector.sampling, cfg.train.seed)
        self.publish_metrics: dict[str, float] = {}
        self.rounding = 0.0  # the probe's difference on equal weights: the check's calibration
        if cfg.rollout.publish_check and cfg.rollout.publish_check_tolerance is None:
            with self.learners.published():  # the weights the engines serve (semi-online resume)
                rollouts = self.collector.rollouts
                self.rounding = rounding_floor(rollouts, self.learners, self.probe)

    # ------------------------------------------------------------ one step

    def step(self, stop: StopRequested) -> None:
        """One training step: collect, learn, publish, record; then a checkpoint when due."""
        t0 = time.perf_counter()
        self.learners.reset_reference_if_due(self.state.step)  # ProRL
        data, sampling_metrics = self.collect()  # 1-3
        bound = self.cfg.rollout.max_staleness + self.learners.algo.objective.sync_every - 1
        lag = staleness(self.learners.version, data, bound)
        t_rollout = time.perf_counter() - t0
        train_metrics, bad = self.learn(data)  # 4
        t_publish = self.publish()  # 5
        self.state.step += 1
        if bad is not None:
            self.state.skipped_nonfinite += 1
            self.progress.warn(
                f"step {self.state.step}: non-finite {bad}; the step did not update the policy "
                f"({self.guard.streak + 1}/{self.guard.limit} in a row stop the run)"
            )
        metrics = {
            **step_metrics(
                data,
                self.parts.task,
                self.cfg.eval.reward_threshold,
                tree_forward=self.cfg.rollout.tree is not None
                and self.cfg.train.shared_prefix
                and not self.cfg.train.packing,
            ),
            **sampling_metrics,
            **train_metrics,
            **lag,
            **self.publish_metrics,
            "train/skipped_nonfinite": float(self.state.skipped_nonfinite),
            "lr": self.learners.lr,
            "time/rollout": t_rollout,
            "time/publish": t_publish,
            "time/step": time.perf_counter() - t0,
        }
        metrics.update(self.evaluate_if_due())
        self.record(data, metrics, bad)
        if self.checkpoint_due(stop):
            self.progress.phase("checkpoint")
            self.checkpoint()

    def collect(self) -> tuple[Samples, dict[str, float]]:
        """Steps 1-3: this step's batch and its sampling metrics."""
        with memory_hint(self.cfg, "sampling", self.run_dir, self.learners.device):
            return self.ahead.take(self.state.step + 1)

    def learn(self, data: Samples) -> Update:
        """Step 4: the update on ``data``, the batches ahead sampled meanwhile (see
        :meth:`~rlvr.trainer.protocols.Learners.update`). Non-finite rewards skip it."""
        self.progress.phase("training")
        fill = partial(self.ahead.fill, self.state.step + 1)
        bad = first_nonfinite({"rewards": data.rewards})
        with memory_hint(self.cfg, "training", self.run_dir, self.learners.device):
            if bad is not None:
                fill()
                return {}, bad
            return self.learners.update(data, fill)

    def publish(self, force: bool = False) -> float:
        """Step 5: the rollouts serve the learners' weights from now on, checked on the probe
        (``rollout.publish_check``); the seconds it took. With ``sync_every`` = s > 1 only
        every s updates (or when ``force``d: the final evaluation is of the trained policy)."""
        start = time.perf_counter()
        version = self.learners.version
        sync_every = self.learners.algo.objective.sync_every
        due = force or version - self.collector.version >= sync_every
        if sync_every > 1 and not due:
            self.publish_metrics = {"rollout/synced": 0.0}  # semi-online: the snapshot stays
            return time.perf_counter() - start
        self.learners.mark_published()
        self.publish_metrics = self.collector.publish(self.learners.weights(), version)
        if sync_every > 1:
            self.publish_metrics["rollout/synced"] = 1.0
        if self.cfg.rollout.publish_check:
            tolerance = self.cfg.rollout.publish_check_tolerance
            rollouts = self.collector.rollouts
            checked = check_publish(
                rollouts, self.learners, self.probe, version, tolerance, self.rounding
            )
            self.publish_metrics.update(checked)
        return time.perf_counter() - start

    # ------------------------------------------------------------ after the step

    def record(self, data: Samples, metrics: dict[str, float], bad: str | None) -> None:
        """Log the step's metrics and samples, update the progress display and run the guards
        (a tripped one stops the run, the checkpoints after its first bad step set aside)."""
        step = self.state.step
        self.logger.log(step, {**metrics, **self.pending_stats})
        self.pending_stats = {}
        self.first_step_done()
        self.kept = True
        rows = sample_rows(data, max(1, self.cfg.logging.samples_per_step))
        self.logger.log_samples(step, rows[: self.cfg.logging.samples_per_step])
        self.progress.update(step, metrics)
        # equal rewards stall only an update made of reward differences (not SFT, distillation,
        # offline DPO), and an empty batch (no group passed the selector) has no sample to show
        if rows and algorithms.learns_from_reward_differences(self.learners.algo):
            self.progress.stall_check(metrics, rows[0])
        self.guard.observe(step, bad)
        if self.guard.tripped:  # the update before the first bad step may have diverged too
            raise NonFiniteError(self.guard.message() + self._set_aside(self.guard.first_step))
        if warning := self.collapse.observe(step, metrics, data.sampled().sampler_logprobs):
            self.progress.warn(warning)
        if self.collapse.tripped:  # the update before its first step made the collapsed weights
            first = self.collapse.first_step
            raise CollapseError(self.collapse.message() + self._set_aside(first))

    def _set_aside(self, first_bad: int) -> str:
        """Set aside the checkpoints from ``first_bad - 1`` on; the hint of how to resume."""
        aside = set_aside(self.run_dir, first_bad - 1)
        return resume_hint(self.run_dir, latest_checkpoint(self.run_dir), aside)

    def evaluate(self) -> dict[str, float]:
        """Held-out accuracy of the served policy."""
        self.progress.phase("eval")
        return self.collector.evaluate(self.eval_problems)

    def evaluate_if_due(self) -> dict[str, float]:
        """Every ``eval.every`` steps but the last (``eval.after`` runs then): the metrics of a
        held-out evaluation, logged with the step's."""
        every, step = self.cfg.eval.every, self.state.step
        if every and step % every == 0 and self.eval_problems and step < self.cfg.train.steps:
            return self.evaluate()
        return {}

    def checkpoint_due(self, stop: StopRequested) -> bool:
        """A checkpoint is due (``checkpoint.every``, or a stop was asked) and no guard's
        streak is running (a checkpoint is never written during one)."""
        every = self.cfg.checkpoint.every
        due = bool(every) and self.state.step % every == 0
        return (due or stop.signal is not None) and self.guard.streak == self.collapse.streak == 0

    def checkpoint(self) -> None:
        """Write the checkpoint of this step (weights, optimizer, schedule, random streams, the
        prompt sampler, the batches sampled ahead), unless one was already written for it;
        non-finite weights stop the run instead (the last good checkpoint stays)."""
        if self.last_saved == self.state.step:
            return
        self.state.sampler = self.collector.sampler.state_dict()
        if self.collector.replay is not None:
            self.state.replay = self.collector.replay.state_dict()
        self.state.stages = {k: s.state_dict() for k, s in self.collector.stage_states.items()}
        adaptive = self.collector.sampling.adaptive  # HAPO's: what the next draw samples with
        self.state.temperature = None if adaptive is None else list(dataclasses.astuple(adaptive))
        keep = max(self.cfg.checkpoint.keep, 2)  # the one before the newest survives
        try:
            self.learners.save_checkpoint(
                self.run_dir, self.state, self.parts.tokenizer, keep, self.ahead.batches
            )
        except CheckpointError as err:  # weights went non-finite: keep the last good one
            hint = resume_hint(self.run_dir, latest_checkpoint(self.run_dir), [])
            raise NonFiniteError(f"{err}.{hint}") from None
        self.last_saved = self.state.step

    # ------------------------------------------------------------ the run

    def stopped_at_once(self) -> None:
        """Says how a run stopped at once by a second Ctrl-C goes on (:func:`how_to_resume`; the
        step it was in is lost)."""
        how = how_to_resume(self.run_dir, self.kept)
        note(f"stopped at once by a second Ctrl-C after step {self.state.step}; {how}")

    def run(self, summary: dict[str, Any]) -> None:
        """Evaluate the initial policy (``eval.before``), train to ``train.steps`` (or a stop
        signal), checkpoint and evaluate the final policy (``eval.after``); results go to
        ``summary``."""
        cfg, progress = self.cfg, self.progress
        with StopRequested(self.stopped_at_once) as stop, progress:
            if cfg.eval.before and self.eval_problems and self.state.step == 0:
                progress.print(
                    f"[dim]evaluating the initial policy on {len(self.eval_problems)} held-out "
                    "problems..."
                )
                summary["before"] = self.evaluate()
                self.logger.log(0, {**summary["before"], **self.pending_stats})
                self.pending_stats = {}
                progress.print(f"before training: {fmt_eval(summary['before'])}")
            while self.state.step < cfg.train.steps:
                self.step(stop)
                if stop.signal is not None:
                    summary["stopped"] = stop.signal
                    return
            if cfg.checkpoint.save_final and self.guard.streak == self.collapse.streak == 0:
                progress.phase("checkpoint")
                self.checkpoint()
            if cfg.eval.after and self.eval_problems:
                if self.collector.version != self.learners.version:  # semi-online: sync first
                    self.publish(force=True)
                summary["after"] = self.evaluate()
                self.logger.log(self.state.step, summary["after"])
