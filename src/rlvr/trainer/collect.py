"""Collect: prompts from the sampler -> a group of episodes each, played and scored by the
rollouts -> one :class:`~rlvr.trainer.batch.Samples` table (docs/design.md, "One training
step", steps 1-3).

A :class:`Collector` draws the prompts, names each sample's random stream (seed, step, draw,
prompt, sample: :mod:`rlvr.rollout.streams`), hands the groups to its
:class:`~rlvr.trainer.protocols.Rollouts` (in this process, or on Ray rollout workers; a
sampler's group sizes, Knapsack RL), and turns the played table into the step's batch: the
rewards (DAPO's overlong penalty), the sampler's update, the run's draw stages
(:mod:`rlvr.trainer.stages`: GHPO's hints, GFPO's filter, RePO's replay), the step's group
accumulator (DAPO's dynamic sampling, a group selector, refilling the batch), and the signals
the estimator needs, produced on demand (:mod:`rlvr.trainer.signals`: SPO's baselines, ReMax's
greedy rewards, AAPO's reference rewards). It never touches the optimizer: the learner trains
on what it returns and publishes new weights back (:meth:`Collector.publish`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from rlvr import algorithms
from rlvr.config import Config
from rlvr.curriculum.base import PromptSampler
from rlvr.data import Problem
from rlvr.envs.agent import episode_metrics
from rlvr.rollout import SamplingParams
from rlvr.rollout.sampling import entropy_statistics
from rlvr.rollout.streams import group_keys, stream_key
from rlvr.trainer import signals
from rlvr.trainer.batch import SIGNAL, Samples
from rlvr.trainer.metrics import generated_tokens, warn
from rlvr.trainer.protocols import Rollouts, Weights
from rlvr.trainer.rollouts import merge_shards
from rlvr.trainer.signals import Draw
from rlvr.trainer.stages import DrawState, Stage, oversample, stages_for
from rlvr.trainer.stages.replay import Replay, ReplayBuffer

#: Reward metrics summed over a step's draws (a judge's usage), not averaged.
SUMMED = ("judge/", "time/")


@dataclass
class Collector:
    """Samples and scores one step's batch (see the module docstring).

    Attributes:
        rollouts: where groups are played and scored (:class:`Rollouts`).
        sampler: the prompt sampler (the task's stream, or a curriculum).
        algo: the resolved preset (group size filters, dynamic sampling, ReMax, DAPO).
        cfg: the run's config (``rollout`` section, ``train.seed``).
        sampling: sampling parameters; ``greedy``: the same at temperature 0 (ReMax, eval).
        phase: told "sampling" as the step moves (the progress display).
        warn: shows a one-line warning (environment faults of a draw).
        version: the policy version the rollouts serve (see :meth:`publish`).
        replay: RePO's buffer (the replay stage's; checkpointed by the loop), or None.
        tokenizer: the policy's tokenizer (a stage that writes text in tokens: G2RPO-A's
            guidance), or None.
        stages: the run's draw stages, in order (:func:`rlvr.trainer.stages.stages_for`).
        stage_states: the state of each stage whose settings make one (``new_state()``), by
            the stage's name: what it carries from step to step (checkpointed by the loop:
            ``state_dict`` / ``load_state_dict``; ``metrics`` logged each step).
        counts: what the stages counted this step (their ``counts`` metrics), reset by
            :meth:`collect`.
    """

    rollouts: Rollouts
    sampler: PromptSampler
    algo: algorithms.Algorithm
    cfg: Config
    sampling: SamplingParams
    greedy: SamplingParams
    phase: Callable[[str], None] = lambda name: None
    warn: Callable[[str], None] = warn
    version: int = 0
    _reward_metrics: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    _reward_seconds: float = 0.0
    _generated: float = 0.0  # tokens sampled this step, kept or not (tokens/generated)
    _episode_counts: dict[str, float] = dataclasses.field(default_factory=dict)
    replay: ReplayBuffer | None = None
    tokenizer: Any = None
    stages: list[tuple[Stage, Any]] = dataclasses.field(default_factory=list)
    stage_states: dict[str, Any] = dataclasses.field(default_factory=dict)
    counts: dict[str, float] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.stages = stages_for(self.algo)
        for _, settings in self.stages:
            if isinstance(settings, Replay):  # what replay needs: Config._check_replay
                self.replay = ReplayBuffer(settings.replayed, settings.buffer, settings.threshold)
        self.stage_states = {
            stage.name: settings.new_state()
            for stage, settings in self.stages
            if callable(getattr(settings, "new_state", None))
        }
        self.counts = {key: 0.0 for stage, _ in self.stages for key in stage.counts}

    def publish(self, weights: Weights, version: int) -> dict[str, float]:
        """Serve ``weights`` (the learners') from now on, as policy ``version``; the
        publication's statistics."""
        stats = self.rollouts.publish(weights, version)
        self.version = version
        return stats

    def rewards(self, played: Samples, record: bool = True) -> torch.Tensor:
        """Rewards [N] of scored completions, with DAPO's overlong penalty when the preset has
        one; ``record``: count them in the step's reward metrics (not ReMax's greedy
        baseline completions)."""
        breakdown = played.breakdown
        rewards = torch.tensor(breakdown.total, dtype=torch.float)
        for key, value in breakdown.metrics().items() if record else ():
            self._reward_metrics.setdefault(key, []).append(value)
        frac = self.algo.overlong.buffer_frac
        if frac is not None:
            given = played.given_tokens or [0] * len(played)  # a given prefix was not sampled
            lengths = torch.tensor(
                [len(c) - g for c, g in zip(played.completion_ids, given, strict=True)]
            )
            budget = self.cfg.max_completion_tokens
            cache_len = max(1, round(frac * budget))
            rewards = rewards + algorithms.overlong_penalty(lengths, budget, cache_len)
        self._reward_seconds += played.info["reward_seconds"]
        return rewards

    def play(self, problems: list[Problem], n: int, keys: torch.Tensor | None) -> Samples:
        """``n`` episodes of each problem played and scored by the rollouts (episode i from the
        stream ``keys[i]``); their episode counts added to the step's."""
        played = self.rollouts.run(problems, n, self.sampling, keys)
        self._generated += generated_tokens(played)
        for key, value in (played.info.get("episode_counts") or {}).items():
            self._episode_counts[key] = self._episode_counts.get(key, 0.0) + value
        return played

    def _draw(self, step: int, draw: int, n: int, draws: algorithms.GroupAccumulator) -> Samples:
        """Draw ``draw`` of step ``step``: P prompts, n samples each (sample j of prompt i from
        the stream (seed, step, draw, i, j)), played and scored, with their rewards; the run's
        stages (:mod:`rlvr.trainer.stages`) and the step's group accumulator decide the rows
        kept, which get the signals the estimator needs as columns."""
        self.phase("sampling")
        problems = self.sampler.draw(self.cfg.rollout.prompts_per_step)  # resumable: checkpointed
        base = stream_key(self.cfg.train.seed, step, draw)
        sizes, played = self._play_sized(problems, n, base)
        n = sizes[0] if len(set(sizes)) == 1 else n
        self._warn_faults(step, played)
        table = played.with_columns(rewards=self.rewards(played))
        wanted = signals.needed(self.algo.advantage.name)  # inputs the estimator needs produced

        def moment(t: Samples) -> Draw:
            return Draw(self, t.problems, sizes, n, t.group_ids, base)

        produced = signals.produce(wanted, moment(table), before_update=True)
        own = table.sampled()  # the sampler hears how the policy did, not the expert traces
        self.sampler.update(own.problems, own.rewards, own.group_ids)  # before any filter
        state = DrawState(self, table, torch.arange(len(table)), n, base, step=step)
        for stage, settings in self.stages:
            if not stage.after_select:
                stage.apply(state, settings)
        table, keep = state.table, state.keep
        keep = keep[draws.add(table.rewards[keep], table.group_ids[keep])]  # the step's groups
        produced |= signals.produce(wanted, moment(table), before_update=False)  # final groups
        state.table = table.with_columns(**{SIGNAL + k: v for k, v in produced.items()})
        info = {"tokens_per_s": table.tokens_per_s, "policy_version": self.version}
        state.batch = dataclasses.replace(state.table.select(keep), info=info)
        for stage, settings in self.stages:
            if stage.after_select:
                stage.apply(state, settings)
        return state.batch

    def _warn_faults(self, step: int, played: Samples) -> None:
        """One line about a draw's episodes that ended in an environment fault."""
        faults = [f for f in played.faults or () if f is not None]
        if faults:
            self.warn(
                f"step {step}: {len(faults)} of {len(played)} episodes ended in an "
                f"environment fault (reward 0 for that turn, env.on_error: end_episode); the "
                f"first: {faults[0]}"
            )

    def _play_sized(self, problems: list[Problem], n: int, base: int) -> tuple[list[int], Samples]:
        """The draw's groups: n samples of each problem, or as many as the prompt sampler's
        ``group_sizes`` gives it (Knapsack RL's budgets); the sizes and the played table (its
        problems in the order they were played)."""
        allocate = getattr(self.sampler, "group_sizes", None)
        for _, settings in self.stages:  # a stage that plays the draw itself (HBPO's budgets)
            play_draw = getattr(settings, "play_draw", None)
            if callable(play_draw):
                if callable(allocate):
                    raise ValueError(
                        "a stage that plays the draw itself (budgets, early_exit, prefix_rl) gives "
                        "every problem group_size samples: not with a curriculum's group sizes "
                        "(knapsack)"
                    )
                return [n] * len(problems), play_draw(self, problems, n, base)
        sizes = allocate(problems, n) if callable(allocate) else [n] * len(problems)
        if len(set(sizes)) == 1:
            return sizes, self.play(problems, sizes[0], group_keys(base, len(problems), sizes[0]))
        return self._run_sized(problems, sizes, base)

    def _run_sized(
        self, problems: list[Problem], sizes: list[int], base: int
    ) -> tuple[list[int], Samples]:
        """Groups of different sizes (a sampler's ``group_sizes``): the problems of each size
        played together, smallest size first; returns the sizes in that order and the merged
        table (its problems in that order). Sample j of the i-th problem (in that order) is the
        stream (base, i, j), as in a uniform draw."""
        if oversample(self.algo) > 1 or self.algo.objective.samples != "policy":
            raise ValueError(
                "group sizes by prompt (curriculum group_sizes) apply to the policy's own "
                "groups without a group_filter"
            )
        order = sorted(range(len(problems)), key=lambda i: (sizes[i], i))
        problems, sizes = [problems[i] for i in order], [sizes[i] for i in order]
        parts, first = [], 0
        for size in sorted(set(sizes)):
            count = sizes.count(size)
            keys = group_keys(base, count, size, first_prompt=first)
            parts.append(self.play(problems[first : first + count], size, keys))
            first += count
        return sizes, merge_shards(parts)

    def collect(self, step: int) -> tuple[Samples, dict[str, float]]:
        """The batch of step ``step`` (1-based): draw prompts, sample, score, tell the sampler;
        refill until the batch is full (dynamic sampling). Returns the batch and the step's
        sampling and reward metrics."""
        algo, G, P = self.algo, self.cfg.rollout.group_size, self.cfg.rollout.prompts_per_step
        n = G * oversample(algo)
        select = None
        if algo.select.active:  # DAPO's informative groups, or another group selector
            select = partial(algorithms.GROUP_SELECTORS[algo.select.name], **algo.select.params)
        draws = algorithms.GroupAccumulator(
            P,
            algo.select.max_draws if select is not None else 1,
            only_informative=False,
            select=select,
        )
        parts = []
        while not draws.done:
            parts.append(self._draw(step, len(parts), n, draws))
        if draws.groups_kept == 0:
            self.warn(
                f"step {step}: no group passed the group selector {algo.select.name!r} in "
                f"{draws.draws} draw(s): the step trains on nothing (raise algorithm.select.max_draws "
                "or widen the selector's band)"
            )
        metrics = {f"sampling/{k}": v for k, v in draws.metrics().items()}
        # per draw: error counts and judge usage add up, means are averaged over the draws
        metrics.update(
            {
                k: sum(v) / (1 if k.endswith("errors") or k.startswith(SUMMED) else len(v))
                for k, v in self._reward_metrics.items()
            }
        )
        metrics.update(self.sampler.metrics())
        for key, value in self.counts.items():  # what the run's stages did
            metrics[key] = value
            self.counts[key] = 0.0
        if self.replay is not None:
            metrics.update(self.replay.metrics())
        for stage_state in self.stage_states.values():
            metrics.update(stage_state.metrics())
        if self._episode_counts:
            metrics.update(episode_metrics(self._episode_counts))
            self._episode_counts.clear()
        metrics.update(self.rollouts.worker_stats())
        metrics["time/reward"] = self._reward_seconds
        metrics["tokens/generated"] = self._generated
        self._reward_metrics.clear()
        self._reward_seconds, self._generated = 0.0, 0.0
        batch = Samples.concat(
            parts,
            tokens_per_s=sum(p.tokens_per_s for p in parts) / len(parts),
            policy_version=min(p.policy_version for p in parts),
        )
        metrics.update(self.adapt_temperature(batch))
        return batch, metrics

    def adapt_temperature(self, batch: Samples) -> dict[str, float]:
        """HAPO's adaptive temperatures (``rollout.temperature_tau`` > 0): the metrics of the
        statistics this step sampled with, then the next step's from ``batch``'s completion
        tokens' entropies (:func:`rlvr.rollout.sampling.entropy_statistics`)."""
        tau = self.cfg.rollout.temperature_tau
        if not tau:
            return {}
        used = self.sampling.adaptive  # None at the first step: the plain temperature
        metrics = {
            "sampling/temperature_pivot": used.pivot if used else 0.0,
            "sampling/temperature_top": used.top if used else 0.0,
            "sampling/temperature_bottom": used.bottom if used else 0.0,
        }
        stats = entropy_statistics(
            batch.token_entropies or [], tau, self.cfg.rollout.temperature_pivot
        )
        if stats is not None:
            self.sampling = dataclasses.replace(self.sampling, adaptive=stats)
        return metrics

    def evaluate(self, problems: list[Problem]) -> dict[str, float]:
        """Held-out accuracy of the served policy: greedy, and sampled with the run's sampling
        settings when ``eval.sampled`` (``eval/greedy_*``, ``eval/sampled_*``)."""
        seed = 1234  # the evaluation's own streams: every evaluation samples alike
        greedy = self.rollouts.evaluate(problems, self.greedy, seed)
        out = {f"eval/greedy_{k}": v for k, v in greedy.items()}
        if self.cfg.eval.sampled:
            sampled = dataclasses.replace(
                self.greedy,
                temperature=self.sampling.temperature,
                top_p=self.sampling.top_p,
                top_k=self.sampling.top_k,
                min_p=self.sampling.min_p,
            )
            acc = self.rollouts.evaluate(problems, sampled, seed)
            kept = ("accuracy", "reward_mean", "reward/")  # and a rubric's criteria
            out.update({f"eval/sampled_{k}": v for k, v in acc.items() if k.startswith(kept)})
        return out
