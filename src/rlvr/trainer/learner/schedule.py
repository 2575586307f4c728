"""The optimizer's schedule and step: the learning rate per optimizer step (linear warmup, then
constant, cosine or linear decay), a resumed optimizer made to follow a new config, and one
clipped AdamW step."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from rlvr.algorithms import Algorithm
from rlvr.config import Config
from rlvr.trainer.learner.kinds import Averages, SkipStep


def lr_lambda(cfg: Config, algo: Algorithm) -> Callable[[int], float]:
    """LR multiplier per optimiser step (``algo.ppo_epochs * algo.minibatches`` per training
    step): linear warmup, then constant / cosine / linear decay."""
    tr = cfg.train
    total = tr.steps * algo.ppo_epochs * algo.minibatches

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


def apply_optimizer_config(
    optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LambdaLR, cfg: Config
) -> None:
    """Make a resumed optimiser follow ``cfg`` (its loaded state keeps the old run's learning
    rate, betas and weight decay): base LR ``train.lr`` under ``lr_lambda(cfg, algo)`` from the
    scheduler's current step."""
    factor = scheduler.lr_lambdas[0](scheduler.last_epoch)
    scheduler.base_lrs = [cfg.train.lr for _ in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["initial_lr"] = cfg.train.lr
        group["lr"] = cfg.train.lr * factor
        group["betas"] = tuple(cfg.train.betas)
        group["weight_decay"] = cfg.train.weight_decay


def optimizer_step(
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    grad_clip: float,
    averages: Averages,
) -> None:
    """Clip the gradient norm to ``grad_clip`` (0: only measure it), step the optimizer and the
    schedule; :class:`SkipStep` on a non-finite norm or an update beyond float range."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if grad_clip > 0:
        norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    else:
        norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    if hasattr(norm, "full_tensor"):  # a sharded policy's norm (a DTensor): every rank's shards
        norm = norm.full_tensor()
    if not math.isfinite(float(norm)):
        raise SkipStep("gradient norm", "policy/grad_norm", float(norm))
    averages.add("policy/grad_norm", float(norm))
    try:
        optimizer.step()
    except RuntimeError as err:  # an update beyond float range (absurd train.lr)
        if "overflow" not in str(err):
            raise
        raise SkipStep("optimizer update", "policy/update_overflow", math.inf) from None
    # the fused kernel updates the parameters in place without counting it in their version
    # counters, which the engine's caches of derived weights (packed, LoRA-merged) go by: an
    # engine sharing them would go on serving the weights before the step
    torch.autograd.graph.increment_version(params)
    scheduler.step()
