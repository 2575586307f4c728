"""Collect: prompts from the sampler -> a group of episodes each, played and scored by the
rollouts -> one :class:`~rlvr.trainer.batch.Samples` table (docs/design.md, "One training
step", steps 1-3).

A :class:`Collector` draws the prompts, names each sample's random stream (seed, step, draw,
prompt, sample: :mod:`rlvr.rollout.streams`), hands the groups to its
:class:`~rlvr.trainer.protocols.Rollouts` (in this process, or on Ray rollout workers), and
turns the scored groups into the step's batch: a sampler's group sizes (Knapsack RL), DAPO's
overlong penalty, the sampler's update, GHPO's hints for the groups that failed, GFPO's sample
filter, the group selector (DAPO's dynamic sampling refills the batch), RePO's replayed
samples; the signals the estimator needs are produced on demand (:mod:`rlvr.trainer.signals`:
SPO's baselines, ReMax's greedy rewards, AAPO's reference rewards). It never
touches the optimizer: the learner trains on what it returns and publishes new weights back
(:meth:`Collector.publish`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from rlvr import algorithms
from rlvr.config import Config
from rlvr.curriculum.base import PromptSampler
from rlvr.data import Problem, hints
from rlvr.envs.agent import episode_metrics
from rlvr.rewards.combined import RewardBreakdown
from rlvr.rollout import SamplingParams
from rlvr.rollout.streams import group_keys, stream_key
from rlvr.trainer import signals
from rlvr.trainer.batch import SIGNAL, Samples
from rlvr.trainer.metrics import warn
from rlvr.trainer.protocols import Rollouts, Weights
from rlvr.trainer.replay import ReplayBuffer
from rlvr.trainer.rollouts import merge_shards
from rlvr.trainer.signals import Draw

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
    """

    rollouts: Rollouts
    sampler: PromptSampler
    algo: algorithms.Preset
    cfg: Config
    sampling: SamplingParams
    greedy: SamplingParams
    phase: Callable[[str], None] = lambda name: None
    warn: Callable[[str], None] = warn
    version: int = 0
    _reward_metrics: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    _reward_seconds: float = 0.0
    _episode_counts: dict[str, float] = dataclasses.field(default_factory=dict)
    _hinted: int = 0
    _replayed: int = 0
    replay: ReplayBuffer | None = None

    def __post_init__(self) -> None:
        rollout = self.cfg.rollout
        if rollout.replay:  # what replay needs is checked with the config (Config._check_replay)
            self.replay = ReplayBuffer(
                rollout.replay, rollout.replay_buffer, rollout.replay_threshold
            )

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
        if self.algo.overlong_buffer_frac is not None:
            lengths = torch.tensor([len(c) for c in played.completion_ids])
            budget = self.cfg.max_completion_tokens
            cache_len = max(1, round(self.algo.overlong_buffer_frac * budget))
            rewards = rewards + algorithms.overlong_penalty(lengths, budget, cache_len)
        self._reward_seconds += played.info["reward_seconds"]
        return rewards

    def _draw(self, step: int, draw: int, n: int, draws: algorithms.GroupAccumulator) -> Samples:
        """Draw ``draw`` of step ``step``: P prompts, n samples each (sample j of prompt i from
        the stream (seed, step, draw, i, j)), played and scored, with their rewards and the
        signals the estimator needs as columns; the samples the filters keep."""
        algo, P, G = self.algo, self.cfg.rollout.prompts_per_step, self.cfg.rollout.group_size
        self.phase("sampling")
        problems = self.sampler.draw(P)  # its checkpointed state makes every draw resumable
        base = stream_key(self.cfg.train.seed, step, draw)
        allocate = getattr(self.sampler, "group_sizes", None)  # Knapsack RL's budgets
        sizes = allocate(problems, n) if callable(allocate) else [n] * len(problems)
        if len(set(sizes)) == 1:
            n = sizes[0]
            played = self.rollouts.run(
                problems, n, self.sampling, group_keys(base, len(problems), n)
            )
        else:
            sizes, played = self._run_sized(problems, sizes, base)
        problems, ids = played.problems, played.group_ids
        self._count_episodes(played)
        faults = [f for f in played.faults or () if f is not None]
        if faults:
            self.warn(
                f"step {step}: {len(faults)} of {len(played)} episodes ended in an "
                f"environment fault (reward 0 for that turn, env.on_error: end_episode); the "
                f"first: {faults[0]}"
            )
        rewards = self.rewards(played)
        wanted = signals.needed(algo.advantage)  # inputs the estimator needs produced
        produced = signals.produce(wanted, Draw(self, problems, sizes, n, ids, base), True)
        self.sampler.update(problems, rewards, ids)  # every group, before any filtering
        if self.cfg.rollout.hints:  # GHPO: failed groups again, with a solution's prefix
            played, rewards = self._hint(played, rewards, n, base)
        keep = torch.arange(len(played))
        if algo.group_filter:  # GFPO: keep G of the n samples of each group
            lengths = torch.tensor([len(c) for c in played.completion_ids])
            keep = algorithms.group_filter(
                rewards, ids, lengths, G, algo.group_filter, **algo.params.get("group_filter", {})
            )
        keep = keep[draws.add(rewards[keep], ids[keep])]
        final = Draw(self, played.problems, sizes, n, ids, base)  # the final groups (hinted too)
        produced |= signals.produce(wanted, final, before_update=False)
        signal_columns = {SIGNAL + name: values for name, values in produced.items()}
        scored = played.with_columns(rewards=rewards, **signal_columns)
        batch = dataclasses.replace(
            scored.select(keep),
            info={"tokens_per_s": played.tokens_per_s, "policy_version": self.version},
        )
        if self.replay is None:
            return batch
        return self._with_replay(batch, scored)

    def _with_replay(self, batch: Samples, scored: Samples) -> Samples:
        """``batch`` with each kept group's replayed samples (:mod:`rlvr.trainer.replay`) after
        its own, taken before this draw's successful samples (all of them, ``scored``, kept or
        not) are stored; a replayed sample's produced signals are its group's."""
        assert self.replay is not None
        problems, ids = batch.problems, scored.group_ids
        groups = sorted(set(batch.group_ids.tolist()))
        extra = [(g, s) for g in groups for s in self.replay.take(problems[g].id)]
        components = scored.terms
        for i in range(len(scored)):
            self.replay.store(
                problems[int(ids[i])].id,
                {
                    "completion_ids": list(scored.completion_ids[i]),
                    "logprobs": list(scored.sampler_logprobs[i]),
                    "text": scored.texts[i],
                    "reward": float(scored.rewards[i]),
                    "finished": bool(scored.finished[i]),
                    "terms": {label: values[i] for label, values in components.items()},
                },
            )
        self._replayed += len(extra)
        if not extra:
            return batch
        group_ids = torch.tensor([g for g, _ in extra], dtype=torch.long)
        rewards = [s["reward"] for _, s in extra]
        labels = list(batch.terms)
        breakdown = RewardBreakdown(
            total=rewards,
            components={label: [s["terms"].get(label, 0.0) for _, s in extra] for label in labels},
            weights=dict(batch.term_weights),
            errors={label: 0 for label in labels},
            reasons={label: [None] * len(extra) for label in labels},
        )
        first = torch.searchsorted(ids, group_ids)  # a group's signals: its first sample's
        columns = {
            "completion_ids": [s["completion_ids"] for _, s in extra],
            "sampler_logprobs": [s["logprobs"] for _, s in extra],  # the behaviour policy's
            "finished": [s["finished"] for _, s in extra],
            "texts": [s["text"] for _, s in extra],
            "group_ids": group_ids,
            "breakdown": breakdown,
            "rewards": torch.tensor(rewards, dtype=batch.rewards.dtype),
            **{SIGNAL + name: values[first] for name, values in scored.signals.items()},
        }
        return batch.add_rows(dataclasses.replace(batch, columns=columns))

    def _count_episodes(self, played: Samples) -> None:
        """Add a draw's episode counts (an environment's) to the step's."""
        for key, value in (played.info.get("episode_counts") or {}).items():
            self._episode_counts[key] = self._episode_counts.get(key, 0.0) + value

    def _hint(
        self, played: Samples, rewards: torch.Tensor, n: int, base: int
    ) -> tuple[Samples, torch.Tensor]:
        """GHPO's hint-guided rollouts (:mod:`rlvr.data.hints`): each group whose every sample
        scored below ``rollout.hint_threshold`` is played again with the first fraction of
        ``rollout.hints`` of its solution in the prompt, then the next while it still fails;
        the last hinted group replaces it (its problem, now hinted, and its samples). Group i
        hinted at its k-th fraction samples from the stream (base, P k + i, j). Returns the
        draw's table and rewards in the original group order (the reward metrics and episode
        counts were taken as each part was played). The prompt sampler has heard the unhinted
        rewards: the problems' own difficulty."""
        problems = played.problems
        if self.algo.samples != "policy" or len(rewards) != len(problems) * n:
            raise ValueError("rollout.hints apply to the policy's own groups of one size")
        threshold = self.cfg.rollout.hint_threshold
        groups: dict[int, tuple[Samples, torch.Tensor]] = {}
        failing = [
            g
            for g in range(len(problems))
            if bool((rewards[g * n : (g + 1) * n] < threshold).all())
        ]
        for k, fraction in enumerate(self.cfg.rollout.hints, start=1):
            hinted = {g: hints.hinted(problems[g], fraction) for g in failing}
            todo = [g for g in failing if hinted[g] is not None]
            if not todo:
                break
            keys = torch.cat(
                [group_keys(base, 1, n, first_prompt=len(problems) * k + g) for g in todo]
            )
            again = self.rollouts.run([hinted[g] for g in todo], n, self.sampling, keys)
            self._count_episodes(again)
            scores = self.rewards(again)
            for i, g in enumerate(todo):
                groups[g] = (again.groups([i]), scores[i * n : (i + 1) * n])
            failing = [
                g
                for i, g in enumerate(todo)
                if bool((scores[i * n : (i + 1) * n] < threshold).all())
            ]
        self._hinted += len(groups)
        if not groups:
            return played, rewards
        parts = [groups[g][0] if g in groups else played.groups([g]) for g in range(len(problems))]
        rewards = torch.cat(
            [
                groups[g][1] if g in groups else rewards[g * n : (g + 1) * n]
                for g in range(len(problems))
            ]
        )
        return merge_shards(parts), rewards

    def _run_sized(
        self, problems: list[Problem], sizes: list[int], base: int
    ) -> tuple[list[int], Samples]:
        """Groups of different sizes (a sampler's ``group_sizes``): the problems of each size
        played together, smallest size first; returns the sizes in that order and the merged
        table (its problems in that order). Sample j of the i-th problem (in that order) is the
        stream (base, i, j), as in a uniform draw."""
        if self.algo.group_filter or self.algo.samples != "policy":
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
            parts.append(
                self.rollouts.run(problems[first : first + count], size, self.sampling, keys)
            )
            first += count
        return sizes, merge_shards(parts)

    def collect(self, step: int) -> tuple[Samples, dict[str, float]]:
        """The batch of step ``step`` (1-based): draw prompts, sample, score, tell the sampler;
        refill until the batch is full (dynamic sampling). Returns the batch and the step's
        sampling and reward metrics."""
        algo, G, P = self.algo, self.cfg.rollout.group_size, self.cfg.rollout.prompts_per_step
        n = G * (algo.group_filter_oversample or 1) if algo.group_filter else G
        select = None
        if algo.selector is not None:  # DAPO's informative groups, or a group_selector
            select = partial(
                algorithms.GROUP_SELECTORS[algo.selector], **algo.params.get("group_selector", {})
            )
        draws = algorithms.GroupAccumulator(
            P, algo.max_draws if select is not None else 1, only_informative=False, select=select
        )
        parts = []
        while not draws.done:
            parts.append(self._draw(step, len(parts), n, draws))
        if draws.groups_kept == 0:
            self.warn(
                f"step {step}: no group passed the group selector {algo.selector!r} in "
                f"{draws.draws} draw(s): the step trains on nothing (raise algorithm.max_draws "
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
        if self.cfg.rollout.hints:
            metrics["sampling/hinted_groups"] = float(self._hinted)
            self._hinted = 0
        if self.replay is not None:
            metrics["sampling/replayed"] = float(self._replayed)
            metrics.update(self.replay.metrics())
            self._replayed = 0
        if self._episode_counts:
            metrics.update(episode_metrics(self._episode_counts))
            self._episode_counts.clear()
        metrics.update(self.rollouts.worker_stats())
        metrics["time/reward"] = self._reward_seconds
        self._reward_metrics.clear()
        self._reward_seconds = 0.0
        batch = Samples.concat(
            parts,
            tokens_per_s=sum(p.tokens_per_s for p in parts) / len(parts),
            policy_version=min(p.policy_version for p in parts),
        )
        return batch, metrics

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
