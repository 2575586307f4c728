"""The run: a run directory (new, resumed or overwritten), the start-up checks, the memory plan
(:mod:`rlvr.trainer.plan`: printed, and a run that cannot fit stops before any model loads), the
parts built on the chosen backend, a resumed checkpoint loaded into them, then the loop
(:mod:`rlvr.trainer.loop`) until the last step; a run that fails before its first step leaves
nothing behind."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from rlvr.checkpoint import TrainerState
from rlvr.config import Config, ConfigError, save_config
from rlvr.distributed.launch import torchrun_follower
from rlvr.errors import WorkerFailed
from rlvr.logging import MetricsLogger
from rlvr.models import quiet_transformers
from rlvr.progress import ProgressDisplay
from rlvr.registries import check_config
from rlvr.rewards.protocol import RewardError
from rlvr.rewards.registry import callable_name
from rlvr.rollout.base import AdaptiveTemperature
from rlvr.run_checks import check_run_start, check_writable
from rlvr.rundir import (
    check_resume_changes,
    config_changes,
    discard_replaced,
    prepare_new_run,
    record_resume,
    recorded_config,
    remove_artifacts,
    restore_replaced,
)
from rlvr.trainer.backends import build_parts
from rlvr.trainer.build import resume_parts
from rlvr.trainer.checkpoint_size import learner_bytes
from rlvr.trainer.loop import Loop, how_to_resume
from rlvr.trainer.metrics import data_notes, held_out, note, warn
from rlvr.trainer.plan import check_plan


def probe_judges(cfg: Config, task: Any, run_dir: Path) -> None:
    """The judge probe (:mod:`rlvr.rewards.probe`) of each judge term on 2 held-out problems,
    printed and kept as ``judge_probe.json`` (accepted: a score of at least 0.5), with a warning when the judge accepted a master
    key its guard is off for (a few calls: each probe asks ~13 questions per problem)."""
    from rlvr.rewards.probe import probe_terms

    reports = probe_terms(cfg.reward, task, n=2, threshold=0.5)
    if not reports:
        return
    for report in reports:
        for line in report.lines():
            note(line)
    guarded = all(t.params.get("guard", True) for t in cfg.reward.terms)
    if any(r.master_keys.hits for r in reports) and not guarded:
        warn("the judge accepted content-free master keys and a judge term has guard: false")
    (run_dir / "judge_probe.json").write_text(
        json.dumps([r.as_dict() for r in reports], indent=2) + "\n"
    )


def tree_budget(cfg: Config) -> str:
    """One line: a tree run's most leaves and generated tokens per prompt, against flat
    sampling's for the same leaves."""
    rule, rollout = cfg.rollout.tree.branching_rule(), cfg.rollout
    length, trees = cfg.max_completion_tokens, rollout.group_size
    leaves = trees * rule.max_leaves
    return (
        f"tree rollouts: {trees} tree(s) per prompt, {rule.name} branching: at most {leaves} "
        f"leaves and {trees * rule.max_tokens(length)} generated tokens per prompt (flat "
        f"sampling of {leaves} completions: {leaves * length}); tokens/generated logs each step's"
    )


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
        resume: a run directory to continue from its latest good checkpoint (with none yet,
            from step 0: its logged rows are dropped and made again). ``cfg`` should
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
        ``train.max_nonfinite_steps`` steps in a row were non-finite (:class:`CollapseError`:
        ``train.max_collapsed_steps`` of a collapsed policy; :class:`RunDirError`: a run
        directory that cannot be written or has no room for a checkpoint; :class:`PlanError`:
        a run whose memory plan does not fit its device, before any model loads). A run that fails
        before its first step leaves no run directory behind; a worker or a reward failing
        after it (:class:`RewardError`, ``reward.on_error: raise``) says how to resume.
    """
    quiet_transformers()
    if resume is not None and overwrite:
        raise ConfigError("--overwrite replaces a run and --resume continues one: give one")
    if reward is not None:
        cfg = with_callable_reward(cfg, reward)
    check_config(cfg)  # curriculum, environment and reward names against their registries
    if torchrun_follower(cfg.distributed.backend):
        from rlvr.trainer.backends.torchrun import follow

        follow(cfg)  # a learner rank: rank 0 runs the loop and writes the run
        return {}
    made: list[Path] = []
    replaced = None
    if resume is not None:
        run_dir = Path(resume)
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = Path(cfg.logging.run_dir or f"runs/{stamp}-{cfg.task.name.replace(':', '-')}")
        made = [p for p in (run_dir, *run_dir.parents) if not p.exists()]  # what we create
        check_writable(run_dir)  # RunDirError before anything is made
        replaced = prepare_new_run(run_dir, overwrite)
    started = [False]

    def first_step_done() -> None:
        if not started[0]:
            started[0] = True
            discard_replaced(replaced)

    try:
        with contextlib.ExitStack() as cleanup:
            try:
                return _run(cfg, run_dir, resume is not None, reward, cleanup, first_step_done)
            except WorkerFailed as err:  # a distributed run that cannot go on
                kept = started[0] or resume is not None
                raise WorkerFailed(f"{err}. {_resume_sentence(run_dir, kept)}") from None
            except RewardError as err:  # reward.on_error: raise, mid-run: fix it, then resume
                if not started[0] and resume is None:
                    raise  # a new run that never trained is removed: nothing to resume
                detail = f"{err.detail}. {_resume_sentence(run_dir, True)}"
                raise RewardError(
                    err.reward, err.index, err.completion_head, detail, err.problem_id
                ) from err
    except BaseException:
        if resume is None and not started[0]:  # leave nothing half-made, the old run back
            remove_artifacts(run_dir)
            restore_replaced(run_dir, replaced)
            for path in made:  # the run directory and the parents made for it, if empty
                if path.is_dir() and not any(path.iterdir()):
                    path.rmdir()
        raise


def _resume_sentence(run_dir: Path, kept: bool) -> str:
    """How a run stopped by a failure goes on (:func:`~rlvr.trainer.loop.how_to_resume`; ``kept``:
    its directory stays), as a sentence."""
    how = how_to_resume(run_dir, kept)
    return how[:1].upper() + how[1:]


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


def _logger(cfg: Config, run_dir: Path, resume_step: int | None) -> MetricsLogger:
    """The run's metrics sinks: metrics.jsonl, TensorBoard, W&B (``logging.wandb``)."""
    wandb = cfg.logging.wandb
    return MetricsLogger(
        run_dir,
        cfg.logging.tensorboard,
        resume_step=resume_step,
        wandb=None if wandb is None else {**wandb.model_dump(), "config": cfg.model_dump()},
    )


def _run(
    cfg: Config,
    run_dir: Path,
    resuming: bool,
    user_reward: Callable[..., float] | None,
    cleanup: contextlib.ExitStack,
    first_step_done: Callable[[], None],
) -> dict[str, Any]:
    """The body of :func:`train` in a prepared run directory: build, resume, loop. What it opens
    (reward workers, engines, log writers) is closed by ``cleanup``."""
    start_time = time.perf_counter()
    changes = {}
    if resuming:
        changes = config_changes(recorded_config(run_dir / "config.yaml"), cfg)
        check_resume_changes(changes)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    note(check_plan(cfg).summary())  # PlanError before any model loads when it cannot fit
    if cfg.rollout.tree is not None:  # the token budget a tree run stands against
        note(tree_budget(cfg))
    torch.manual_seed(cfg.train.seed)
    parts = build_parts(cfg, user_reward, cleanup)
    sizes = functools.partial(learner_bytes, parts.learners, cfg)
    check_run_start(cfg, run_dir, sizes, parts.tokenizer)  # writable, room for one
    state = TrainerState(step=0, data_sha256=parts.fingerprint)
    checkpoint, pending = None, []
    if resuming:
        checkpoint, state, pending = resume_parts(
            cfg, run_dir, parts.learners, parts.collector.sampler, state, changes, warn
        )
        if parts.collector.replay is not None:
            parts.collector.replay.load_state_dict(state.replay)
        for name, stage_state in parts.collector.stage_states.items():
            stage_state.load_state_dict(state.stages.get(name, {}))
        tau = cfg.rollout.temperature_tau
        if state.temperature is not None and tau:  # HAPO's adaptive temperatures, as it stopped
            adaptive = dataclasses.replace(AdaptiveTemperature(*state.temperature), tau=tau)
            parts.collector.sampling = dataclasses.replace(
                parts.collector.sampling, adaptive=adaptive
            )
        with parts.learners.published() as version:  # semi-online: the snapshot again
            parts.collector.publish(parts.learners.weights(), version)
    progress = ProgressDisplay(cfg.train.steps, state.step, cfg.logging.progress)
    parts.collector.phase = progress.phase
    parts.collector.warn = progress.warn
    # a resume drops what was logged after its checkpoint; without one it starts at step 0
    # again, so every row goes (the initial evaluation is made again)
    resume_step = (state.step if checkpoint is not None else -1) if resuming else None
    logger = _logger(cfg, run_dir, resume_step)
    cleanup.callback(logger.close)
    if logger.repaired_lines:
        warn(f"dropped {logger.repaired_lines} half-written line(s) of {run_dir}'s logs")
    loop = Loop(
        cfg,
        run_dir,
        parts,
        state,
        pending,
        logger,
        progress,
        held_out(cfg, parts.task),
        state.step if checkpoint is not None else -1,
        first_step_done,
        resuming,
    )
    loop.pending_stats = data_notes(parts.task, state.step == 0)
    summary: dict[str, Any] = {"run_dir": str(run_dir), "algorithm": parts.learners.algo.name}
    chosen = parts.learners.precision  # what auto precision stood for here, and why
    if chosen is not None:
        note(chosen["summary"])
        (run_dir / "precision.json").write_text(json.dumps(chosen, indent=2) + "\n")
    if not resuming:
        probe_judges(cfg, parts.task, run_dir)
    # only now: every start-up check has passed
    save_config(cfg, run_dir / "config.yaml", [chosen["summary"]] if chosen else [])
    if resuming:
        for key, (old, new) in changes.items():
            note(f"resume: {key} {old!r} -> {new!r}, applies from step {state.step + 1}")
        record_resume(run_dir, state.step, checkpoint, changes)
    loop.run(summary)
    if summary.get("stopped"):
        note(
            f"stopped by signal {summary['stopped']} after step {state.step}; "
            f"resume with: rlvr train --resume {run_dir}"
        )
    summary["steps"] = state.step
    summary["skipped_nonfinite"] = state.skipped_nonfinite
    summary["wall_seconds"] = time.perf_counter() - start_time
    return summary
