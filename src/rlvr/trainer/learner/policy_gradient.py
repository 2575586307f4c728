"""The policy-gradient objective kind: GRPO and its relatives, PPO, on-policy distillation.

The objective one update maximises (the loss minimised is its negative), for a batch of groups
of samples o_i with tokens t, the trained-token mask m_{i,t} (``train_mask``: action tokens, or
the top-entropy ones) and the preset's parts::

    J(theta) = - agg_{i,t}[ m_{i,t} * ( l^PG_{i,t}(theta) * w_{i,t} * M_i   (1), (2), (3)
                                        + beta * KL_t(pi_theta || pi_ref)  (4)
                                        - c_H * H_t(pi_theta) ) ]           (5)
               - c_V * agg_{i,t}[ m_{i,t} * l^V_{i,t}(phi) ]                (6)

(1) the advantages A_i or A_{i,t}: :meth:`PolicyGradient.prepare`, ``algorithms.preset_advantages``
    (the estimator, batch whitening, sign weights; KL in the reward for REINFORCE++/PPO) or,
    for multi-turn episodes, per-turn credit (``algorithm.credit``);
(2) l^PG, the clipped (or GSPO / GMPO / CISPO / REINFORCE) surrogate of the ratio
    pi_theta / pi_old and A: ``algorithms.policy_loss`` (a ``sampler_anchored`` loss, DPPO,
    takes pi_sampler for pi_old); for imitation, -A_i log pi_theta (``algorithms.nll_loss``);
(3) w, the sampler-trainer correction pi_old / pi_sampler truncated (TIS) or masked (MIS), and
    M_i, DeepSeek-V3.2's off-policy sequence mask: :mod:`~rlvr.trainer.learner.correction`;
(4) the KL to the reference in the loss (``kl_in: loss``): ``algorithms.kl_penalty``;
(5) the entropy bonus, fixed (``entropy_coef``) or adaptive (Skywork-OR1's ``entropy_target``);
(6) PPO's clipped value loss (``advantage: gae``): ``algorithms.value_loss``;
and agg, the aggregation (token-mean, seq-mean-token-mean, ...) normalised by the minibatch's
global token and sequence counts: ``algorithms.aggregate`` (one micro-batch's share each, so
the accumulated gradient is the minibatch's). :meth:`PolicyGradient.loss` writes it as one sum.

``sft_coef`` > 0 adds ``sft_coef * NLL`` of each trained group's demonstration (an SFT term
beside RL; :meth:`PolicyGradient.demonstration_loss`).

Imitation (:mod:`~rlvr.trainer.learner.imitation`: SFT, RFT) replaces the surrogate (2) and
keeps every other term.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from rlvr import algorithms
from rlvr.guards import first_nonfinite
from rlvr.policy import Batch, make_batch
from rlvr.rollout.streams import stream_key
from rlvr.trainer.batch import Samples
from rlvr.trainer.learner.advantage_inputs import (
    advantage_inputs,
    advantage_stats,
    padded,
    turn_credit,
)
from rlvr.trainer.learner.correction import off_policy_keep, sampler_weights
from rlvr.trainer.learner.kinds import (
    Averages,
    ObjectiveKind,
    Prepared,
    register_objective_kind,
)

if TYPE_CHECKING:
    from rlvr.trainer.learner.engine import Learner


@dataclass
class SampleTensors(Prepared):
    """One update's samples: the batch and per-sample tensors [N] or [N, T].

    Attributes:
        batch: the padded batch (on the learner's device).
        advantages: [N] or [N, T].
        returns: [N, T] GAE's returns (the value loss's targets), or None.
        train_mask: [N, T] float: the tokens the loss sees.
        old_logp: pi_old [N, T], or None on-policy (the detached current log-probs).
        old_values: [N, T] the value head's before the update, or None.
        ref_logp: pi_ref [N, T], or None without a reference.
        sampler_logp: [N, T] the behaviour policy's (the rollout engine's); pi_old's on the
            tokens a row was given (``given_tokens``), which nothing sampled: filled here when
            a no-grad pass gave pi_old, else in the loss (``given``).
        token_kl: [N, T] the KL to the reference as a reward (``kl_in: reward``), or None.
        trained: [N] bool (CPU): the rows the update computes; the others (zero advantage, with
            nothing else in the loss) contribute zero loss and gradient but count in the
            aggregation's normalisers.
        skippable: whether rows outside ``trained`` were skipped (their fraction is logged).
        demonstrations: [P] each group's demonstration (``sft_coef``), or None.
        expert: [N] bool, the expert traces of mixed groups (``algorithm.expert``), or None.
        proxy_logp: [N, T] pi_old's min-p proxy log-probs (a ``min_p_proxy`` policy loss:
            Lp-Reg), or None.
        given: [N, T] bool, the given tokens whose behaviour log-probs the loss takes from
            pi_old (the detached current ones, on-policy), or None.
    """

    batch: Batch
    advantages: torch.Tensor
    returns: torch.Tensor | None
    train_mask: torch.Tensor
    old_logp: torch.Tensor | None
    old_values: torch.Tensor | None
    ref_logp: torch.Tensor | None
    sampler_logp: torch.Tensor
    token_kl: torch.Tensor | None
    trained: torch.Tensor
    skippable: bool
    demonstrations: Batch | None
    expert: torch.Tensor | None = None
    proxy_logp: torch.Tensor | None = None
    given: torch.Tensor | None = None


def given_mask(data: Samples, mask: torch.Tensor) -> torch.Tensor | None:
    """[N, T] bool: the leading completion tokens each row was given rather than sampled (a
    guided sample's prefix, ``given_tokens``), or None when no row has any."""
    counts = data.given_tokens
    if not counts or not any(counts):
        return None
    positions = torch.arange(mask.shape[1], device=mask.device)
    return positions[None, :] < torch.tensor(counts, device=mask.device)[:, None]


@register_objective_kind("policy_gradient")
class PolicyGradient(ObjectiveKind):
    """J(theta) of the module docstring."""

    def prepare(self, learner: Learner, data: Samples) -> SampleTensors:
        """The batch, the no-grad passes and the advantages (1) of one update."""
        algo = learner.algo
        batch = learner.batch(data)
        kl_in_reward = learner.reference is not None and algo.kl.placement == "reward"
        given = given_mask(data, batch.action_mask)
        need_old = (
            not learner.on_policy
            or kl_in_reward
            or algo.entropy.top_rho is not None
            or learner.value_head is not None
            or "token_entropy" in algorithms.ADVANTAGES[algo.advantage.name].requires
            # an estimator that reads the sampler's log-probs needs the given tokens' now
            or (
                given is not None
                and "student_logp" in algorithms.ADVANTAGES[algo.advantage.name].requires
            )
        )
        passes = learner.no_grad_passes(batch, torch.arange(len(data)), need_old)
        mask = batch.action_mask
        token_kl = None
        if kl_in_reward:  # KL to the reference as a per-token reward (REINFORCE++ / PPO style)
            token_kl = algorithms.kl_penalty(
                algo.kl.estimator, passes.old_logp, passes.ref_logp, **algo.kl.params
            )
            token_kl = token_kl * mask
        sampler_logp = padded(data.sampler_logprobs, mask.shape).to(mask.device)  # behaviour
        if given is not None and passes.old_logp is not None:  # a given prefix: pi_old for it
            sampler_logp, given = torch.where(given, passes.old_logp, sampler_logp), None
        inputs = advantage_inputs(data, mask, sampler_logp, passes, token_kl)
        estimated = algorithms.preset_advantages(algo, inputs)
        advantages = estimated.advantages
        if data.turn_rewards is not None and algo.credit.name != "broadcast":
            advantages = turn_credit(algo, data, mask)
        train_mask = mask.float()
        if algo.entropy.top_rho is not None:  # "Beyond the 80/20 rule": high-entropy tokens
            train_mask = algorithms.top_entropy_mask(passes.entropy, mask, algo.entropy.top_rho)
            train_mask = train_mask.float()
        train_mask = self.trained_tokens(train_mask, advantages)
        skippable = (  # a zero advantage is then a zero loss and gradient
            not (learner.reference is not None and algo.kl.placement == "loss")
            and not algo.entropy.coef
            and not algo.entropy.band
            and learner.entropy_control is None
            and learner.value_head is None
        )
        nonzero = advantages != 0 if advantages.dim() == 1 else (advantages * mask != 0).any(-1)
        return SampleTensors(
            units=len(data),
            batch=batch,
            advantages=advantages,
            returns=estimated.returns,
            train_mask=train_mask,
            old_logp=passes.old_logp,
            old_values=passes.values,
            ref_logp=passes.ref_logp,
            sampler_logp=sampler_logp,
            token_kl=token_kl,
            trained=nonzero.cpu(),  # indexes the CPU row orders of the shuffle
            skippable=skippable,
            demonstrations=self.demonstrations(learner, data),
            expert=None if data.expert is None else data.expert.to(mask.device),
            proxy_logp=self.min_p_proxy(learner, batch),
            given=given,
        )

    def min_p_proxy(self, learner: Learner, batch: Batch) -> torch.Tensor | None:
        """pi_old's min-p proxy log-probs [N, T] when the policy loss reads them (Lp-Reg: at
        its ``kappa``), from the policy before this update; else None."""
        loss = learner.algo.policy_loss
        spec = algorithms.POLICY_LOSSES[loss.name]
        if not spec.min_p_proxy:
            return None
        kappa = loss.params.get("kappa", inspect.signature(spec.fn).parameters["kappa"].default)
        return learner.forward.min_p(learner.policy, batch, float(kappa))

    def trained_tokens(self, train_mask: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
        """The tokens the loss sees [N, T], given the advantages (all of ``train_mask``)."""
        return train_mask

    def demonstrations(self, learner: Learner, data: Samples) -> Batch | None:
        """Each problem's demonstration as a batch [P] when ``sft_coef`` > 0, else None."""
        if learner.algo.objective.sft_coef <= 0:
            return None
        if data.demonstration_ids is None or data.demonstration_mask is None:
            raise ValueError("sft_coef > 0 needs each problem's demonstration in the batch")
        return make_batch(
            data.prompt_ids,
            data.demonstration_ids,
            learner.pad_token_id,
            action_masks=data.demonstration_mask,
        ).to(learner.device)

    def check(self, prepared: Prepared) -> tuple[dict[str, float], str] | None:
        assert isinstance(prepared, SampleTensors)
        if first_nonfinite({"advantages": prepared.advantages}) is None:
            return None
        bad_frac = (~torch.isfinite(prepared.advantages)).float().mean().item()
        return {"advantages/nonfinite_frac": bad_frac}, "advantages"

    def accumulate(
        self,
        learner: Learner,
        prepared: Prepared,
        units: torch.Tensor,
        first_epoch: bool,
        averages: Averages,
    ) -> None:
        """The minibatch's gradient over its sample rows ``units``: the loss of this learner's
        trained rows, micro-batch by micro-batch, then with ``sft_coef`` the SFT term of their
        groups' demonstrations."""
        assert isinstance(prepared, SampleTensors)
        mb = learner.cfg.train.micro_batch_size
        totals = (float(prepared.train_mask[units].sum()), float(len(units)))
        active = units[prepared.trained[units]] if prepared.skippable else units
        active = learner.share(active)  # this learner's rows (all of them in one process)
        learner.backward(
            active,
            mb,
            lambda rows, into: self.loss(learner, prepared, rows, totals, into, first_epoch),
            averages,
        )
        if prepared.demonstrations is not None:  # sft_coef: SFT beside RL
            groups = prepared.batch.prompt_index[units].unique().cpu()
            total = float(prepared.demonstrations.action_mask[groups].sum())
            learner.backward(
                learner.share(groups),
                mb,
                lambda sub, into: self.demonstration_loss(learner, prepared, sub, total, into),
                averages,
            )

    def surrogate(
        self,
        learner: Learner,
        logp: torch.Tensor,
        old: torch.Tensor,
        sampler_logp: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        first_row: int,
        proxy_logp: torch.Tensor | None = None,
        entropy: torch.Tensor | None = None,
        ref_logp: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """(2): the per-token policy loss l^PG [n, T] of a micro-batch and its statistics
        (``proxy_logp``: pi_old's min-p proxy, for Lp-Reg; ``entropy``: the policy's token
        entropy, detached, for HAPO; ``ref_logp``: pi_ref's, for A-LoL)."""
        algo = learner.algo
        # DPPO's trust region is anchored to the sampler's policy, not pi_old (arXiv:2602.04879,
        # "The Correct Anchor for the Trust Region"): such a loss gets the sampler's log-probs
        anchored = (
            algorithms.POLICY_LOSSES[algo.policy_loss.name].sampler_anchored and learner.sampled
        )
        return algorithms.policy_loss(
            algo.policy_loss.name,
            logp,
            sampler_logp if anchored else old,
            advantages,
            mask,
            algo.policy_loss.clip_low,
            algo.policy_loss.clip_high,
            algo.policy_loss.dual_clip,
            # Clip-Cov's random pick: a new stream per minibatch and micro-batch, named by the
            # checkpointed count of minibatches (a skipped one's too: no stream is drawn twice),
            # so a resumed run draws as the uninterrupted one
            seed=stream_key(learner.cfg.train.seed, learner.minibatches, first_row),
            proxy_logp=proxy_logp,
            entropy=entropy,
            ref_logp=ref_logp,
            **algo.policy_loss.params,
        )

    def surrogate_metrics(
        self,
        info: dict[str, Any],
        logp: torch.Tensor,
        action: torch.Tensor,
        mask: torch.Tensor,
        averages: Averages,
    ) -> None:
        """The surrogate's statistics (clip fractions, ratios) as means over the action tokens
        ``action`` [n, T] (``mask``: the trained ones)."""
        for k, v in algorithms.policy_metrics(info, action).items():
            averages.add(f"policy/{k}", v)

    def loss(
        self,
        learner: Learner,
        p: SampleTensors,
        rows: torch.Tensor,
        totals: tuple[float, float],
        averages: Averages,
        describe: bool,
    ) -> torch.Tensor:
        """-J(theta) of one micro-batch (rows ``rows``, whole rows), normalised by the
        minibatch's global token and sequence counts ``totals``; its metrics go to
        ``averages`` (``describe``: also those describing the batch, in the first epoch)."""
        algo = learner.algo
        sub = p.batch.select(rows)
        width = sub.completion_ids.shape[1]
        mask, action = p.train_mask[rows, :width], sub.action_mask
        control = learner.entropy_control
        c_h = algo.entropy.coef or (control.bonus if control is not None else 0.0)
        logp, entropy, *values = learner.forward(
            learner.trained_model,
            sub,
            entropy=True,
            entropy_grad=bool(algo.entropy.coef or algo.entropy.band) or control is not None,
            value_head=learner.value_head,
        )
        old = logp.detach() if p.old_logp is None else p.old_logp[rows, :width]
        adv = p.advantages[rows]
        adv = adv[:, :width] if adv.dim() == 2 else adv
        sampler_logp = p.sampler_logp[rows, :width]
        proxy = None if p.proxy_logp is None else p.proxy_logp[rows, :width]
        if p.given is not None:  # on-policy: pi_old, the detached current log-probs, for them
            sampler_logp = torch.where(p.given[rows, :width], old, sampler_logp)
        expert = None if p.expert is None else p.expert[rows][:, None]  # [n, 1]
        if expert is not None:  # a trace has no sampler to correct: pi_old stands for it
            sampler_logp = torch.where(expert, old, sampler_logp)
        ref = None if p.ref_logp is None else p.ref_logp[rows, :width]
        surrogate, info = self.surrogate(
            learner,
            logp,
            old,
            sampler_logp,
            adv,
            action,
            int(rows[0]),
            proxy,
            entropy.detach(),
            ref,
        )
        if expert is not None:  # LUFFY: -A f(pi_theta) on the traces, unclipped
            shaped = algorithms.expert_loss(algo.expert.shaping, logp, adv, **algo.expert.params)
            surrogate = torch.where(expert, shaped, surrogate)
            on_trace = action * expert
            if bool(on_trace.any()):
                prob = algorithms.masked_mean(logp.detach().exp(), on_trace).item()
                averages.add("expert/token_prob", prob, float(on_trace.sum()))
            action = action * ~expert  # the surrogate's statistics: the policy's samples
        w: torch.Tensor | float = 1.0  # (3): the data's completions have no sampler to correct
        keep: torch.Tensor | float = 1.0
        if learner.sampled:
            w = sampler_weights(algo.correction, old, sampler_logp, action, averages, describe)
            keep = off_policy_keep(algo.correction, logp, sampler_logp, adv, action, averages)
        kl: torch.Tensor | float = 0.0
        if p.ref_logp is not None and algo.kl.placement == "loss":
            kl = algorithms.kl_penalty(
                algo.kl.estimator, logp, p.ref_logp[rows, :width], **algo.kl.params
            )
        value_loss: torch.Tensor | float = 0.0
        if learner.value_head is not None:  # PPO's critic: clipped value loss on the returns
            assert p.old_values is not None and p.returns is not None
            value_loss = algorithms.value_loss(
                values[0],
                p.old_values[rows, :width],
                p.returns[rows, :width],
                action,
                algo.value.clip,
            )

        def agg(per_token: torch.Tensor) -> torch.Tensor:
            return algorithms.aggregate(
                per_token,
                mask,
                algo.aggregation.name,
                total_tokens=totals[0],
                total_seqs=totals[1],
                max_len=learner.cfg.max_completion_tokens,
                **algo.aggregation.params,
            )

        # -J(theta) per token: (1)-(3) the corrected surrogate, (4) KL, (5) the entropy bonus
        # and SPINE's entropy band; aggregated, plus (6) the critic's loss
        entropy_term = entropy if c_h else 0.0
        loss_tok = surrogate * w * keep + algo.kl.beta * kl - c_h * entropy_term
        if algo.entropy.band:
            e = algo.entropy
            band = algorithms.entropy_band(entropy, mask, e.band_low, e.band_high)
            loss_tok = loss_tok + e.band * band
            averages.add("policy/entropy_band", algorithms.masked_mean(band.detach(), mask).item())
        critic = agg(value_loss) if isinstance(value_loss, torch.Tensor) else 0.0
        loss = agg(loss_tok) + algo.value.coef * critic

        learner.finite(loss, "loss", "policy/loss")
        if isinstance(kl, torch.Tensor):
            averages.add("policy/kl_ref", algorithms.masked_mean(kl.detach(), mask).item())
        if isinstance(critic, torch.Tensor):
            averages.add("value/loss", critic.item())
            averages.add("value/mean", algorithms.masked_mean(values[0].detach(), mask).item())
        averages.add("policy/loss", loss.item())
        averages.add("policy/entropy", algorithms.masked_mean(entropy.detach(), action).item())
        self.surrogate_metrics(info, logp, action, mask, averages)
        return loss

    def demonstration_loss(
        self,
        learner: Learner,
        p: SampleTensors,
        groups: torch.Tensor,
        total: float,
        averages: Averages,
    ) -> torch.Tensor:
        """``sft_coef`` x the NLL of the demonstrations of ``groups`` (a micro-batch of them), as
        a share of the token mean over the minibatch's groups' demonstration tokens ``total``:
        the SFT term beside the RL loss."""
        assert p.demonstrations is not None
        sub = p.demonstrations.select(groups)
        logp = learner.forward(learner.trained_model, sub)[0]
        mask = sub.action_mask.float()
        nll = -(logp * mask).sum()
        learner.finite(nll, "loss", "sft/nll")
        averages.add("sft/nll", nll.item() / max(float(mask.sum()), 1.0), float(mask.sum()))
        return learner.algo.objective.sft_coef * nll / max(total, 1.0)

    def summary(self, learner: Learner, prepared: Prepared, metrics: dict[str, float]) -> None:
        assert isinstance(prepared, SampleTensors)
        mask = prepared.batch.action_mask
        if prepared.token_kl is not None:
            metrics["policy/kl_ref"] = algorithms.masked_mean(prepared.token_kl, mask).item()
        trained = prepared.trained.float().mean() if prepared.skippable else 1.0
        metrics["policy/trained_samples_frac"] = float(trained)
        metrics.update(advantage_stats(prepared.advantages, mask))
