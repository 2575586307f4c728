"""The learner: a :class:`~rlvr.trainer.batch.Samples` batch -> ``ppo_epochs`` x
``minibatches`` optimizer steps over micro-batches (docs/design.md, "One training step", step 4).

:class:`Learner` owns the policy's trained weights, the value head (PPO), the reference
(:class:`~rlvr.trainer.learner.reference.Reference`), the optimizer and the schedule, and the
loop every objective shares (:meth:`Learner.optimize`); what is minimised is the objective's
kind (:mod:`rlvr.trainer.learner.kinds`: policy gradient, imitation, pairs, or a user's), whose
preparation and loss the loop calls. A non-finite advantage, loss or gradient norm stops the
update where it is found (no further optimizer step) and is reported to the loop, which counts
the skipped step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from rlvr import algorithms
from rlvr.config import Config
from rlvr.distributed.data_parallel import DataParallel
from rlvr.grading import changed_elements, snapshot_params
from rlvr.policy import Batch, ValueHead, completion_logprobs, make_batch
from rlvr.trainer.batch import Samples
from rlvr.trainer.learner import groups, imitation, pairs, policy_gradient  # noqa: F401  (kinds)
from rlvr.trainer.learner.forward import Forward
from rlvr.trainer.learner.kinds import (
    OBJECTIVE_KINDS,
    Averages,
    ObjectiveKind,
    Prepared,
    SkipStep,
)
from rlvr.trainer.learner.published import PublishedCopy
from rlvr.trainer.learner.reference import Reference
from rlvr.trainer.learner.schedule import apply_optimizer_config, optimizer_step
from rlvr.trainer.learner.state import Checkpointed


@dataclass
class NoGradPasses:
    """An update's no-grad passes over its batch, each [N, T] (None when not computed).

    Attributes:
        old_logp, entropy: pi_old's log-probs and entropies (off-policy updates, or where an
            estimator or the KL-as-reward reads them).
        values: the value head's (PPO's GAE), or None.
        ref_logp: pi_ref's log-probs (a reference), or None.
        teacher_logp: the teacher's log-probs of the sampled tokens (on-policy distillation).
    """

    old_logp: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    values: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None
    teacher_logp: torch.Tensor | None = None


@dataclass
class Learner(Checkpointed):
    """Trains the policy on :class:`Samples` (see the module docstring).

    Attributes:
        policy: the trained model (fp32 weights); what the collector is given after an update.
        value_head: PPO's critic (``advantage: gae``) or None.
        reference: pi_ref (``beta > 0`` or an objective that reads it), or None.
        optimizer, scheduler: AdamW over the policy (and value head), and its LR schedule.
        algo: the resolved algorithm; ``cfg``: the run's config.
        forward: the settings of every log-prob call (temperature, autocast, packing, ...).
        generator: the random stream of minibatch shuffling.
        pad_token_id: pads the batch.
        teacher: on-policy distillation's teacher (``model.teacher``, frozen, sharded like the
            policy), whose log-probs of the samples the no-grad passes compute; or None.
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
        published_copy: with ``sync_every`` > 1, the weights the rollouts serve (semi-online),
            else None.
        entropy_control: adaptive entropy control's state (``algorithm.entropy.target``,
            Skywork-OR1), or None.
    """

    policy: torch.nn.Module
    value_head: ValueHead | None
    reference: Reference | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    algo: algorithms.Algorithm
    cfg: Config
    forward: Forward
    generator: torch.Generator
    pad_token_id: int
    teacher: torch.nn.Module | None = None
    version: int = 0
    minibatches: int = 0
    compiled: torch.nn.Module | None = None
    group: DataParallel | None = None
    initial: list[torch.Tensor] | None = None
    precision: dict[str, Any] | None = None
    published_copy: PublishedCopy | None = None
    entropy_control: algorithms.EntropyController | None = None
    pending_skip: SkipStep | None = None

    @property
    def kind(self) -> ObjectiveKind:
        """The strategy of the objective's kind (:data:`~rlvr.trainer.learner.kinds.OBJECTIVE_KINDS`)."""
        return OBJECTIVE_KINDS.get_or_raise(algorithms.OBJECTIVES[self.algo.objective.name].kind)

    @property
    def on_policy(self) -> bool:
        """One epoch, one minibatch: the update's log-probs before its step are the sampler's
        policy (pi_old = pi), so no separate no-grad pass is needed for the ratio."""
        return self.algo.ppo_epochs == 1 and self.algo.minibatches == 1

    @property
    def sampled(self) -> bool:
        """The samples come from the policy (not the data): a sampler's log-probs exist."""
        return self.algo.objective.samples == "policy"

    @property
    def device(self) -> torch.device:
        """Where the policy computes (and every tensor of an update lives)."""
        if self.sharded:  # its shards may live in CPU memory (train.shard_offload)
            from rlvr.distributed.sharding import compute_device

            return compute_device(self.policy)
        return next(self.policy.parameters()).device

    @property
    def trained_model(self) -> torch.nn.Module:
        """The module of the training forward (the compiled policy, when compiled)."""
        return self.compiled or self.policy

    def share(self, rows: torch.Tensor) -> torch.Tensor:
        """The part of ``rows`` this learner trains on: all of them in one process, a contiguous
        slice per rank in a data-parallel group (``group``: rlvr.distributed.DataParallel)."""
        return rows if self.group is None else self.group.share(rows)

    @property
    def sharded(self) -> bool:
        """The policy is sharded over the learners' group (:mod:`rlvr.distributed.sharding`)."""
        return self.group is not None and self.group.sharded

    def micro_batches(self, rows: torch.Tensor, size: int) -> list[tuple[torch.Tensor, bool]]:
        """``rows`` (this learner's) ``size`` at a time, each ``(rows, True)``. A sharded
        learner runs as many micro-batches as the learner with the most (every forward and
        backward gathers the layers from every rank): the extra ones are ``(row 0, False)``,
        run with a zero loss and no metrics."""
        chunks = [(chunk, True) for chunk in rows.split(size)] if len(rows) else []
        if not self.sharded:
            return chunks
        assert self.group is not None
        pad = rows.new_zeros((1, *rows.shape[1:]))  # row 0 (or pair 0-0)
        return chunks + [(pad, False)] * (self.group.most(len(chunks)) - len(chunks))

    def backward(
        self,
        rows: torch.Tensor,
        size: int,
        loss_of: Callable[[torch.Tensor, Averages], torch.Tensor],
        averages: Averages,
    ) -> None:
        """``loss_of(micro_batch, averages).backward()`` over :meth:`micro_batches` of ``rows``
        (a padding one's loss times 0, its metrics dropped)."""
        for chunk, kept in self.micro_batches(rows, size):
            loss = loss_of(chunk, averages if kept else Averages())
            (loss if kept else loss * 0.0).backward()

    def finite(self, value: torch.Tensor, quantity: str, key: str) -> None:
        """SkipStep unless ``value`` is finite. A sharded learner goes on (its backward is a
        collective the other ranks wait in) and the step is skipped on every rank at the
        gradient sync."""
        if torch.isfinite(value).all():
            return
        skip = SkipStep(quantity, key, value.detach().float().flatten()[0].item())
        if not self.sharded:
            raise skip
        self.pending_skip = self.pending_skip or skip

    def _sum_over_group(self, tensors: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """Each rank's rows of a no-grad pass (zeros elsewhere) summed: every row, everywhere."""
        if self.group is not None:
            self.group.all_reduce_sum(list(tensors))
        return tensors

    def batch(self, data: Samples) -> Batch:
        """``data``'s samples as one padded batch on the learner's device."""
        return make_batch(
            data.prompt_ids,
            data.completion_ids,
            self.pad_token_id,
            data.group_ids,
            data.action_mask,
        ).to(self.device)

    def no_grad_passes(self, batch: Batch, rows: torch.Tensor, old: bool) -> NoGradPasses:
        """The no-grad passes over ``batch``'s rows ``rows`` (zeros elsewhere), the rows split
        over a data-parallel group: pi_old's log-probs, entropies and values (``old``), pi_ref's
        and the teacher's log-probs (when the learner has them)."""
        mine = self.share(rows)
        chunks = self.micro_batches(mine, self.forward.micro_batch_size)
        passes = NoGradPasses()
        if old:
            out = self.forward.no_grad(self.policy, batch, None, self.value_head, chunks)
            passes.old_logp, passes.entropy, *rest = self._sum_over_group(out)
            passes.values = rest[0] if rest else None
        if self.reference is not None:
            with self.reference.model() as reference:
                ref = self.forward.no_grad(reference, batch, None, None, chunks)
            passes.ref_logp = self._sum_over_group(ref[:1])[0]
        if self.teacher is not None:  # at the sampling temperature, as the student's
            taught = self.forward.no_grad(self.teacher, batch, None, None, chunks)
            passes.teacher_logp = self._sum_over_group(taught[:1])[0]
        return passes

    def prepare(self, data: Samples) -> Prepared:
        """The objective kind's preparation of ``data`` (no-grad passes in eval mode)."""
        self.policy.eval()
        return self.kind.prepare(self, data)

    def optimize(self, data: Samples) -> tuple[dict[str, float], str | None]:
        """The objective's preparation, then ``ppo_epochs`` passes of ``minibatches`` optimizer
        steps over its shuffled units. Returns averaged metrics and None; or ``({metric},
        quantity)`` when an input, a loss or a gradient norm is non-finite: no optimizer step
        is taken from then on (steps of earlier minibatches, all finite, stay)."""
        if len(data) == 0:  # no group passed the selector in max_draws draws: nothing to train on
            return {"policy/loss": 0.0, "policy/trained_samples_frac": 0.0}, None
        kind, settings = self.kind, self.algo
        prepared = self.prepare(data)
        bad = kind.check(prepared)
        if bad is not None:
            return bad
        averages = Averages()
        self.policy.train()
        try:
            for epoch in range(settings.ppo_epochs):
                order = torch.randperm(prepared.units, generator=self.generator)
                for shuffled in order.chunk(settings.minibatches):
                    self.optimizer.zero_grad(set_to_none=True)
                    units = shuffled.sort().values  # groups contiguous: micro-batches share prompts
                    skip = None
                    try:
                        kind.accumulate(self, prepared, units, epoch == 0, averages)
                    except SkipStep as err:
                        skip = err
                    skip = self.sync_gradients(skip)  # learners sum their gradients
                    self.minibatches += 1  # counted whether its optimizer step is taken or not
                    if skip is not None:
                        raise skip
                    optimizer_step(
                        self.optimizer, self.scheduler, self.cfg.train.grad_clip, averages
                    )
        except SkipStep as skip:  # nothing of this step reaches the optimizer any more
            self.optimizer.zero_grad(set_to_none=True)
            self.policy.eval()
            return {skip.key: skip.value}, skip.quantity
        self.policy.eval()
        if self.group is not None:
            self.group.merge_averages(averages.sums, averages.counts)
        metrics = averages.means()
        metrics.setdefault("policy/loss", 0.0)  # every advantage was zero: nothing to train on
        kind.summary(self, prepared, metrics)
        return metrics, None

    def sync_gradients(self, skip: SkipStep | None) -> SkipStep | None:
        """Sum the gradients of the group's learners (their losses are normalised by the
        minibatch's global counts, so the sum is one process's gradient); a non-finite loss on
        any rank skips the step on every rank."""
        skip, self.pending_skip = skip or self.pending_skip, None
        if self.group is None:
            return skip
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        found = self.group.all_reduce_gradients(
            params, None if skip is None else (skip.quantity, skip.key, skip.value)
        )
        return None if found is None else SkipStep(*found)

    def update(
        self, data: Samples, meanwhile: Callable[[], None] = lambda: None
    ) -> tuple[dict[str, float], str | None]:
        """One step's update (:meth:`optimize`): metrics and None, or the non-finite quantity
        that stopped it. The version advances when an update completed. ``meanwhile`` runs
        first: in this process sampling cannot overlap the update."""
        meanwhile()
        control = self.entropy_control
        bonus = None if control is None else control.bonus
        metrics, bad = self.optimize(data)
        if bad is None:
            self.version += 1
        if control is not None and bad is None and "policy/entropy" in metrics:
            metrics["policy/entropy_coef"] = bonus  # the bonus weight this step trained with
            control.update(metrics["policy/entropy"])
        if self.initial is not None:
            metrics["policy/params_changed_frac"] = self._changed_frac()
        return metrics, bad

    def _changed_frac(self) -> float:
        """The fraction of the policy's elements changed since :meth:`track_changes` (over every
        rank's shards of a sharded policy)."""
        assert self.initial is not None
        counts = torch.tensor(changed_elements(self.policy, self.initial), dtype=torch.float64)
        if self.sharded:
            assert self.group is not None
            self.group.all_reduce_sum([counts])
        return float(counts[0] / counts[1]) if counts[1] else 0.0

    def track_changes(self) -> None:
        """Keep the current weights as the initial ones (``policy/params_changed_frac``)."""
        self.initial = snapshot_params(self.policy)

    def reset_reference_if_due(self, step: int) -> None:
        """ProRL's reset (or TR-DPO's soft update) of the reference after ``step`` when due."""
        if self.reference is not None:
            self.reference.reset_if_due(step)

    def mark_published(self) -> None:
        """The current weights are being published (semi-online: keep them as the snapshot)."""
        if self.published_copy is not None:
            self.published_copy.refresh(self.policy, self.version)

    @contextmanager
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
        forward = self.forward
        with torch.no_grad(), forward.autocast(self.device):
            logp, _ = completion_logprobs(self.policy, batch.to(self.device), forward.temperature)
        return [logp[i, : len(c)].tolist() for i, c in enumerate(completions)], forward.dtype
