"""Learn: a :class:`~rlvr.trainer.batch.Trajectories` batch -> advantages -> ``ppo_epochs`` x
``minibatches`` optimizer steps over micro-batches (docs/design.md, "One training step", step 4).

:class:`Learner` owns the policy's trained weights, the value head (PPO), the reference model,
the optimizer and the schedule; :meth:`Learner.update` is the whole update of one step. The
formulas are pure functions of :mod:`rlvr.algorithms`; this file orders them.

The objective one update maximises (the loss minimised is its negative), for a batch of groups
of samples o_i with tokens t, the sampled-token mask m_{i,t} (``train_mask``: action tokens, or
the top-entropy ones) and the preset's parts::

    J(theta) = - agg_{i,t}[ m_{i,t} * ( l^PG_{i,t}(theta) * w_{i,t}        (1), (2), (3)
                                        + beta * KL_t(pi_theta || pi_ref)  (4)
                                        - c_H * H_t(pi_theta) ) ]           (5)
               - c_V * agg_{i,t}[ m_{i,t} * l^V_{i,t}(phi) ]                (6)

(1) the advantages A_i or A_{i,t}: :meth:`Learner.prepare`, ``algorithms.preset_advantages``
    (the estimator, batch whitening, sign weights; KL in the reward for REINFORCE++/PPO) or,
    for multi-turn episodes, ``turn_credit`` (``algorithm.credit``);
(2) l^PG, the clipped (or GSPO / GMPO / CISPO / REINFORCE) surrogate of the ratio
    pi_theta / pi_old and A: ``algorithms.policy_loss`` in :func:`_micro_batch_loss` (a
    ``sampler_anchored`` loss, DPPO, takes pi_sampler for pi_old);
(3) w, the sampler-trainer correction pi_old / pi_sampler truncated (TIS) or masked (MIS):
    :func:`_sampler_weights`;
(4) the KL to the reference in the loss (``kl_in: loss``): ``algorithms.kl_penalty`` in
    :func:`_micro_batch_loss`;
(5) the entropy bonus: ``algorithms.entropy_bonus``;
(6) PPO's clipped value loss (``advantage: gae``): ``algorithms.value_loss``;
and agg, the aggregation (token-mean, seq-mean-token-mean, ...) normalised by the minibatch's
global token and sequence counts: ``algorithms.aggregate`` (one micro-batch's share each, so
the accumulated gradient is the minibatch's). Then the gradient norm is clipped and AdamW steps
(:func:`_optimizer_step`).

Other objectives (``algorithm.objective``, :mod:`rlvr.algorithms.objectives`) replace the
policy-gradient term and keep the rest of the update (minibatches, micro-batches, AdamW):

- ``imitation`` (SFT, RFT): l_{i,t} = -w_i log pi_theta(y_{i,t}) on the samples with w_i > 0
  (w: the preset's advantages, 1 for a demonstration or a verified sample), token mean over
  their trained tokens: ``algorithms.nll_loss`` in :func:`_micro_batch_loss`;
- pair objectives (DPO, IPO, REBEL): the pairs of each group
  (``algorithms.preference_pairs``) are shuffled into minibatches instead of samples, and
  ``J = -mean_pairs l(log pi(y_c), log pi(y_r), log pi_ref(.), log pi_old(.), r_c - r_r)``
  with sequence log-probs: :func:`_pair_loss`.

``sft_coef`` > 0 adds ``sft_coef * NLL`` of each trained group's demonstration to the
policy-gradient loss (an SFT term beside RL; :func:`_demonstration_loss`).

A non-finite advantage, loss or gradient norm stops the update where it is found (no further
optimizer step) and is reported to the loop, which counts the skipped step.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlvr import adapters, algorithms
from rlvr.algorithms.credit import assign_credit, token_advantages
from rlvr.checkpoint import TrainerState, load_latest_good, load_pending, save_checkpoint
from rlvr.config import AlgorithmConfig, Config
from rlvr.distributed.data_parallel import DataParallel
from rlvr.grading import snapshot_params, update_sparsity
from rlvr.guards import first_nonfinite
from rlvr.policy import Batch, ValueHead, completion_logprobs, make_batch
from rlvr.rollout.streams import stream_key
from rlvr.trainer.batch import Sampled, Trajectories

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


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


def apply_optimizer_config(
    optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LambdaLR, cfg: Config
) -> None:
    """Make a resumed optimiser follow ``cfg`` (its loaded state keeps the old run's learning
    rate, betas and weight decay): base LR ``train.lr`` under ``lr_lambda(cfg)`` from the
    scheduler's current step."""
    factor = scheduler.lr_lambdas[0](scheduler.last_epoch)
    scheduler.base_lrs = [cfg.train.lr for _ in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["initial_lr"] = cfg.train.lr
        group["lr"] = cfg.train.lr * factor
        group["betas"] = tuple(cfg.train.betas)
        group["weight_decay"] = cfg.train.weight_decay


class _SkipStep(Exception):
    """Raised inside :func:`update_policy` when a loss or gradient norm is non-finite; carries
    the quantity's name and its metric (logged as "nan"/"inf")."""

    def __init__(self, quantity: str, key: str, value: float) -> None:
        super().__init__(quantity)
        self.quantity, self.key, self.value = quantity, key, value


@dataclass
class _Step:
    """What every micro-batch of one update reads: the batch, and per-sample tensors [N] or
    [N, T] fixed before the first optimizer step."""

    batch: Batch
    advantages: torch.Tensor
    returns: torch.Tensor | None
    train_mask: torch.Tensor  # [N, T] float: the tokens the loss sees
    old_logp: torch.Tensor | None  # pi_old (None: on-policy, the detached current log-probs)
    old_values: torch.Tensor | None
    ref_logp: torch.Tensor | None
    sampler_logp: torch.Tensor  # [N, T] the behaviour policy (the rollout engine)
    rewards: torch.Tensor  # [N]
    pairs: torch.Tensor | None = None  # [P, 2] (chosen, rejected) rows of a pair objective
    skipped_groups: int = 0  # groups that gave no pair (equal rewards)
    demonstrations: Batch | None = None  # [P] each group's demonstration (sft_coef)


class _Averages:
    """Running (weighted) means of the metrics of an update's micro-batches and optimizer
    steps: a micro-batch's token mean added with its token count as ``weight`` gives the exact
    token mean over all of them."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}

    def add(self, key: str, value: float, weight: float = 1.0) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + value * weight
        self.counts[key] = self.counts.get(key, 0.0) + weight

    def means(self) -> dict[str, float]:
        return {k: self.sums[k] / self.counts[k] if self.counts[k] else 0.0 for k in self.sums}


def _no_grad_pass(
    model: torch.nn.Module,
    batch: Batch,
    temperature: float,
    cfg: Config,
    autocast: torch.autocast,
    head: ValueHead | None = None,
    only: torch.Tensor | None = None,
    packed: bool = False,
) -> tuple[torch.Tensor, ...]:
    """log-probs, entropies (and values) [N, T] of every sample under ``model`` (``only``: of
    those rows, zeros elsewhere; ``packed``: sequence packing)."""
    mb = cfg.train.micro_batch_size
    shape, device = batch.completion_mask.shape, batch.completion_mask.device
    outs = [torch.zeros(shape, device=device) for _ in range(3 if head else 2)]
    todo = torch.arange(shape[0]) if only is None else only
    with torch.no_grad(), autocast:
        for lo in range(0, len(todo), mb):
            rows = todo[lo : lo + mb]
            sub = batch.select(rows)
            width = sub.completion_ids.shape[1]
            parts = completion_logprobs(
                model,
                sub,
                temperature,
                True,
                shared_prefix=cfg.train.shared_prefix,
                value_head=head,
                chunk_tokens=cfg.train.logprob_chunk_tokens,
                packed=packed,
            )
            for out, part in zip(outs, parts, strict=True):
                out[rows, :width] = part
    return tuple(outs)


_WEIGHT_METRICS = {
    "truncated_frac": "rollout/tis_clipped_frac",
    "masked_frac": "rollout/mis_masked_frac",
}
"""The metric of each statistic of :func:`rlvr.algorithms.importance_weights`."""


def _sampler_weights(
    cfg: Config,
    old: torch.Tensor,
    sampler_logp: torch.Tensor,
    mask: torch.Tensor,
    averages: _Averages,
    describe: bool,
    sampled: bool = True,
) -> torch.Tensor | None:
    """The importance weights [n, T] of a micro-batch's policy loss correcting the sampler /
    trainer mismatch (``algorithm.tis_cap``, ``mis_band``; None: no correction), from pi_old
    ``old`` and the sampler's log-probs of whole rows (sequence ratios need them).

    ``describe``: log the mismatch (``mismatch/*``) and the weights' statistics, token means
    weighted by the micro-batch's tokens; true in the first epoch only, which sees every trained
    row once (pi_old, hence the weights, are the same in every epoch). ``sampled``: False for
    the data's completions, which no sampler produced (no correction, no metrics)."""
    algo = cfg.algorithm
    weights: torch.Tensor | None = None
    info: dict[str, float] = {}
    if not sampled:  # the data's completions: no behaviour policy to correct for
        return None
    if algo.tis_cap is not None or algo.mis_band is not None:
        weights, info = algorithms.importance_weights(
            old, sampler_logp, mask, algo.tis_cap, algo.tis_level, algo.mis_band, algo.mis_level
        )
    if describe:
        means, tokens = algorithms.mismatch_metrics(old, sampler_logp, mask)
        if weights is not None:
            means["rollout/is_weight_mean"] = algorithms.masked_mean(weights, mask).item()
        means.update({_WEIGHT_METRICS[k]: v for k, v in info.items()})
        for key, value in means.items():
            averages.add(key, value, tokens)
    return weights


def _reward_terms(
    data: Trajectories, device: torch.device
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The batch's reward terms [N, K] and their weights [K] (GDPO's inputs), or (None, None)
    where the reward is one function (no terms with weights)."""
    weights = data.term_weights
    if not weights or not data.terms or set(data.terms) != set(weights):
        return None, None
    labels = sorted(weights)
    terms = torch.tensor([data.terms[label] for label in labels], dtype=torch.float32).T
    return terms.to(device), torch.tensor([weights[label] for label in labels], device=device)


def _micro_batch_loss(
    learner: Learner,
    step: _Step,
    sub_rows: torch.Tensor,
    totals: tuple[float, float],
    averages: _Averages,
    describe: bool,
) -> torch.Tensor:
    """The loss of one micro-batch (rows ``sub_rows``, whole rows), normalised by the
    minibatch's global token and sequence counts ``totals``; its metrics go to ``averages``
    (``describe``: with those describing the batch, see :func:`_sampler_weights`)."""
    algo, cfg = learner.algo, learner.cfg
    sub = step.batch.select(sub_rows)
    width = sub.completion_ids.shape[1]
    sub_mask = step.train_mask[sub_rows, :width]
    with learner.autocast():
        logp, entropy, *values = completion_logprobs(
            learner.compiled or learner.policy,
            sub,
            learner.temperature,
            True,
            shared_prefix=cfg.train.shared_prefix,
            entropy_grad=bool(algo.entropy_coef) or learner.entropy_control is not None,
            value_head=learner.value_head,
            chunk_tokens=cfg.train.logprob_chunk_tokens,
            packed=learner.packed,
        )
    old = logp.detach() if step.old_logp is None else step.old_logp[sub_rows, :width]
    adv = step.advantages[sub_rows]
    adv = adv[:, :width] if adv.dim() == 2 else adv
    sampler_logp = step.sampler_logp[sub_rows, :width]
    sampled = algo.samples == "policy"
    if learner.objective.kind == "imitation":  # SFT / RFT: -w_i log pi on the kept samples
        loss_tok, info = algorithms.nll_loss(logp, adv), {}
    else:
        # DPPO's trust region is anchored to the sampler's policy, not pi_old (arXiv:2602.04879,
        # "The Correct Anchor for the Trust Region"): such a loss gets the sampler's log-probs
        anchored = algorithms.POLICY_LOSSES[algo.policy_loss].sampler_anchored and sampled
        loss_tok, info = algorithms.policy_loss(
            algo.policy_loss,
            logp,
            sampler_logp if anchored else old,
            adv,
            sub.action_mask,
            algo.clip_low,
            algo.clip_high,
            algo.dual_clip,
            # Clip-Cov's random pick: a new stream per minibatch and micro-batch, named by the
            # checkpointed count of minibatches (a skipped one's too: no stream is drawn twice),
            # so a resumed run draws as the uninterrupted one
            seed=stream_key(cfg.train.seed, learner.minibatches, int(sub_rows[0])),
            **algo.params.get("policy_loss", {}),
        )
    weights = _sampler_weights(cfg, old, sampler_logp, sub.action_mask, averages, describe, sampled)
    if weights is not None:  # TIS / MIS (importance.py)
        loss_tok = loss_tok * weights
    delta = cfg.algorithm.off_policy_mask
    if delta is not None and sampled:  # DeepSeek-V3.2's off-policy sequence masking
        keep, dropped = algorithms.off_policy_sequence_mask(
            logp, sampler_logp, adv, sub.action_mask, delta
        )
        loss_tok = loss_tok * keep
        averages.add("policy/off_policy_masked_frac", dropped, len(sub_rows))
    if step.ref_logp is not None and algo.kl_in == "loss":
        kl = algorithms.kl_penalty(
            algo.kl_estimator,
            logp,
            step.ref_logp[sub_rows, :width],
            **algo.params.get("kl_estimator", {}),
        )
        loss_tok = loss_tok + algo.beta * kl
        averages.add("policy/kl_ref", algorithms.masked_mean(kl.detach(), sub_mask).item())
    if algo.entropy_coef:
        loss_tok = loss_tok + algorithms.entropy_bonus(entropy, algo.entropy_coef)
    control = learner.entropy_control
    if control is not None and control.bonus:  # Skywork-OR1: -c_k 1[active_k] H
        loss_tok = loss_tok + algorithms.entropy_bonus(entropy, control.bonus)
    tokens, seqs = totals
    max_len = cfg.max_completion_tokens
    aggregation_params = algo.params.get("aggregation", {})
    loss = algorithms.aggregate(
        loss_tok,
        sub_mask,
        algo.aggregation,
        total_tokens=tokens,
        total_seqs=seqs,
        max_len=max_len,
        **aggregation_params,
    )
    if learner.value_head is not None:  # PPO critic: clipped value loss on the returns
        assert step.old_values is not None and step.returns is not None
        v_loss = algorithms.value_loss(
            values[0],
            step.old_values[sub_rows, :width],
            step.returns[sub_rows, :width],
            sub.action_mask,
            algo.value_clip,
        )
        v_loss = algorithms.aggregate(
            v_loss,
            sub_mask,
            algo.aggregation,
            total_tokens=tokens,
            total_seqs=seqs,
            max_len=max_len,
            **aggregation_params,
        )
        loss = loss + algo.vf_coef * v_loss
        averages.add("value/loss", v_loss.item())
        averages.add("value/mean", algorithms.masked_mean(values[0].detach(), sub_mask).item())
    if not torch.isfinite(loss):
        raise _SkipStep("loss", "policy/loss", loss.item())
    averages.add("policy/loss", loss.item())
    ent = entropy.detach()
    averages.add("policy/entropy", algorithms.masked_mean(ent, sub.action_mask).item())
    if learner.objective.kind == "imitation":
        nll = algorithms.masked_mean(-logp.detach(), sub_mask).item()
        averages.add("sft/nll", nll, float(sub_mask.sum()))
    else:
        for k, v in algorithms.policy_metrics(info, sub.action_mask).items():
            averages.add(f"policy/{k}", v)
    return loss


def _pair_loss(
    learner: Learner,
    step: _Step,
    pairs: torch.Tensor,
    total_pairs: float,
    averages: _Averages,
) -> torch.Tensor:
    """The loss of one micro-batch of ``pairs`` [p, 2] (chosen, rejected rows) under a pair
    objective (DPO, IPO, REBEL: :mod:`rlvr.algorithms.preference`), normalised by the
    minibatch's global pair count ``total_pairs``; sequence log-probs are sums over each
    completion's trained tokens."""
    algo, cfg = learner.algo, learner.cfg
    p = len(pairs)
    rows = torch.cat([pairs[:, 0], pairs[:, 1]])  # chosen rows, then rejected rows
    sub = step.batch.select(rows)
    width = sub.completion_ids.shape[1]
    mask = sub.action_mask.float()
    with learner.autocast():
        logp, entropy = completion_logprobs(
            learner.compiled or learner.policy,
            sub,
            learner.temperature,
            True,
            shared_prefix=cfg.train.shared_prefix,
            chunk_tokens=cfg.train.logprob_chunk_tokens,
            packed=learner.packed,
        )
    seq = (logp * mask).sum(-1)  # log pi(y | x) [2p]
    old = logp.detach() if step.old_logp is None else step.old_logp[rows, :width]
    old_seq = (old * mask).sum(-1)
    ref_seq = None
    if step.ref_logp is not None:
        ref_seq = (step.ref_logp[rows, :width] * mask).sum(-1)
    rewards = step.rewards[rows]
    logps = algorithms.PairLogps(
        chosen=seq[:p],
        rejected=seq[p:],
        ref_chosen=None if ref_seq is None else ref_seq[:p],
        ref_rejected=None if ref_seq is None else ref_seq[p:],
        old_chosen=old_seq[:p],
        old_rejected=old_seq[p:],
        reward_margin=rewards[:p] - rewards[p:],
    )
    assert learner.objective.fn is not None
    loss_pairs, info = learner.objective.fn(logps, **algo.params.get("objective", {}))
    loss = loss_pairs.sum() / total_pairs
    if not torch.isfinite(loss):
        raise _SkipStep("loss", "policy/loss", loss.item())
    averages.add("policy/loss", loss_pairs.mean().item(), p)
    for key, value in info.items():
        averages.add(f"preference/{key}", value.float().mean().item(), p)
    tokens = float(mask.sum())
    averages.add("policy/entropy", algorithms.masked_mean(entropy, mask).item(), tokens)
    return loss


def _demonstration_loss(
    learner: Learner, step: _Step, groups: torch.Tensor, total_tokens: float, averages: _Averages
) -> torch.Tensor:
    """``sft_coef`` x the NLL of the demonstrations of ``groups`` (a micro-batch of them), as a
    share of the token mean over the minibatch's groups' demonstration tokens
    ``total_tokens``: the SFT term beside the RL loss."""
    assert step.demonstrations is not None
    sub = step.demonstrations.select(groups)
    with learner.autocast():
        logp, _ = completion_logprobs(
            learner.compiled or learner.policy,
            sub,
            learner.temperature,
            shared_prefix=learner.cfg.train.shared_prefix,
            chunk_tokens=learner.cfg.train.logprob_chunk_tokens,
            packed=learner.packed,
        )
    mask = sub.action_mask.float()
    nll = -(logp * mask).sum()
    if not torch.isfinite(nll):
        raise _SkipStep("loss", "sft/nll", nll.item())
    averages.add("sft/nll", nll.item() / max(float(mask.sum()), 1.0), float(mask.sum()))
    return learner.algo.sft_coef * nll / max(total_tokens, 1.0)


def _optimizer_step(learner: Learner, averages: _Averages) -> None:
    """Clip (or measure) the gradient norm, step the optimizer and the schedule."""
    params = [p for group in learner.optimizer.param_groups for p in group["params"]]
    clip = learner.cfg.train.grad_clip
    if clip > 0:
        norm = torch.nn.utils.clip_grad_norm_(params, clip)
    else:
        norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    if not math.isfinite(float(norm)):
        raise _SkipStep("gradient norm", "policy/grad_norm", float(norm))
    averages.add("policy/grad_norm", float(norm))
    try:
        learner.optimizer.step()
    except RuntimeError as err:  # an update beyond float range (absurd train.lr)
        if "overflow" not in str(err):
            raise
        raise _SkipStep("optimizer update", "policy/update_overflow", math.inf) from None
    learner.scheduler.step()


def _sample_gradients(
    learner: Learner,
    step: _Step,
    rows: torch.Tensor,
    nonzero: torch.Tensor | None,
    describe: bool,
    averages: _Averages,
) -> _SkipStep | None:
    """Accumulate one minibatch's gradient (its sample ``rows``) over micro-batches: the
    policy-gradient or imitation loss of this learner's rows (``nonzero``: only the rows with a
    nonzero advantage, when the others contribute nothing), then with ``sft_coef`` the SFT term
    of their groups' demonstrations. The non-finite loss that stopped it, or None."""
    mb = learner.cfg.train.micro_batch_size
    totals = (float(step.train_mask[rows].sum()), float(len(rows)))
    active = rows[nonzero[rows]] if nonzero is not None else rows
    active = learner.share(active)  # this learner's rows (all of them in one process)
    try:
        for lo in range(0, len(active), mb):
            loss = _micro_batch_loss(
                learner, step, active[lo : lo + mb], totals, averages, describe
            )
            loss.backward()
        if step.demonstrations is not None:  # sft_coef: SFT beside RL
            groups = step.batch.prompt_index[rows].unique().cpu()
            total = float(step.demonstrations.action_mask[groups].sum())
            mine = learner.share(groups)
            for lo in range(0, len(mine), mb):
                loss = _demonstration_loss(learner, step, mine[lo : lo + mb], total, averages)
                loss.backward()
    except _SkipStep as err:
        return err
    return None


def _pair_gradients(
    learner: Learner, step: _Step, pairs: torch.Tensor, averages: _Averages
) -> _SkipStep | None:
    """Accumulate one minibatch's gradient over its ``pairs`` [p, 2] (this learner's share),
    a micro-batch of ``micro_batch_size / 2`` pairs at a time (two sequences each); the
    non-finite loss that stopped it, or None."""
    mine = pairs[learner.share(torch.arange(len(pairs)))]
    per = max(1, learner.cfg.train.micro_batch_size // 2)
    try:
        for lo in range(0, len(mine), per):
            _pair_loss(learner, step, mine[lo : lo + per], float(len(pairs)), averages).backward()
    except _SkipStep as err:
        return err
    return None


def update_policy(learner: Learner, data: Trajectories) -> tuple[dict[str, float], str | None]:
    """Advantages, then ``ppo_epochs`` passes of ``minibatches`` optimizer steps over a batch.

    With a value head (PPO), per-token GAE advantages come from the rollout-time values and the
    clipped value loss is added with weight ``vf_coef``. Samples whose advantages are all zero
    contribute exactly zero loss and gradient when there is no KL term in the loss, no entropy
    bonus and no value loss, so they are skipped in the forward pass; they still count in the
    aggregation's normalisers. Returns averaged metrics (loss, clip fractions, ratio, entropy,
    KL, grad norm) and None; or ``({}, quantity)`` when the advantages, a loss or a gradient
    norm is non-finite: no optimizer step is taken from then on (steps of earlier minibatches,
    all finite, stay).
    """
    algo, cfg, policy = learner.algo, learner.cfg, learner.policy
    if len(data) == 0:  # no group passed the selector in max_draws draws: nothing to train on
        return {"policy/loss": 0.0, "policy/trained_samples_frac": 0.0}, None
    step, token_kl = learner.prepare(data)
    if first_nonfinite({"advantages": step.advantages}) is not None:
        bad_frac = (~torch.isfinite(step.advantages)).float().mean().item()
        return {"advantages/nonfinite_frac": bad_frac}, "advantages"
    n = len(data)
    kl_in_loss = learner.has_reference and algo.kl_in == "loss"
    skippable = (
        not kl_in_loss
        and not algo.entropy_coef
        and learner.entropy_control is None
        and learner.value_head is None
    )
    mask, advantages = step.batch.action_mask, step.advantages
    nonzero = advantages != 0 if advantages.dim() == 1 else (advantages * mask != 0).any(-1)
    nonzero = nonzero.cpu()  # indexes the CPU row orders of the shuffle
    pairs = step.pairs  # a pair objective shuffles pairs, not samples
    averages = _Averages()
    policy.train()
    try:
        for epoch in range(cfg.algorithm.ppo_epochs):
            order = torch.randperm(n if pairs is None else len(pairs), generator=learner.generator)
            for shuffled in order.chunk(cfg.algorithm.minibatches):
                learner.optimizer.zero_grad(set_to_none=True)
                rows = shuffled.sort().values  # groups contiguous: micro-batches share prompts
                if pairs is not None:
                    skip = _pair_gradients(learner, step, pairs[rows], averages)
                else:
                    kept = nonzero if skippable else None
                    skip = _sample_gradients(learner, step, rows, kept, epoch == 0, averages)
                skip = learner.sync_gradients(skip)  # learners sum their gradients
                learner.minibatches += 1  # counted whether its optimizer step is taken or not
                if skip is not None:
                    raise skip
                _optimizer_step(learner, averages)
    except _SkipStep as skip:  # nothing of this step reaches the optimizer any more
        learner.optimizer.zero_grad(set_to_none=True)
        policy.eval()
        return {skip.key: skip.value}, skip.quantity
    policy.eval()
    if learner.group is not None:
        learner.group.merge_averages(averages.sums, averages.counts)
    metrics = averages.means()
    metrics.setdefault("policy/loss", 0.0)  # every advantage was zero: nothing to train on
    if token_kl is not None:
        metrics["policy/kl_ref"] = algorithms.masked_mean(token_kl, mask).item()
    if pairs is not None:
        metrics["preference/pairs"] = float(len(pairs))
        metrics["preference/skipped_groups"] = float(step.skipped_groups)
        metrics["policy/trained_samples_frac"] = float(len(pairs.unique())) / max(1, n)
        return metrics, None
    metrics["policy/trained_samples_frac"] = float(nonzero.float().mean() if skippable else 1.0)
    metrics.update(advantage_stats(advantages, mask))
    return metrics, None


def _padded(values: list[list[float]], shape: torch.Size) -> torch.Tensor:
    """Per-token values of each sample right-padded with 0 to ``shape`` [N, T]."""
    out = torch.zeros(shape)
    for i, row in enumerate(values):
        out[i, : len(row)] = torch.tensor(row)
    return out


def advantage_stats(advantages: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """``advantages/mean``, ``std``, ``abs_mean``, ``min``, ``max`` over the trained tokens
    (``mask`` [N, T]; per-sample advantages [N] count once per token, as the loss sees them;
    as verl logs them)."""
    per_token = advantages if advantages.dim() == 2 else advantages[:, None].expand(mask.shape)
    values = per_token[mask > 0].detach().float()
    if values.numel() == 0:
        return {}
    return {
        "advantages/mean": values.mean().item(),
        "advantages/std": values.std().item() if values.numel() > 1 else 0.0,
        "advantages/abs_mean": values.abs().mean().item(),
        "advantages/min": values.min().item(),
        "advantages/max": values.max().item(),
    }


def turn_credit(
    algo: algorithms.Preset, settings: AlgorithmConfig, data: Trajectories, mask: torch.Tensor
) -> torch.Tensor:
    """Per-token advantages [N, T] of agent episodes under ``algorithm.credit``
    (:mod:`rlvr.algorithms.credit`): per-turn advantages with the preset's estimator as the
    group baseline, spread over each turn's sampled tokens (``mask`` [N, T])."""

    def estimator(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
        inputs = algorithms.AdvantageInputs(rewards=rewards.float(), group_ids=group_ids)
        return algorithms.preset_advantages(algo, inputs).advantages

    per_turn = assign_credit(
        settings.credit,
        data.turn_rewards,
        data.anchors,
        data.group_ids.cpu(),
        estimator,
        gamma=settings.credit_gamma,
        weight=settings.gigpo_weight,
        gate=settings.credit_gate,
    )
    return token_advantages(per_turn, mask.cpu()).to(mask.device)


class PublishedCopy(torch.nn.Module):
    """The trained parameters as last published to the rollouts, and their policy version: with
    ``sync_every`` = s > 1 (semi-online, Lanchantin et al. 2025) the rollouts serve this
    snapshot between syncs, so a checkpoint keeps it and a resume serves it again."""

    def __init__(self, policy: torch.nn.Module) -> None:
        super().__init__()
        self.names = [n for n, p in policy.named_parameters() if p.requires_grad]
        params = dict(policy.named_parameters())
        for i, name in enumerate(self.names):
            self.register_buffer(f"p{i}", params[name].detach().clone())
        self.register_buffer("version", torch.zeros((), dtype=torch.long))

    def refresh(self, policy: torch.nn.Module, version: int) -> None:
        """Copy the policy's trained parameters in, as ``version``."""
        params = dict(policy.named_parameters())
        with torch.no_grad():
            for i, name in enumerate(self.names):
                getattr(self, f"p{i}").copy_(params[name])
        self.version.fill_(version)

    def swap(self, policy: torch.nn.Module) -> None:
        """Exchange the policy's trained parameters with the copy's (twice: as before)."""
        params = dict(policy.named_parameters())
        with torch.no_grad():
            for i, name in enumerate(self.names):
                mine = getattr(self, f"p{i}")
                kept = params[name].detach().clone()
                params[name].copy_(mine)
                mine.copy_(kept)


@dataclass
class Learner:
    """Trains the policy on :class:`Trajectories` (see the module docstring).

    Attributes:
        policy: the trained model (fp32 weights); what the collector is given after an update.
        value_head: PPO's critic (``advantage: gae``) or None.
        reference: the frozen reference model (``beta > 0``, full fine-tuning) or None.
        optimizer, scheduler: AdamW over the policy (and value head), and its LR schedule.
        algo: the resolved preset; ``cfg``: the run's config.
        dtype: autocast dtype of the training forward (fp32: none).
        temperature: the sampling temperature (log-probs are of the temperature-scaled policy).
        generator: the random stream of minibatch shuffling.
        pad_token_id: pads the batch.
        version: optimizer updates so far (one per :meth:`update` that stepped).
        minibatches: the minibatches whose gradient was computed so far, their optimizer step
            taken or skipped (a non-finite loss or gradient): names Clip-Cov's random stream
            (checkpointed).
        compiled: ``torch.compile(policy)`` for the training forward (``train.compile``), or
            None; it shares the policy's weights.
        group: the data-parallel group of Ray's learners (:mod:`rlvr.distributed.data_parallel`)
            or None.
        initial: the policy's initial weights (``logging.update_sparsity``: each update logs
            the fraction of parameters changed since, ``policy/params_changed_frac``) or None.
        precision: what ``auto`` precision settings stood for here and why
            (:meth:`rlvr.precision.Choice.record`), or None when none was ``auto``.
        adapter_reference: with a LoRA policy and ``beta > 0``, the reference is the policy
            itself with its adapter switched: ``"base"`` (adapters disabled: the base model, no
            second copy of the weights) or :data:`rlvr.adapters.REFERENCE` (a frozen copy of
            the adapter: one that existed before the run, or ProRL's reset); else None.
        published_copy: with ``sync_every`` > 1, the weights the rollouts serve (semi-online),
            else None.
        entropy_control: adaptive entropy control's state (``algorithm.entropy_target``,
            Skywork-OR1), or None.
    """

    policy: torch.nn.Module
    value_head: ValueHead | None
    reference: torch.nn.Module | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    algo: algorithms.Preset
    cfg: Config
    dtype: torch.dtype
    temperature: float
    generator: torch.Generator
    pad_token_id: int
    version: int = 0
    minibatches: int = 0
    compiled: torch.nn.Module | None = None
    group: DataParallel | None = None
    initial: list[torch.Tensor] | None = None
    precision: dict[str, Any] | None = None
    adapter_reference: str | None = None
    published_copy: PublishedCopy | None = None
    entropy_control: algorithms.EntropyController | None = None

    @property
    def packed(self) -> bool:
        """The training forward packs whole sequences (``train.packing``; by default for the
        data's completions, whose prompts are seldom shared)."""
        packing = self.cfg.train.packing
        return self.algo.samples == "data" if packing is None else packing

    @property
    def objective(self) -> algorithms.Objective:
        """What the update minimises (:data:`rlvr.algorithms.OBJECTIVES`)."""
        return algorithms.OBJECTIVES[self.algo.objective]

    @property
    def has_reference(self) -> bool:
        """Whether the loss or the reward has a KL term to a reference policy."""
        return self.reference is not None or self.adapter_reference is not None

    @contextlib.contextmanager
    def reference_model(self) -> Iterator[torch.nn.Module]:
        """The reference policy for the block: the frozen copy, or the policy with its adapter
        disabled (``"base"``) or switched to the frozen reference adapter."""
        if self.reference is not None:
            yield self.reference
        elif self.adapter_reference == "base":
            with adapters.disabled(self.policy):
                yield self.policy
        else:
            assert self.adapter_reference is not None, "no reference (beta = 0)"
            with adapters.active(self.policy, self.adapter_reference):
                yield self.policy

    def share(self, rows: torch.Tensor) -> torch.Tensor:
        """The part of ``rows`` this learner trains on: all of them in one process, a contiguous
        slice per rank in a data-parallel group (``group``: rlvr.distributed.DataParallel)."""
        return rows if self.group is None else self.group.share(rows)

    def sync_gradients(self, skip: _SkipStep | None) -> _SkipStep | None:
        """Sum the gradients of the group's learners (their losses are normalised by the
        minibatch's global counts, so the sum is one process's gradient); a non-finite loss on
        any rank skips the step on every rank."""
        if self.group is None:
            return skip
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        found = self.group.all_reduce_gradients(
            params, None if skip is None else (skip.quantity, skip.key, skip.value)
        )
        return None if found is None else _SkipStep(*found)

    @property
    def on_policy(self) -> bool:
        """One epoch, one minibatch: the update's log-probs before its step are the sampler's
        policy (pi_old = pi), so no separate no-grad pass is needed for the ratio."""
        return self.cfg.algorithm.ppo_epochs == 1 and self.cfg.algorithm.minibatches == 1

    @property
    def device(self) -> torch.device:
        """Where the policy (and every tensor of an update) lives."""
        return next(self.policy.parameters()).device

    def autocast(self) -> torch.autocast:
        enabled = self.dtype != torch.float32
        return torch.autocast(self.device.type, dtype=self.dtype, enabled=enabled)

    def prepare(self, data: Trajectories) -> tuple[_Step, torch.Tensor | None]:
        """The batch, the no-grad passes and the advantages of one update (steps 1-2), and the
        per-token KL to the reference when it is a reward (None otherwise)."""
        algo, cfg = self.algo, self.cfg
        device = self.device
        batch = make_batch(
            data.prompt_ids,
            data.completion_ids,
            self.pad_token_id,
            data.group_ids,
            data.action_mask,
        ).to(device)
        kl_in_reward = self.has_reference and algo.kl_in == "reward"
        need_old = (
            not self.on_policy
            or kl_in_reward
            or algo.top_entropy_rho is not None
            or self.value_head is not None
            or "token_entropy" in algorithms.ADVANTAGES[algo.advantage].requires
        )
        self.policy.eval()
        old_logp, old_entropy, old_values = None, None, None
        pairs, skipped = None, 0
        rows = torch.arange(len(data))
        if self.objective.kind == "pairs":  # only the paired samples are scored and trained
            chosen, rejected, skipped = algorithms.preference_pairs(
                data.rewards, data.group_ids, algo.pairs
            )
            pairs = torch.stack([chosen, rejected], dim=1).reshape(-1, 2)
            rows = pairs.flatten().unique()
        mine = self.share(rows)  # a group splits the no-grad passes
        autocast = self.autocast()
        if need_old:
            old_logp, old_entropy, *rest = self._sum_over_group(
                _no_grad_pass(
                    self.policy,
                    batch,
                    self.temperature,
                    cfg,
                    autocast,
                    self.value_head,
                    mine,
                    self.packed,
                )
            )
            old_values = rest[0] if rest else None
        ref_logp = None
        if self.has_reference:
            with self.reference_model() as reference:
                ref = _no_grad_pass(
                    reference, batch, self.temperature, cfg, autocast, None, mine, self.packed
                )
            ref_logp = self._sum_over_group(ref[:1])[0]
        mask = batch.action_mask
        token_kl = None
        if kl_in_reward:  # KL to the reference as a per-token reward (REINFORCE++ / PPO style)
            kl_params = algo.params.get("kl_estimator", {})
            token_kl = algorithms.kl_penalty(algo.kl_estimator, old_logp, ref_logp, **kl_params)
            token_kl = token_kl * mask
        sampler_logp = _padded(data.sampler_logprobs, mask.shape).to(device)  # the behaviour
        teacher_logp = None
        if data.teacher_logprobs is not None:  # on-policy distillation
            teacher_logp = _padded(data.teacher_logprobs, mask.shape).to(device)
        rewards = data.rewards.to(device)
        terms, term_weights = _reward_terms(data, device)
        inputs = algorithms.AdvantageInputs(
            rewards=rewards,
            group_ids=data.group_ids.to(device),
            mask=mask,
            token_kl=token_kl,
            values=old_values,
            **{k: v.to(device) for k, v in data.signals.items() if k in algorithms.INPUT_FIELDS},
            signals={
                k: v.to(device) for k, v in data.signals.items() if k not in algorithms.INPUT_FIELDS
            },
            student_logp=sampler_logp,
            teacher_logp=teacher_logp,
            token_entropy=old_entropy,
            reward_terms=terms,
            term_weights=term_weights,
        )
        estimated = algorithms.preset_advantages(algo, inputs)
        advantages = estimated.advantages
        if data.turn_rewards is not None and cfg.algorithm.credit != "broadcast":
            advantages = turn_credit(algo, cfg.algorithm, data, mask)
        train_mask = mask.float()
        if algo.top_entropy_rho is not None:  # "Beyond the 80/20 rule": high-entropy tokens
            train_mask = algorithms.top_entropy_mask(old_entropy, mask, algo.top_entropy_rho)
            train_mask = train_mask.float()
        if self.objective.kind == "imitation":  # the token mean is over the kept samples only
            kept = advantages > 0 if advantages.dim() == 1 else (advantages > 0).any(-1)
            train_mask = train_mask * kept[:, None]
        demonstrations = None
        if algo.sft_coef > 0:
            if data.demonstration_ids is None or data.demonstration_mask is None:
                raise ValueError("sft_coef > 0 needs each problem's demonstration in the batch")
            demonstrations = make_batch(
                data.prompt_ids,
                data.demonstration_ids,
                self.pad_token_id,
                action_masks=data.demonstration_mask,
            ).to(device)
        step = _Step(
            batch,
            advantages,
            estimated.returns,
            train_mask,
            old_logp,
            old_values,
            ref_logp,
            sampler_logp,
            rewards,
            pairs,
            skipped,
            demonstrations,
        )
        return step, token_kl

    def _sum_over_group(self, tensors: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """Each rank's rows of a no-grad pass (zeros elsewhere) summed: every row, everywhere."""
        if self.group is not None:
            self.group.all_reduce_sum(list(tensors))
        return tensors

    def update(
        self, data: Trajectories, meanwhile: Callable[[], None] = lambda: None
    ) -> tuple[dict[str, float], str | None]:
        """One step's update (:func:`update_policy`): metrics and None, or the non-finite
        quantity that stopped it. The version advances when an update completed.
        ``meanwhile`` runs first: in this process sampling cannot overlap the update."""
        meanwhile()
        control = self.entropy_control
        bonus = None if control is None else control.bonus
        metrics, bad = update_policy(self, data)
        if bad is None:
            self.version += 1
        if control is not None and bad is None and "policy/entropy" in metrics:
            metrics["policy/entropy_coef"] = bonus  # the bonus weight this step trained with
            control.update(metrics["policy/entropy"])
        if self.initial is not None:
            metrics["policy/params_changed_frac"] = update_sparsity(self.policy, self.initial)
        return metrics, bad

    def track_changes(self) -> None:
        """Keep the current weights as the initial ones (``policy/params_changed_frac``)."""
        self.initial = snapshot_params(self.policy)

    def reset_reference_if_due(self, step: int) -> None:
        """ProRL: copy the policy into the reference every ``reference_reset_every`` steps (a
        LoRA policy: its adapter into the frozen reference adapter); with ``reference_mix`` < 1,
        TR-DPO's soft update instead (full weights)."""
        if not self.has_reference or not algorithms.should_reset_reference(
            step, self.algo.reference_reset_every
        ):
            return
        alpha = self.algo.reference_mix
        if self.reference is not None and alpha < 1:  # TR-DPO: the reference trails the policy
            reference = list(self.reference.parameters())
            algorithms.soft_update(reference, list(self.policy.parameters()), alpha)
        elif self.reference is not None:
            self.reference.load_state_dict(self.policy.state_dict())
        else:
            assert self.adapter_reference == adapters.REFERENCE  # reference_mix 1 (config.py)
            adapters.copy_adapter(self.policy, adapters.TRAINED, adapters.REFERENCE)

    def modules(self) -> dict[str, torch.nn.Module]:
        """The modules a checkpoint stores beside the policy: the value head, and the reference
        when ProRL resets it (else it is the initial model, rebuilt on resume)."""
        out: dict[str, torch.nn.Module] = {}
        if self.value_head is not None:
            out["value_head"] = self.value_head
        if self.reference is not None and self.algo.reference_reset_every:
            out["reference"] = self.reference
        if self.adapter_reference == adapters.REFERENCE and self.algo.reference_reset_every:
            out["reference"] = adapters.AdapterView(self.policy, adapters.REFERENCE)
        if self.published_copy is not None:
            out["published"] = self.published_copy
        if self.entropy_control is not None:
            out["entropy_control"] = self.entropy_control
        return out

    def mark_published(self) -> None:
        """The current weights are being published (semi-online: keep them as the snapshot)."""
        if self.published_copy is not None:
            self.published_copy.refresh(self.policy, self.version)

    @contextlib.contextmanager
    def published(self) -> Iterator[int]:
        """For the block, the policy holds the weights last published (the semi-online
        snapshot; the current ones otherwise); yields their version."""
        copy = self.published_copy
        if copy is None:
            yield self.version
            return
        copy.swap(self.policy)
        try:
            yield int(copy.version)
        finally:
            copy.swap(self.policy)

    @property
    def lr(self) -> float:
        """The learning rate of the next optimizer step."""
        return self.scheduler.get_last_lr()[0]

    def apply_optimizer_config(self, cfg: Config) -> None:
        """Follow ``cfg``'s optimizer settings from now on (:func:`apply_optimizer_config`)."""
        apply_optimizer_config(self.optimizer, self.scheduler, cfg)

    def weights(self) -> torch.nn.Module:
        """What the rollouts are given to serve the current policy (the module itself)."""
        return self.policy

    def score(
        self, prompt: list[int], completions: list[list[int]]
    ) -> tuple[list[list[float]], torch.dtype]:
        """log pi(completion token) [T_i] of each completion of ``prompt`` under the current
        policy (no gradient, the training forward's dtype), and that dtype."""
        batch = make_batch([prompt], completions, self.pad_token_id, [0] * len(completions))
        self.policy.eval()
        with torch.no_grad(), self.autocast():
            logp, _ = completion_logprobs(self.policy, batch.to(self.device), self.temperature)
        return [logp[i, : len(c)].tolist() for i, c in enumerate(completions)], self.dtype

    def save_checkpoint(
        self,
        run_dir: Path,
        state: TrainerState,
        tokenizer: PreTrainedTokenizerBase,
        keep: int,
        pending: list[Sampled],
    ) -> None:
        """Write the checkpoint of ``state.step``: weights, optimizer, schedule, the shuffling
        stream, the modules of :meth:`modules` and the batches sampled ahead (``pending``)."""
        state.policy_version = self.version
        state.minibatches = self.minibatches
        save_checkpoint(
            run_dir,
            state,
            self.policy,
            tokenizer,
            self.optimizer,
            self.scheduler,
            self.generator,
            keep=keep,
            extra=self.modules(),
            pending=pending,
        )

    def load_checkpoint(
        self, run_dir: Path, warn: Callable[[str], None]
    ) -> tuple[Path, TrainerState, list[Sampled]] | None:
        """Load the latest good checkpoint of ``run_dir`` (:func:`load_latest_good`); returns it,
        its trainer state and its batches sampled ahead, or None when the run has none."""
        loaded = load_latest_good(
            run_dir,
            self.policy,
            self.optimizer,
            self.scheduler,
            self.generator,
            self.modules(),
            warn=warn,
        )
        if loaded is None:
            return None
        path, state = loaded
        self.version = state.step if state.policy_version is None else state.policy_version
        # older checkpoints: the optimizer steps, which named the stream then
        old = state.minibatches is None
        self.minibatches = self.scheduler.last_epoch if old else state.minibatches
        return path, state, load_pending(path)

    def state_dict(self) -> dict[str, Any]:
        """Everything an update depends on, in memory: weights, optimizer, schedule, version,
        minibatch count (checkpoints store the same pieces as files: :mod:`rlvr.checkpoint`)."""
        return {
            "policy": self.policy.state_dict(),
            "modules": {k: m.state_dict() for k, m in self.modules().items()},
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "version": self.version,
            "minibatches": self.minibatches,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        for name, module in self.modules().items():
            module.load_state_dict(state["modules"][name])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.version = state["version"]
        self.minibatches = state["minibatches"]
