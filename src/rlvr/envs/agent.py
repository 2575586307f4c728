"""An agent run's rollout side: the environment factory, the chat renderer and the budgets,
playing groups of episodes on a rollout engine (:func:`rlvr.envs.episodes.run_episodes`), and
what the logs read of them (counts, held-out records).

Episode seeds: the ``n`` episodes of a problem get one seed, a hash of the problem id, so they
start alike (GRPO compares them) and a problem is the same game wherever and whenever it is
played (in training, in its held-out evaluation, in ``rlvr eval``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.data.base import Problem, Task
from rlvr.envs.base import EnvError, Environment
from rlvr.envs.chat import ChatRenderer
from rlvr.envs.episodes import (
    Budget,
    Episode,
    EpisodeContext,
    Faults,
    TurnBranching,
    run_episodes,
)
from rlvr.envs.harness import play_recorded
from rlvr.envs.parsers import tools_prompt
from rlvr.envs.registry import env_factory
from rlvr.models import stop_token_ids
from rlvr.rollout.base import SamplingParams, checked_keys
from rlvr.rollout.torch_engine import open_session

COUNTS = (
    "episodes",
    "turns",
    "truncated",
    "successes",
    "invalid_actions",
    "tool_calls",
    "tool_errors",
    "observations_cut",
    "env_faults",
)
"""Per-draw episode counts (summed over shards and draws; the collector's metrics divide)."""


def episode_seed(problem: Problem) -> int:
    """The seed of every episode of ``problem`` (31 bits of a hash of its id)."""
    digest = hashlib.sha256(problem.id.encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def succeeded(episode: Episode) -> bool:
    """The environment's ``info["success"]`` at the last turn, else a return of at least 1."""
    last = episode.infos[-1] if episode.infos else {}
    return bool(last["success"]) if "success" in last else episode.reward >= 1.0


def counts(episodes: list[Episode]) -> dict[str, float]:
    """The :data:`COUNTS` of a batch of episodes."""
    return {
        "episodes": float(len(episodes)),
        "turns": float(sum(e.num_turns for e in episodes)),
        "truncated": float(sum(e.truncated for e in episodes)),
        "successes": float(sum(succeeded(e) for e in episodes)),
        "invalid_actions": float(sum(e.invalid_actions for e in episodes)),
        "tool_calls": float(sum(e.tool_calls for e in episodes)),
        "tool_errors": float(sum(e.tool_errors for e in episodes)),
        "observations_cut": float(sum(e.observations_cut for e in episodes)),
        "env_faults": float(sum(e.fault is not None for e in episodes)),
    }


def tool_means(
    episodes: float, turns: float, tool_calls: float, tool_errors: float, invalid: float
) -> dict[str, float]:
    """The agent statistics of training steps and evaluations, from counts summed over
    ``episodes``: turns, tool calls and tool errors per episode, invalid actions per action."""
    n = max(episodes, 1.0)
    return {
        "turns_mean": turns / n,
        "tool_calls_mean": tool_calls / n,
        "tool_errors_mean": tool_errors / n,
        "tool_invalid_frac": invalid / max(turns, 1.0),
    }


def episode_metrics(total: dict[str, float]) -> dict[str, float]:
    """Metrics of summed :func:`counts`: ``episodes/*`` and ``tools/*`` (per episode, or
    fractions of actions)."""
    n = max(total["episodes"], 1.0)
    means = tool_means(
        n, total["turns"], total["tool_calls"], total["tool_errors"], total["invalid_actions"]
    )
    return {
        "episodes/turns_mean": means["turns_mean"],
        "episodes/truncated_frac": total["truncated"] / n,
        "episodes/success_frac": total["successes"] / n,
        "episodes/observations_cut": total["observations_cut"],
        "episodes/env_faults": total.get("env_faults", 0.0),
        "tools/calls": means["tool_calls_mean"],
        "tools/errors": means["tool_errors_mean"],
        "tools/invalid_frac": means["tool_invalid_frac"],
    }


@dataclass
class Agent:
    """What plays episodes (see the module docstring).

    Attributes:
        make_env: a fresh environment per episode.
        renderer: the token-exact chat renderer (checked prefix-preserving at build).
        decode: sampled ids -> the action's text (special tokens skipped).
        budget: turn and token budgets.
        faults: the time limit of a call into the environment, and what a fault does.
        recorded: the environment is an agent program that calls the model itself
            (:mod:`rlvr.envs.harness`): its episodes are recorded at an endpoint.
        branching: tree rollouts at turn boundaries (``rollout.tree`` with ``branching:
            turns``), or None.
    """

    make_env: Callable[[], Environment]
    renderer: ChatRenderer
    decode: Callable[[list[int]], str]
    budget: Budget
    faults: Faults = Faults()
    recorded: bool = False
    branching: TurnBranching | None = None

    def play(
        self,
        engine: Any,
        problems: list[Problem],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor | None,
    ) -> tuple[list[list[int]], list[Episode]]:
        """``n`` episodes of each problem on ``engine`` (episode i from stream ``keys[i]``; None:
        drawn from torch's global generator, as ``generate`` does): each problem's prompt ids
        and the episodes."""
        ctx = EpisodeContext(
            problems,
            n,
            sampling,
            checked_keys(keys, len(problems) * n, sampling),
            [episode_seed(p) for p in problems],
            self.renderer,
            self.decode,
            self.budget,
            self.faults,
            self.branching,
        )
        if self.recorded:
            return play_recorded(ctx, engine, self.make_env)
        return run_episodes(ctx, lambda prompts, k: open_session(engine, prompts, k), self.make_env)


def build_agent(cfg: Any, task: Task, tokenizer: Any) -> Agent:
    """The :class:`Agent` of a run with an ``env`` section (``cfg``: the run's config)."""
    make_env = env_factory(cfg.env.name, cfg.env.params, task, cfg.model.system_prompt)
    probe = make_env()
    tools = getattr(probe, "tools", None) or None
    tool_format = getattr(probe, "tool_format", "hermes")
    renderer = ChatRenderer(
        tokenizer,
        [t.schema() for t in tools] if tools else None,
        tools_prompt(tools, tool_format) if tools else None,
        stop_token_ids(tokenizer),
    )
    renderer.check("tool" if tools else "user")
    budget = Budget(cfg.env.max_turns, cfg.env.max_episode_tokens, cfg.env.max_observation_tokens)

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    faults = Faults(cfg.env.step_timeout_s, cfg.env.on_error)
    recorded = callable(getattr(probe, "play", None)) and not callable(getattr(probe, "step", None))
    branching = None
    if cfg.rollout.tree is not None:  # the config allows branching: turns only with an env
        settings = cfg.rollout.tree.branching_rule().settings()
        branching = TurnBranching(int(settings["branch_factor"]), int(settings["depth"]))
        if recorded:
            raise EnvError(
                f"rollout.tree: {cfg.env.name} is an agent program that calls the model "
                "itself; its episodes cannot be forked at turn boundaries"
            )
    return Agent(make_env, renderer, decode, budget, faults, recorded, branching)
