"""The training loop: the run's parts wired together, top to bottom (see docs/design.md,
"One training step" and "The parts of a run").

One step:
  1-3. the collector (:mod:`rlvr.collector`) takes ``prompts_per_step`` problems from the
     prompt sampler, samples G completions per prompt with the rollout engine (sampler
     log-probs included) and scores them: one :class:`~rlvr.trajectories.Trajectories` batch;
  4. the learner (:mod:`rlvr.learner`) turns rewards into advantages and, for ``ppo_epochs``
     passes over ``minibatches`` shuffled minibatches, accumulates the clipped policy loss (+
     beta * KL to the reference) over micro-batches, weighted by the minibatch's global token /
     sequence counts, then clips gradients and steps AdamW;
  5. the collector is given the new weights; the loop logs, evaluates and checkpoints when due.
With ``rollout.max_staleness`` = k >= 1 the batches of the next k steps are sampled during step 4
with the weights before it (:class:`_Ahead`). The same loop drives one process and Ray
(``distributed.backend``, :mod:`rlvr.distributed.ray_backend`): only the parts differ.
Everything algorithmic is a pure function in :mod:`rlvr.algorithms`; this file only wires.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from rlvr import algorithms
from rlvr.checkpoint import (
    CheckpointError,
    TrainerState,
    latest_checkpoint,
    set_aside,
)
from rlvr.config import Config, ConfigError, load_config, save_config
from rlvr.curriculum import per_category
from rlvr.data import Problem, Task, answer_extractor, data_stats
from rlvr.errors import NonFiniteError, OutOfMemory, WorkerFailed
from rlvr.evaluation import answer_entropy_within_groups, snapshot_params, update_sparsity
from rlvr.guards import NonFiniteGuard, first_nonfinite, resume_hint
from rlvr.learner import lr_lambda
from rlvr.logging import MetricsLogger
from rlvr.models import quiet_transformers
from rlvr.parts import RunParts, build_parts, resume_parts
from rlvr.progress import ProgressDisplay
from rlvr.rewards.base import callable_name
from rlvr.rundir import (
    check_resume_changes,
    config_changes,
    discard_replaced,
    prepare_new_run,
    record_resume,
    remove_artifacts,
    restore_replaced,
)
from rlvr.trajectories import Trajectories

__all__ = ["lr_lambda", "train", "with_callable_reward"]  # lr_lambda: rlvr.learner's, kept here


def _note(text: str) -> None:
    """A line on stderr, never wrapped (so logs can be grepped and commands copied)."""
    print(text, file=sys.stderr, flush=True)


def _warn(text: str) -> None:
    _note(f"warning: {text}")


class _StopRequested:
    """SIGINT/SIGTERM set a flag; the loop checkpoints at the end of the step and exits.
    A second SIGINT interrupts at once."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def __enter__(self) -> _StopRequested:
        self._old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in self._old:
            signal.signal(s, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signum

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)


def train(
    cfg: Config,
    resume: str | Path | None = None,
    *,
    overwrite: bool = False,
    reward: Callable[..., float] | None = None,
) -> dict[str, Any]:
    """Run (or resume) a training run; return a summary with before/after accuracy.

    Args:
        cfg: the run's config.
        resume: a run directory to continue from its latest good checkpoint. ``cfg`` should
            then be the run's saved ``config.yaml`` with any changes (the CLI loads it and
            applies ``--set``): length, learning rate and schedule, sampling, eval and logging
            changes apply from the resumed step (recorded in ``resumes.jsonl``); changes to the
            model, task, curriculum, algorithm family or seed are refused (ConfigError).
        overwrite: replace the run in ``logging.run_dir`` if there is one (else that is an
            error: resume it, or choose a new directory).
        reward: a Python reward ``f(completion, problem, **fields) -> float``, instead of
            ``reward.function`` / the task's verifier.

    Raises:
        RlvrError subclasses for bad config, data, rewards, and :class:`NonFiniteError` when
        ``train.max_nonfinite_steps`` steps in a row were non-finite. A run that fails before
        its first step leaves no run directory behind.
    """
    quiet_transformers()
    if resume is not None and overwrite:
        raise ConfigError("--overwrite replaces a run and --resume continues one: give one")
    if reward is not None:
        cfg = with_callable_reward(cfg, reward)
    made: list[Path] = []
    replaced = None
    if resume is not None:
        run_dir = Path(resume)
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = Path(cfg.logging.run_dir or f"runs/{stamp}-{cfg.task.name.replace(':', '-')}")
        made = [p for p in (run_dir, *run_dir.parents) if not p.exists()]  # what we create
        replaced = prepare_new_run(run_dir, overwrite)
    started = [False]

    def first_step_done() -> None:
        started[0] = True
        discard_replaced(replaced)

    try:
        with contextlib.ExitStack() as cleanup:
            try:
                return _run(cfg, run_dir, resume is not None, reward, cleanup, first_step_done)
            except WorkerFailed as err:  # a distributed run that cannot go on
                raise WorkerFailed(f"{err}. {_resume_sentence(run_dir)}") from None
    except BaseException:
        if resume is None and not started[0]:  # leave nothing half-made, the old run back
            remove_artifacts(run_dir)
            restore_replaced(run_dir, replaced)
            for path in made:  # the run directory and the parents made for it, if empty
                if path.is_dir() and not any(path.iterdir()):
                    path.rmdir()
        raise


def _resume_sentence(run_dir: Path) -> str:
    """How a run stopped by a failure goes on."""
    if latest_checkpoint(run_dir) is None:
        return "No checkpoint was written yet: start the run again"
    return f"Resume from its last checkpoint with: rlvr train --resume {run_dir}"


def with_callable_reward(cfg: Config, reward: Callable[..., float]) -> Config:
    """``cfg`` recording a Python reward passed to :func:`train` as ``reward.function`` (its
    ``module:qualname``, or a ``<python callable>:...`` marker a command-line resume refuses), so
    ``config.yaml`` never claims the task's verifier was the reward."""
    if cfg.reward.function is not None or cfg.reward.terms:
        raise ConfigError(
            "train(reward=...) replaces the config's reward: leave reward.function and "
            "reward.terms unset"
        )
    name = callable_name(reward)
    return cfg.model_copy(update={"reward": cfg.reward.model_copy(update={"function": name})})


def _is_out_of_memory(err: BaseException) -> bool:
    """CUDA's OutOfMemoryError, or the CPU allocator failing (a RuntimeError or MemoryError)."""
    if isinstance(err, torch.OutOfMemoryError | MemoryError):
        return True
    return isinstance(err, RuntimeError) and "can't allocate memory" in str(err)


@contextlib.contextmanager
def _memory_hint(cfg: Config, phase: str, run_dir: Path, device: torch.device) -> Iterator[None]:
    """Turn running out of memory in ``phase`` ("sampling" or "training") into
    :class:`OutOfMemory` naming the settings that bound that phase's memory."""
    try:
        yield
    except BaseException as err:
        if not _is_out_of_memory(err):
            raise
        if phase == "sampling":
            knobs = (
                f"rollout.max_batch (now {cfg.rollout.max_batch}: samples decoded at once), "
                f"rollout.max_new_tokens (now {cfg.rollout.max_new_tokens})"
            )
        else:
            knobs = (
                f"train.micro_batch_size (now {cfg.train.micro_batch_size}), "
                f"train.logprob_chunk_tokens (now {cfg.train.logprob_chunk_tokens}; e.g. 1024 "
                "keeps only that many tokens' vocabulary logits at once), "
                f"train.gradient_checkpointing (now {cfg.train.gradient_checkpointing})"
            )
        raise OutOfMemory(
            f"out of memory on {device} while {phase} ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:200] if str(err) else 'no message'}). Lower {knobs}, "
            f"e.g. rlvr train --resume {run_dir} --set train.micro_batch_size=... (from the "
            "last checkpoint)"
        ) from None


def _data_notes(task: Task, first_step: bool) -> dict[str, float]:
    """What loading the data left out (file and dataset tasks), printed once and returned for
    the run's first metrics row."""
    stats: dict[str, float] = data_stats(task) if first_step else {}
    notes = {
        "data/duplicates_dropped": "duplicate rows dropped before the split",
        "data/long_prompts_dropped": "prompts over the length limit dropped",
        "data/eval_rows_unused": "held-out rows beyond task.n_eval (neither trained nor evaluated)",
    }
    for key, text in notes.items():
        if stats.get(key):
            _note(f"note: {text}: {stats[key]}")
    return stats


def _logger(cfg: Config, run_dir: Path, resume_step: int | None) -> MetricsLogger:
    """The run's metrics sinks: metrics.jsonl, TensorBoard, W&B (``logging.wandb``)."""
    wandb = cfg.logging.wandb
    return MetricsLogger(
        run_dir,
        cfg.logging.tensorboard,
        resume_step=resume_step,
        wandb=None if wandb is None else {**wandb.model_dump(), "config": cfg.model_dump()},
    )


def _held_out(cfg: Config, task: Task) -> list[Problem]:
    """The problems evaluated (``eval.n_prompts`` of the task's held-out split), with a note
    when evaluation is asked for and the task has none."""
    problems = task.eval_problems()[: cfg.eval.n_prompts]
    if not problems and (cfg.eval.before or cfg.eval.after or cfg.eval.every):
        _note(
            "note: the task has no held-out problems (task.eval_fraction, eval_split or n_eval): "
            "held-out evaluation is skipped"
        )
    return problems


def _checkpoint(
    cfg: Config, run_dir: Path, state: TrainerState, parts: RunParts, pending: list[Any]
) -> None:
    """Write the checkpoint of ``state.step`` (weights, optimizer, schedule, random streams,
    the prompt sampler, the batches sampled ahead); non-finite weights stop the run instead
    (the last good one stays)."""
    state.sampler = parts.collector.sampler.state_dict()
    try:
        keep = max(cfg.checkpoint.keep, 2)  # the one before the newest survives
        parts.learner.save_checkpoint(run_dir, state, parts.tokenizer, keep, pending)
    except CheckpointError as err:  # weights went non-finite: keep the last good one
        hint = resume_hint(run_dir, latest_checkpoint(run_dir), [])
        raise NonFiniteError(f"{err}.{hint}") from None


class _Ahead:
    """Batches sampled ahead of the learner (``rollout.max_staleness`` = k >= 1): while step t
    trains, the batches of steps up to t + k are sampled with the weights before its update, so
    no batch is more than k policy versions old when it is trained on (AReaL, Fu et al. 2025;
    verl's one-step off-policy with k = 1). k = 0 samples every batch when its step starts."""

    def __init__(self, collector: Any, limit: int, last_step: int, batches: list[Any]) -> None:
        self.collector, self.limit, self.last_step = collector, limit, last_step
        self.batches = batches  # [(step, Trajectories, metrics)], oldest first

    def take(self, step: int) -> tuple[Trajectories, dict[str, float]]:
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


def _update(learner: Any, data: Trajectories, ahead: _Ahead, step: int) -> tuple[dict, str | None]:
    """The learner's update on ``data`` while the batches ahead are sampled: at once on Ray
    (``learner.runs_apart``: the learners train while the rollout workers sample), before the
    update in one process (the weights the engine serves must still be the old ones)."""
    if learner.runs_apart:
        pending = learner.start_update(data)
        ahead.fill(step)
        return pending.result()
    ahead.fill(step)
    return learner.update(data)


def _run(
    cfg: Config,
    run_dir: Path,
    resuming: bool,
    user_reward: Callable[..., float] | None,
    cleanup: contextlib.ExitStack,
    first_step_done: Callable[[], None],
) -> dict[str, Any]:
    """The body of :func:`train` in a prepared run directory; what it opens (reward workers,
    log writers) is closed by ``cleanup``; ``first_step_done`` is called once step 1 is
    logged."""
    start_time = time.perf_counter()
    changes = {}
    if resuming:
        changes = config_changes(load_config(run_dir / "config.yaml"), cfg)
        check_resume_changes(changes)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    torch.manual_seed(cfg.train.seed)
    parts = build_parts(cfg, user_reward, cleanup, lambda name: progress.phase(name))
    task, learner, collector = parts.task, parts.learner, parts.collector
    state = TrainerState(step=0, data_sha256=parts.fingerprint)
    # the initial weights, for the fraction of parameters RL changes (update sparsity)
    # the Ray learners measure it themselves
    sparsity = cfg.logging.update_sparsity and not learner.runs_apart
    initial_params = snapshot_params(learner.policy) if sparsity else None
    checkpoint, pending = None, []
    if resuming:
        checkpoint, state, pending = resume_parts(
            cfg, run_dir, learner, collector.sampler, state, changes, _warn
        )
        collector.publish(learner.weights(), learner.version)  # serve the loaded weights
    ahead = _Ahead(collector, cfg.rollout.max_staleness, cfg.train.steps, pending)
    progress = ProgressDisplay(cfg.train.steps, state.step, cfg.logging.progress)
    logger = _logger(cfg, run_dir, state.step if resuming else None)
    cleanup.callback(logger.close)
    stats = _data_notes(task, state.step == 0)
    eval_problems = _held_out(cfg, task)

    def run_eval() -> dict[str, float]:
        return collector.evaluate(eval_problems)

    last_saved = [state.step if checkpoint is not None else -1]

    def checkpoint_now() -> None:
        if last_saved[0] != state.step:  # not already written (a due one at the last step)
            _checkpoint(cfg, run_dir, state, parts, ahead.batches)
            last_saved[0] = state.step

    if logger.repaired_lines:
        _warn(f"dropped {logger.repaired_lines} half-written line(s) of {run_dir}'s logs")
    guard = NonFiniteGuard(cfg.train.max_nonfinite_steps)
    summary: dict[str, Any] = {"run_dir": str(run_dir), "algorithm": learner.algo.name}
    save_config(cfg, run_dir / "config.yaml")  # only now: every start-up check has passed
    if resuming:
        for key, (old, new) in changes.items():
            _note(f"resume: {key} {old!r} -> {new!r}, applies from step {state.step + 1}")
        record_resume(run_dir, state.step, checkpoint, changes)
    with _StopRequested() as stop, progress:
        if cfg.eval.before and eval_problems and state.step == 0:
            progress.phase("eval")
            progress.print(
                f"[dim]evaluating the initial policy on {len(eval_problems)} held-out problems..."
            )
            summary["before"] = run_eval()
            logger.log(0, {**summary["before"], **stats})
            stats = {}
            progress.print(f"before training: {_fmt_eval(summary['before'])}")
        while state.step < cfg.train.steps:
            t0 = time.perf_counter()
            learner.reset_reference_if_due(state.step)  # ProRL
            # 1-3. prompts, G completions each, rewards (refilled by dynamic sampling), or the
            # batch sampled ahead for this step (asynchronous rollouts)
            with _memory_hint(cfg, "sampling", run_dir, learner.device):
                data, sampling_metrics = ahead.take(state.step + 1)
            t_rollout = time.perf_counter() - t0
            staleness = _staleness(learner.version, data, cfg.rollout.max_staleness)

            # 4. advantages and policy update: mu epochs x minibatches x micro-batches (while
            # later batches are sampled, max_staleness >= 1); a non-finite reward, advantage,
            # loss or gradient norm skips the update
            progress.phase("training")
            bad = first_nonfinite({"rewards": data.rewards})
            train_metrics: dict[str, float] = {}
            with _memory_hint(cfg, "training", run_dir, learner.device):
                if bad is None:
                    train_metrics, bad = _update(learner, data, ahead, state.step + 1)
                else:
                    ahead.fill(state.step + 1)
            t_publish = time.perf_counter()
            collector.publish(learner.weights(), learner.version)
            t_publish = time.perf_counter() - t_publish
            state.step += 1
            if bad is not None:
                state.skipped_nonfinite += 1
                progress.warn(
                    f"step {state.step}: non-finite {bad}; the step did not update the policy "
                    f"({guard.streak + 1}/{guard.limit} in a row stop the run)"
                )

            # 5. metrics, samples, eval, checkpoint
            metrics = {
                **step_metrics(data, task),
                **sampling_metrics,
                **train_metrics,
                **staleness,
                "train/skipped_nonfinite": float(state.skipped_nonfinite),
                "lr": learner.lr,
                "time/rollout": t_rollout,
                "time/publish": t_publish,
                "time/step": time.perf_counter() - t0,
            }
            if initial_params is not None:
                params = learner.policy
                metrics["policy/params_changed_frac"] = update_sparsity(params, initial_params)
            due_eval = cfg.eval.every and state.step % cfg.eval.every == 0
            if due_eval and eval_problems and state.step < cfg.train.steps:
                progress.phase("eval")
                metrics.update(run_eval())
            logger.log(state.step, {**metrics, **stats})
            stats = {}
            first_step_done()
            rows = sample_rows(data, max(1, cfg.logging.samples_per_step))
            logger.log_samples(state.step, rows[: cfg.logging.samples_per_step])
            progress.update(state.step, metrics)
            progress.stall_check(metrics, rows[0])
            guard.observe(state.step, bad)
            if guard.tripped:  # the update before the first bad step may have diverged too
                aside = set_aside(run_dir, guard.first_step - 1)
                hint = resume_hint(run_dir, latest_checkpoint(run_dir), aside)
                raise NonFiniteError(guard.message() + hint)
            due = cfg.checkpoint.every and state.step % cfg.checkpoint.every == 0
            if (due or stop.signal is not None) and guard.streak == 0:
                progress.phase("checkpoint")
                checkpoint_now()  # never during a non-finite streak
            if stop.signal is not None:
                summary["stopped"] = stop.signal
                break
        if not summary.get("stopped"):
            if cfg.checkpoint.save_final and guard.streak == 0:
                progress.phase("checkpoint")
                checkpoint_now()
            if cfg.eval.after and eval_problems:
                progress.phase("eval")
                summary["after"] = run_eval()
                logger.log(state.step, summary["after"])
    if summary.get("stopped"):
        _note(
            f"stopped by signal {summary['stopped']} after step {state.step}; "
            f"resume with: rlvr train --resume {run_dir}"
        )
    summary["steps"] = state.step
    summary["skipped_nonfinite"] = state.skipped_nonfinite
    summary["wall_seconds"] = time.perf_counter() - start_time
    return summary


def _staleness(version: int, data: Trajectories, bound: int) -> dict[str, float]:
    """``staleness/mean`` and ``/max``: policy versions between the learner (before this step's
    update) and the policy that sampled the batch, over its samples; more than ``bound``
    (``rollout.max_staleness``) is a bug, never trained on."""
    lag = version - data.policy_version
    if not 0 <= lag <= bound:
        raise RuntimeError(
            f"a batch sampled by policy version {data.policy_version} reached the learner at "
            f"version {version}: staleness {lag} outside [0, {bound}] (rollout.max_staleness)"
        )
    return {"staleness/mean": float(lag), "staleness/max": float(lag)}


def step_metrics(data: Trajectories, task: Task) -> dict[str, float]:
    """Reward, length, group and per-category statistics of one step's samples (answers as the
    task's verifier reads them)."""
    rewards, group_ids = data.rewards, data.group_ids
    lengths = torch.tensor([len(c) for c in data.completion_ids], dtype=torch.float)
    extract = answer_extractor(task)
    problems = [data.problems[int(g)] for g in group_ids]
    answers = [extract(text, p) for text, p in zip(data.texts, problems, strict=True)]
    metrics = {
        "reward/mean": rewards.mean().item(),
        "reward/std": rewards.std().item() if len(rewards) > 1 else 0.0,
        "reward/accuracy": (rewards >= 1.0).float().mean().item(),
        "response/length_mean": lengths.mean().item(),
        "response/length_max": lengths.max().item(),
        "response/truncated_frac": 1 - sum(data.finished) / len(data.finished),
        "response/answer_entropy": answer_entropy_within_groups(answers, group_ids),
        **{f"groups/{k}": v for k, v in algorithms.group_stats(rewards, group_ids).items()},
        "rollout/tokens_per_s": data.tokens_per_s,
    }
    for category, values in per_category(data.problems, rewards, group_ids).items():
        if category:  # a task with categories: what each one gets and scores
            metrics[f"category/{category}/reward"] = sum(values) / len(values)
            metrics[f"category/{category}/samples_frac"] = len(values) / len(rewards)
    return metrics


def sample_rows(data: Trajectories, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` samples of a step as ``samples.jsonl`` rows."""
    rows = []
    for i in range(min(limit, len(data.texts))):
        problem = data.problems[int(data.group_ids[i])]
        row = {
            "prompt": problem.prompt,
            "answer": problem.answer,
            "completion": data.texts[i],
            "reward": data.rewards[i].item(),
            "terms": {label: values[i] for label, values in data.terms.items()},
        }
        if data.transcripts is not None:  # agent episodes: the whole chat, reward per turn
            row["transcript"] = data.transcripts[i]
            row["turn_rewards"] = data.turn_rewards[i] if data.turn_rewards else []
        rows.append(row)
    return rows


def _fmt_eval(result: dict[str, float]) -> str:
    name = "success" if "eval/greedy_turns_mean" in result else "accuracy"
    parts = [f"greedy {name} {result['eval/greedy_accuracy']:.1%}"]
    if "eval/sampled_accuracy" in result:
        parts.append(f"sampled {name} {result['eval/sampled_accuracy']:.1%}")
    if "eval/greedy_reward_mean" in result:  # judged by the reward (eval.judge: reward)
        parts.append(f"greedy mean reward {result['eval/greedy_reward_mean']:.3f}")
    parts.append(f"mean length {result['eval/greedy_length_mean']:.0f} tokens")
    if "eval/greedy_turns_mean" in result:  # agent episodes
        parts.append(f"{result['eval/greedy_turns_mean']:.1f} turns")
        parts.append(f"invalid actions {result['eval/greedy_tool_invalid_frac']:.1%}")
    return ", ".join(parts)
