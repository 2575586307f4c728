"""The training loop: GRPO and its relatives, top to bottom (see ../DESIGN.md, "One step").

One step:
  1. take the next ``prompts_per_step`` problems from the task (the sampler position);
  2. sample G completions per prompt with the rollout engine (sampler log-probs included);
  3. score them (rewards [N]) and turn rewards into advantages per group;
  4. for ``ppo_epochs`` passes, over ``minibatches`` shuffled minibatches, accumulate the
     clipped policy loss (+ beta * KL to the reference) over micro-batches, weighted by the
     minibatch's global token / sequence counts, then clip gradients and step AdamW;
  5. copy the new weights into the engine; log; evaluate and checkpoint when due.
Everything algorithmic is a pure function in :mod:`rlvr.algorithms`; this file only wires.
"""

from __future__ import annotations

import dataclasses
import math
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from rlvr import algorithms
from rlvr.checkpoint import TrainerState, latest_checkpoint, load_checkpoint, save_checkpoint
from rlvr.config import Config, save_config
from rlvr.data import Problem, Task, make_task
from rlvr.evaluation import evaluate_accuracy
from rlvr.logging import MetricsLogger, ProgressDisplay
from rlvr.models import encode_prompt, load_model, load_tokenizer, stop_token_ids
from rlvr.policy import Batch, completion_logprobs, make_batch
from rlvr.rewards.base import make_reward
from rlvr.rollout import SamplingParams, TorchEngine, auto_dtype

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def resolve_algorithm(cfg: Config) -> algorithms.Preset:
    """The preset named in the config with every explicitly set field overriding it."""
    preset = algorithms.get_preset(cfg.algorithm.preset)
    fields = {f.name for f in dataclasses.fields(preset)}
    overrides = {
        k: v for k, v in cfg.algorithm.model_dump().items() if k in fields and v is not None
    }
    overrides.pop("name", None)
    return dataclasses.replace(preset, **overrides)


def build_task(cfg: Config) -> Task:
    t = cfg.task
    kwargs: dict[str, Any] = {"seed": t.seed, "n_eval": t.n_eval}
    if t.prompt_template is not None:
        kwargs["prompt_template"] = t.prompt_template
    if t.name == "arithmetic":
        return make_task("arithmetic", level=t.level, **kwargs)
    return make_task(
        "file",
        path=t.path,
        prompt_column=t.prompt_column,
        answer_column=t.answer_column,
        split_column=t.split_column,
        **kwargs,
    )


def lr_lambda(cfg: Config):
    """LR multiplier per optimiser step: linear warmup, then constant / cosine / linear decay."""
    tr = cfg.train
    total = tr.steps * cfg.algorithm.ppo_epochs * cfg.algorithm.minibatches

    def factor(step: int) -> float:
        if step < tr.warmup_steps:
            return (step + 1) / tr.warmup_steps
        if tr.lr_schedule == "constant":
            return 1.0
        progress = min(1.0, (step - tr.warmup_steps) / max(1, total - tr.warmup_steps))
        if tr.lr_schedule == "cosine":
            decay = 0.5 * (1 + math.cos(math.pi * progress))
        else:
            decay = 1 - progress
        return tr.min_lr_ratio + (1 - tr.min_lr_ratio) * decay

    return factor


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


def train(cfg: Config, resume: Path | None = None) -> dict[str, Any]:
    """Run (or resume) a training run; return a summary with before/after accuracy.

    Args:
        cfg: the run's config.
        resume: a run directory to continue from its latest checkpoint. ``cfg`` should then
            be the run's saved ``config.yaml`` (the CLI loads it and applies ``--set``, e.g. a
            larger ``train.steps`` to extend the run; the LR schedule follows the new length).
    """
    start_time = time.perf_counter()
    if resume is not None:
        run_dir = Path(resume)
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = Path(cfg.logging.run_dir or f"runs/{stamp}-{cfg.task.name}")
        run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.yaml")
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    torch.manual_seed(cfg.train.seed)
    algo = resolve_algorithm(cfg)

    # --- model, tokenizer, task, engine ------------------------------------------------
    tokenizer = load_tokenizer(cfg.model.name)
    policy = load_model(cfg.model.name, torch.float32)
    policy.config.use_cache = False
    task = build_task(cfg)
    reward_fn = make_reward(task, cfg.reward.function)
    fast = auto_dtype() if cfg.rollout.dtype == "auto" else DTYPES[cfg.rollout.dtype]
    train_dtype = auto_dtype() if cfg.train.autocast == "auto" else DTYPES[cfg.train.autocast]
    sampling = SamplingParams(
        temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
        top_k=cfg.rollout.top_k,
        max_new_tokens=cfg.rollout.max_new_tokens,
        stop_token_ids=stop_token_ids(tokenizer),
    )
    greedy = dataclasses.replace(
        sampling, temperature=0.0, max_new_tokens=cfg.eval.max_new_tokens or sampling.max_new_tokens
    )
    reference = load_model(cfg.model.name, fast) if algo.beta > 0 else None

    def encode(problem: Problem) -> list[int]:
        return encode_prompt(tokenizer, problem.prompt, cfg.model.system_prompt)

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    # --- optimiser, schedule, RNG, resume ----------------------------------------------
    optimizer = torch.optim.AdamW(
        policy.parameters(),
        lr=cfg.train.lr,
        betas=cfg.train.betas,
        weight_decay=cfg.train.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))
    generator = torch.Generator().manual_seed(cfg.train.seed)
    state = TrainerState(step=0, sampler_position=0)
    checkpoint = latest_checkpoint(run_dir) if resume is not None else None
    if checkpoint is not None:
        state = load_checkpoint(checkpoint, policy, optimizer, scheduler, generator)
    engine = TorchEngine(
        policy, tokenizer.pad_token_id, dtype=fast, max_batch=cfg.rollout.max_batch
    )
    logger = MetricsLogger(
        run_dir, cfg.logging.tensorboard, resume_step=state.step if resume is not None else None
    )
    eval_problems = task.eval_problems()[: cfg.eval.n_prompts]

    def run_eval() -> dict[str, float]:
        policy.eval()
        out = {
            f"eval/greedy_{k}": v
            for k, v in evaluate_accuracy(
                engine, task, eval_problems, encode, decode, greedy
            ).items()
        }
        if cfg.eval.sampled:
            sampled = dataclasses.replace(
                greedy, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k
            )
            acc = evaluate_accuracy(engine, task, eval_problems, encode, decode, sampled)
            out["eval/sampled_accuracy"] = acc["accuracy"]
        return out

    summary: dict[str, Any] = {"run_dir": str(run_dir), "algorithm": algo.name}
    progress = ProgressDisplay(cfg.train.steps, state.step, cfg.logging.progress)
    if cfg.eval.before and state.step == 0:
        progress.print(
            f"[dim]evaluating the initial policy on {len(eval_problems)} held-out problems..."
        )
        summary["before"] = run_eval()
        logger.log(0, summary["before"])
        progress.print(f"before training: {_fmt_eval(summary['before'])}")

    with _StopRequested() as stop, progress:
        while state.step < cfg.train.steps:
            t0 = time.perf_counter()
            # 1. prompts (the sampler position makes this exactly resumable)
            problems = [
                task.train_problem(state.sampler_position + i)
                for i in range(cfg.rollout.prompts_per_step)
            ]
            state.sampler_position += len(problems)
            G = cfg.rollout.group_size

            # 2. rollout: G completions per prompt, prompt KV cache shared within the group
            rollout = engine.generate([encode(p) for p in problems], G, sampling, generator)
            texts = [decode(c) for c in rollout.completion_ids]
            t_rollout = time.perf_counter() - t0

            # 3. rewards [N] and advantages [N] (group ids [N]: sample i -> prompt i // G)
            rewards = torch.tensor(
                [reward_fn(text, problems[i // G]) for i, text in enumerate(texts)]
            )
            group_ids = rollout.group_ids
            advantages = algorithms.compute_advantages(algo.advantage, rewards, group_ids)

            # 4. policy update: mu epochs x minibatches x micro-batches
            batch = make_batch(
                rollout.prompt_ids, rollout.completion_ids, tokenizer.pad_token_id, group_ids
            )
            train_metrics = update_policy(
                policy,
                reference,
                optimizer,
                scheduler,
                batch,
                advantages,
                algo,
                cfg,
                train_dtype,
                sampling.temperature,
                generator,
                sampler_logprobs=rollout.logprobs,
            )
            engine.update_weights(policy)
            state.step += 1

            # 5. metrics, samples, eval, checkpoint
            lengths = torch.tensor([len(c) for c in rollout.completion_ids], dtype=torch.float)
            metrics = {
                "reward/mean": rewards.mean().item(),
                "reward/std": rewards.std().item() if len(rewards) > 1 else 0.0,
                "reward/accuracy": (rewards >= 1.0).float().mean().item(),
                "response/length_mean": lengths.mean().item(),
                "response/length_max": lengths.max().item(),
                "response/truncated_frac": 1 - sum(rollout.finished) / len(rollout.finished),
                **{f"groups/{k}": v for k, v in algorithms.group_stats(rewards, group_ids).items()},
                **train_metrics,
                "lr": scheduler.get_last_lr()[0],
                "time/rollout": t_rollout,
                "time/step": time.perf_counter() - t0,
                "rollout/tokens_per_s": rollout.stats["rollout/tokens_per_s"],
            }
            if cfg.eval.every and state.step % cfg.eval.every == 0 and state.step < cfg.train.steps:
                metrics.update(run_eval())
            logger.log(state.step, metrics)
            logger.log_samples(
                state.step,
                [
                    {
                        "prompt": problems[i // G].prompt,
                        "answer": problems[i // G].answer,
                        "completion": texts[i],
                        "reward": rewards[i].item(),
                    }
                    for i in range(min(cfg.logging.samples_per_step, len(texts)))
                ],
            )
            progress.update(metrics)
            due = cfg.checkpoint.every and state.step % cfg.checkpoint.every == 0
            if due or stop.signal is not None:
                save_checkpoint(
                    run_dir,
                    state,
                    policy,
                    tokenizer,
                    optimizer,
                    scheduler,
                    generator,
                    keep=cfg.checkpoint.keep,
                )
            if stop.signal is not None:
                progress.print(
                    f"stopped by signal {stop.signal} after step {state.step}; "
                    f"resume with: rlvr train --resume {run_dir}"
                )
                summary["stopped"] = True
                break

    if not summary.get("stopped"):
        if cfg.checkpoint.save_final:
            save_checkpoint(
                run_dir,
                state,
                policy,
                tokenizer,
                optimizer,
                scheduler,
                generator,
                keep=cfg.checkpoint.keep,
            )
        if cfg.eval.after:
            summary["after"] = run_eval()
            logger.log(state.step, summary["after"])
    logger.close()
    summary["steps"] = state.step
    summary["wall_seconds"] = time.perf_counter() - start_time
    return summary


def update_policy(
    policy: torch.nn.Module,
    reference: torch.nn.Module | None,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batch: Batch,
    advantages: torch.Tensor,
    algo: algorithms.Preset,
    cfg: Config,
    dtype: torch.dtype,
    temperature: float,
    generator: torch.Generator,
    sampler_logprobs: list[list[float]],
) -> dict[str, float]:
    """``ppo_epochs`` passes of ``minibatches`` optimiser steps over one rollout batch.

    Samples with zero advantage and no KL term contribute exactly zero loss and gradient, so
    they are skipped in the forward pass; they still count in the aggregation's normalisers.
    Returns averaged metrics (loss, clip fractions, ratio, entropy, KL, grad norm).
    """
    n = batch.completion_ids.shape[0]
    device = next(policy.parameters()).device
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)
    mb = cfg.train.micro_batch_size
    on_policy = cfg.algorithm.ppo_epochs == 1 and cfg.algorithm.minibatches == 1
    policy.train()

    def logprobs_no_grad(model: torch.nn.Module) -> torch.Tensor:
        out = torch.zeros(batch.completion_mask.shape)
        with torch.no_grad(), autocast:
            for lo in range(0, n, mb):
                rows = torch.arange(lo, min(n, lo + mb))
                sub = batch.select(rows)
                out[rows, : sub.completion_ids.shape[1]] = completion_logprobs(
                    model, sub, temperature, shared_prefix=cfg.train.shared_prefix
                )[0]
        return out

    old_logp = None if on_policy else logprobs_no_grad(policy)
    ref_logp = logprobs_no_grad(reference) if reference is not None else None
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}

    def add(key: str, value: float) -> None:
        sums[key] = sums.get(key, 0.0) + value
        counts[key] = counts.get(key, 0) + 1

    for _epoch in range(cfg.algorithm.ppo_epochs):
        order = torch.randperm(n, generator=generator)
        for shuffled in order.chunk(cfg.algorithm.minibatches):
            rows = shuffled.sort().values  # groups contiguous: micro-batches share prompts
            mask = batch.completion_mask[rows]
            total_tokens = float(mask.sum())
            total_seqs = float(len(rows))
            active = rows if reference is not None else rows[advantages[rows] != 0]
            optimizer.zero_grad(set_to_none=True)
            for lo in range(0, len(active), mb):
                sub_rows = active[lo : lo + mb]
                sub = batch.select(sub_rows)
                width = sub.completion_ids.shape[1]
                with autocast:
                    logp, entropy = completion_logprobs(
                        policy, sub, temperature, True, shared_prefix=cfg.train.shared_prefix
                    )
                old = logp.detach() if old_logp is None else old_logp[sub_rows, :width]
                loss_tok, info = algorithms.clipped_policy_loss(
                    logp,
                    old,
                    advantages[sub_rows],
                    algo.clip_low,
                    algo.clip_high,
                    algo.dual_clip,
                )
                if ref_logp is not None:
                    kl = algorithms.kl_penalty(algo.kl_estimator, logp, ref_logp[sub_rows, :width])
                    loss_tok = loss_tok + algo.beta * kl
                    add(
                        "policy/kl_ref",
                        algorithms.masked_mean(kl.detach(), sub.completion_mask).item(),
                    )
                loss = algorithms.aggregate(
                    loss_tok,
                    sub.completion_mask,
                    algo.aggregation,
                    total_tokens=total_tokens,
                    total_seqs=total_seqs,
                    max_len=cfg.rollout.max_new_tokens,
                )
                loss.backward()
                add("policy/loss", loss.item())
                add("policy/entropy", algorithms.masked_mean(entropy, sub.completion_mask).item())
                for k, v in algorithms.policy_metrics(info, sub.completion_mask).items():
                    add(f"policy/{k}", v)
                if on_policy:
                    sampled = torch.zeros_like(logp)
                    for j, r in enumerate(sub_rows.tolist()):
                        lps = sampler_logprobs[r]
                        sampled[j, : len(lps)] = torch.tensor(lps)
                    diff = (logp.detach() - sampled).abs() * sub.completion_mask
                    add(
                        "rollout/logprob_abs_diff",
                        (diff.sum() / sub.completion_mask.sum().clamp(min=1)).item(),
                    )
            if cfg.train.grad_clip > 0:
                norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.train.grad_clip)
            else:
                norm = torch.nn.utils.get_total_norm(
                    [p.grad for p in policy.parameters() if p.grad is not None]
                )
            add("policy/grad_norm", float(norm))
            optimizer.step()
            scheduler.step()
    policy.eval()
    metrics = {k: sums[k] / counts[k] for k in sums}
    metrics["policy/trained_samples_frac"] = (
        float((advantages != 0).float().mean()) if reference is None else 1.0
    )
    return metrics


def _fmt_eval(result: dict[str, float]) -> str:
    parts = [f"greedy accuracy {result['eval/greedy_accuracy']:.1%}"]
    if "eval/sampled_accuracy" in result:
        parts.append(f"sampled accuracy {result['eval/sampled_accuracy']:.1%}")
    parts.append(f"mean length {result['eval/greedy_length_mean']:.0f} tokens")
    return ", ".join(parts)
