"""The episode loop: environments and a rollout engine's :class:`TurnSession`, turn by turn.

``n`` episodes per problem (a group) start from the environment's first messages, rendered once
per problem; every turn each live episode samples one action (its ids kept exactly as sampled),
the environment answers, and the answer is appended as observation tokens
(:class:`~rlvr.envs.chat.ChatRenderer`) for the next turn. An :class:`Episode` is plain data: the
tokens after the prompt with the mask of the sampled ones, the sampler's log-probs, the reward
and anchor of every turn, and the transcript.

Budgets (:class:`Budget`): at most ``max_turns`` actions; at most ``max_episode_tokens`` tokens
after the prompt (actions and observations: each action may use what is left, up to the
sampling's ``max_new_tokens``); observations cut
to ``max_observation_tokens``. An episode that runs out of turns or tokens before its
environment ends it is *truncated* (as is one whose observation cannot be cut to fit: the
template's own tokens alone over the limit). The observation after the last action is kept in the
transcript only (no action follows it, so it is not trained on).

Faults (:class:`Faults`): every ``reset``/``step`` call runs under a time limit
(:func:`rlvr.envs.deadline.call_with_deadline`); a call that raises, overruns it or answers
malformed data is an environment fault, an :class:`EnvFault` whose one-line message names the
environment, the problem and the turn. ``on_error="raise"`` stops there; ``"end_episode"`` ends
that episode: a faulted step's turn gets reward 0 and the episode is truncated, a faulted reset
plays the group's prompt (another episode's reset) for one action, rewarded 0; the message is
kept on the episode (``Episode.fault``). A group none of whose environments can reset, a batch
whose every episode faulted (nothing could be learnt from it), or calls of
:data:`HUNG_IN_A_ROW` problems in a row out of time (the environment is down; each call would
cost the time limit again) stop the run either way.

A hung environment costs a group about two time limits, not one per episode: the calls of a
group's episodes (their resets, then their steps at each turn) run one after another in place
until one runs out of time; the group's other calls of that turn then start together, each on a
thread of its own under its own time limit (:func:`_group_calls`). Each call that runs out of
time is told at once on stderr (a ``warning:`` line). Environments are closed (their optional
``close()``) the same way, but as one group of the whole batch: once one close has run out of
time the batch's other closes run side by side, so hung closes cost about two time limits per
batch (not per group: no dead-environment check stops a batch's closes).
"""

from __future__ import annotations

import copy
import math
import sys
import threading
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import torch

from rlvr.data.base import Problem
from rlvr.envs.base import EnvError, Environment, Message, StepResult
from rlvr.envs.chat import ChatRenderer
from rlvr.envs.deadline import Deadline, call_with_deadline
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.streams import derive
from rlvr.rollout.turns import TurnSession

TRUNCATION_MARK = " ...[truncated]"

T = TypeVar("T")


@dataclass(frozen=True)
class Budget:
    """Token and turn budgets of an episode (see the module docstring)."""

    max_turns: int = 4
    max_episode_tokens: int = 512
    max_observation_tokens: int = 256


@dataclass(frozen=True)
class Faults:
    """What a fault of an environment does (see the module docstring).

    Attributes:
        timeout_s: seconds a ``reset``/``step`` call may take (``env.step_timeout_s``).
        on_error: "end_episode" or "raise" (``env.on_error``).
    """

    timeout_s: float = 60.0
    on_error: str = "end_episode"


class EnvFault(EnvError):
    """An environment's ``reset``/``step`` raised, overran its time limit or answered malformed
    data (the message is one line: environment, problem, turn, what happened)."""


class EnvTimeout(EnvFault):
    """An environment's call overran ``env.step_timeout_s``."""


HUNG_IN_A_ROW = 3
"""Problems in a row whose calls overran their time limit, after which the environment is taken
to be down and the run stops whatever ``on_error`` says (each call would cost ``timeout_s``
again; one problem that always hangs does not count as many)."""


@dataclass
class _FaultLog:
    """The problems whose calls timed out in a row, across the episodes of a batch."""

    timeouts: set[str] = field(default_factory=set)

    def ok(self) -> None:
        self.timeouts.clear()

    def fault(self, fault: EnvFault, faults: Faults, problem: Problem) -> str:
        """The fault's message, when the episode may end with it; raises it (or that the
        environment looks down) otherwise."""
        if isinstance(fault, EnvTimeout):
            self.timeouts.add(problem.id)
        else:
            self.timeouts.clear()
        if faults.on_error == "raise":
            raise fault
        if isinstance(fault, EnvTimeout):  # told now: the draw's faults are told when it ends
            print(f"warning: {fault}", file=sys.stderr, flush=True)
        if len(self.timeouts) >= HUNG_IN_A_ROW:
            raise EnvFault(
                f"{fault}; the calls of {len(self.timeouts)} problems in a row ran out of time: "
                "the environment looks down, the run stops"
            ) from fault
        return str(fault)


@dataclass
class Episode:
    """One episode as the learner and the logs see it.

    Attributes:
        completion_ids: the tokens after the prompt: action, observation, action, ...
        action_mask: 1 on the sampled ids (the loss sees them), 0 on observation tokens.
        logprobs: the sampler's log-prob of each token (0.0 on observation tokens).
        turn_rewards: the environment's reward for each action.
        anchors: each action's anchor state (``info["anchor"]``; None when not given).
        terminated / truncated: how it ended (by the environment; by a budget or the
            environment's own limit).
        finished: its last action ended with a stop token or string.
        messages: the whole transcript (first messages, actions, every observation).
        tool_calls, tool_errors, invalid_actions, observations_cut: counts over its turns.
        infos: each step's ``info``.
        fault: the environment fault that ended it (one line), or None.
        group: the index of its problem in the batch (-1: not recorded).
        segments: tree rollouts at turn boundaries (:class:`TurnBranching`): the segment
            label of each token after the prompt, unique within its problem (empty otherwise).
    """

    completion_ids: list[int] = field(default_factory=list)
    action_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    anchors: list[Hashable | None] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    finished: bool = False
    messages: list[Message] = field(default_factory=list)
    tool_calls: int = 0
    tool_errors: int = 0
    invalid_actions: int = 0
    observations_cut: int = 0
    infos: list[dict[str, Any]] = field(default_factory=list)
    fault: str | None = None
    group: int = -1
    segments: list[int] = field(default_factory=list)

    @property
    def reward(self) -> float:
        """The episode's return: the sum of its turn rewards."""
        return float(sum(self.turn_rewards))

    @property
    def last_action(self) -> str:
        """The text of the episode's last action (what single-answer metrics read)."""
        return next(m["content"] for m in reversed(self.messages) if m["role"] == "assistant")

    @property
    def num_turns(self) -> int:
        return len(self.turn_rewards)

    def add(self, ids: list[int], logprobs: list[float] | None) -> None:
        """Append sampled ids (with their log-probs) or observation tokens (None)."""
        self.completion_ids += ids
        self.action_mask += [1 if logprobs is not None else 0] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:300]}" if text else type(err).__name__


def _check_messages(messages: Any, where: str, what: str) -> list[Message]:
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in messages
    ):
        raise EnvFault(
            f"{where}: {what} gave messages {messages!r:.200}; expected a list of "
            '{"role": str, "content": str} dicts'
        )
    return messages


def _guarded(call: Callable[[], Any], where: str, what: str, faults: Faults) -> Any:
    """``call()`` under the time limit; its failure an :class:`EnvFault` (one line)."""
    try:
        return call_with_deadline(call, faults.timeout_s)
    except Deadline:
        raise EnvTimeout(
            f"{where}: {what} did not answer within {faults.timeout_s:g} s (env.step_timeout_s)"
        ) from None
    except Exception as err:  # noqa: BLE001 - the environment's own failure, reported
        raise EnvFault(f"{where}: {what} raised {_one_line(err)}") from err


def _group_calls(calls: list[Callable[[], T]]) -> Iterator[T | EnvFault]:
    """Each of a group's calls into its environments, made (see the module docstring): its
    result or the :class:`EnvFault` it raised, in order. In place, an environment may time its
    own checks with SIGALRM (main thread only, :mod:`rlvr.envs.deadline`; on a thread SIGALRM
    cannot time a check: GEM's math grader then fails, a fault of that episode); side by side,
    once one call has run out of time, the group's other calls cost one time limit together."""
    for k, call in enumerate(calls):
        try:
            result: T | EnvFault = call()
        except EnvFault as fault:
            result = fault
        yield result
        if isinstance(result, EnvTimeout):
            yield from _side_by_side(calls[k + 1 :])
            return


def _side_by_side(calls: list[Callable[[], T]]) -> Iterator[T | EnvFault]:
    """Each call's result or its :class:`EnvFault`, in order, the calls started together, each
    on a thread of its own (under its own time limit: each returns within it)."""
    results: dict[int, T | BaseException] = {}

    def run(k: int) -> None:
        try:
            results[k] = calls[k]()
        except BaseException as err:  # noqa: BLE001 - handed to the caller
            results[k] = err

    threads = [
        threading.Thread(target=run, args=(k,), name="env-call", daemon=True)
        for k in range(len(calls))
    ]
    for thread in threads:
        thread.start()
    for k, thread in enumerate(threads):
        thread.join()
        result = results[k]
        if isinstance(result, BaseException) and not isinstance(result, EnvFault):
            raise result
        yield result


def _started(
    make_env: Callable[[], Environment], problem: Problem, seed: int, faults: Faults
) -> tuple[Environment, list[Message]]:
    """A fresh environment, reset with the problem and seed, and its first messages."""
    env = _guarded(make_env, f"problem {problem.id!r}", "making the env", faults)
    return env, _checked_reset(env, problem, seed, faults)


def _checked_reset(env: Environment, problem: Problem, seed: int, faults: Faults) -> list[Message]:
    """``env.reset(problem, seed)``, its messages checked (at least one)."""
    where = f"env {type(env).__name__}, problem {problem.id!r}"
    messages = _guarded(lambda: env.reset(problem, seed), where, "reset()", faults)
    if not _check_messages(messages, where, "reset()"):
        raise EnvFault(f"{where}: reset() gave no messages; the policy needs a prompt")
    return messages


def _checked_step(env: Environment, text: str, where: str, faults: Faults) -> StepResult:
    """``env.step(text)``, its result checked (an environment bug is an :class:`EnvFault`)."""
    result = _guarded(lambda: env.step(text), where, "step()", faults)
    if not isinstance(result, StepResult):
        raise EnvFault(f"{where}: step() returned {type(result).__name__}, not a StepResult")
    problem = reward_problem(result.reward, "step()")
    if problem is not None:
        raise EnvFault(f"{where}: {problem}")
    _check_messages(result.messages, where, "step()")
    problem = info_problem(result.info, ("tool_calls", "tool_errors"), "step()")
    if problem is not None:
        raise EnvFault(f"{where}: {problem}")
    return result


def reward_problem(reward: Any, who: str) -> str | None:
    """What is wrong with the reward ``who`` gave (an environment's ``step()``, an agent
    program's ``play()``): not a finite number; or None."""
    if (
        isinstance(reward, bool)
        or not isinstance(reward, (int, float))
        or not math.isfinite(reward)
    ):
        return f"{who} gave reward {reward!r}; expected a finite number"
    return None


def info_problem(info: Any, counts: tuple[str, ...], who: str) -> str | None:
    """What is wrong with the info ``who`` gave: not a dict, or one of its ``counts`` not an
    int >= 0; or None."""
    if not isinstance(info, dict):
        return f"{who} gave info {info!r:.200}; expected a dict"
    for key in counts:
        value = info.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"info[{key!r}] = {value!r}; expected a count (int >= 0)"
    return None


def _fit_observation(
    renderer: ChatRenderer,
    history: list[Message],
    action: list[int],
    new: list[Message],
    limit: int,
) -> tuple[list[int], list[Message], bool]:
    """The observation's tokens and messages, the longest message cut (marked) until it fits in
    ``limit`` tokens (the caller ends the episode, truncated, when even empty messages do not);
    and whether anything was cut."""
    ids = renderer.observation_ids(history, action, new)
    cut = False
    while len(ids) > limit and any(m["content"] != TRUNCATION_MARK for m in new):
        longest = max(range(len(new)), key=lambda i: len(new[i]["content"]))
        content = renderer.encode(new[longest]["content"])
        keep = max(0, min(len(content) - 8, len(content) - (len(ids) - limit) - 8))
        text = renderer.tokenizer.decode(content[:keep]) + TRUNCATION_MARK
        if keep == 0:
            text = TRUNCATION_MARK
        new = [*new[:longest], {**new[longest], "content": text}, *new[longest + 1 :]]
        ids, cut = renderer.observation_ids(history, action, new), True
    return ids, new, cut


def _record_step(episode: Episode, result: StepResult) -> None:
    info = result.info
    episode.turn_rewards.append(float(result.reward))
    anchor = info.get("anchor")
    episode.anchors.append(anchor if isinstance(anchor, Hashable) else repr(anchor))
    episode.tool_calls += int(info.get("tool_calls", 0))
    episode.tool_errors += int(info.get("tool_errors", 0))
    episode.invalid_actions += int(info.get("action_valid", True) is False)
    episode.infos.append(info)
    episode.messages += result.messages


def start_episodes(
    make_env: Callable[[], Environment],
    renderer: ChatRenderer,
    problems: list[Problem],
    n: int,
    seeds: list[int],
    faults: Faults = Faults(),
) -> tuple[list[Environment | None], list[Episode], list[list[int]]]:
    """``n`` environments per problem, reset with the problem and its group's seed (episodes of a
    group start alike); their episodes (first messages) and each problem's prompt ids. An
    environment that faulted is None, its episode carries the fault (see the module
    docstring)."""
    envs: list[Environment | None] = []
    episodes: list[Episode] = []
    prompts = []
    log = _FaultLog()
    for p, (problem, seed) in enumerate(zip(problems, seeds, strict=True)):
        first, group = None, len(episodes)
        for started in _group_calls([partial(_started, make_env, problem, seed, faults)] * n):
            if isinstance(started, EnvFault):
                envs.append(None)
                episodes.append(Episode(fault=log.fault(started, faults, problem)))
                continue
            log.ok()
            env, messages = started[0], renderer.first_messages(started[1])
            if first is None:
                first = messages
                prompts.append(renderer.prompt_ids(messages))
            elif messages != first:
                raise EnvError(
                    f"{type(env).__name__}.reset({problem.id!r}, seed) gave different first "
                    "messages to episodes of one group; with the same problem and seed it must "
                    f"start alike (problem index {p})"
                )
            envs.append(env)
            episodes.append(Episode(messages=list(messages)))
        if first is None:
            raise EnvFault(f"{episodes[group].fault}; no episode of this problem could start")
        for episode in episodes[group:]:
            if episode.fault is not None:
                episode.messages = list(first)
    return envs, episodes, prompts


def _end_with_fault(episode: Episode, fault: str) -> None:
    """The episode ends at a faulted turn: reward 0, truncated, the fault kept."""
    episode.fault = fault
    episode.turn_rewards.append(0.0)
    episode.anchors.append(None)
    episode.infos.append({"env_fault": fault})
    episode.truncated = True


def _close_all(envs: list[Environment | None], faults: Faults) -> None:
    """The environments' optional ``close()`` (a connection, a subprocess), the whole batch's as
    one group's calls (:func:`_group_calls`): after the first close that runs out of time, every
    other close of the batch starts at once on a thread of its own, so hung closes cost the batch
    about two time limits in all, where a group at a time would cost two per group; their
    failures are ignored: the episodes are over."""
    closes = [(env, getattr(env, "close", None)) for env in envs]
    calls = [
        partial(_guarded, close, f"env {type(env).__name__}", "close()", faults)
        for env, close in closes
        if callable(close)
    ]
    for _ in _group_calls(calls):
        pass


def _observation(
    renderer: ChatRenderer, episode: Episode, action: list[int], result: StepResult, budget: Budget
) -> list[int] | None:
    """Records a step's result on the episode; the observation's tokens when the episode goes
    on, or None when it has ended (by the environment; truncated: no room left for an action
    after the observation, or an observation that cannot be cut to fit)."""
    history = list(episode.messages)
    _record_step(episode, result)
    if result.done:
        episode.terminated, episode.truncated = result.terminated, result.truncated
        return None
    obs, shown, cut = _fit_observation(
        renderer, history, action, result.messages, budget.max_observation_tokens
    )
    episode.observations_cut += int(cut)
    if shown is not result.messages:
        episode.messages[len(history) :] = shown
    room = budget.max_episode_tokens - len(episode.completion_ids) - len(obs)
    if room < 1 or len(obs) > budget.max_observation_tokens:
        episode.truncated = True
        return None
    return obs


@dataclass(frozen=True)
class TurnBranching:
    """Tree rollouts at turn boundaries (Tree-GRPO, Ji et al. 2025, "Tree Search for LLM Agent
    Reinforcement Learning": each tree node an agent step): after each of its first ``depth``
    turns, an episode that goes on continues as ``branch_factor`` episodes, each with its own
    copy of the environment (its ``fork()`` method, else a deep copy). The first child is the
    episode itself, on its own stream; child j > 0 takes ``derive(derive(key, -1 - turn), j)``.
    """

    branch_factor: int = 2
    depth: int = 1


def _copy(env: Environment) -> Environment:
    """A copy of ``env`` that goes on independently: ``env.fork()``, else a deep copy."""
    fork = getattr(env, "fork", None)
    return fork() if callable(fork) else copy.deepcopy(env)


@dataclass
class _Forest:
    """:func:`run_episodes`' bookkeeping of turn-level trees: each episode's problem, its place
    (first episode, then a child index per branch point: depth-first order), and the segment
    labels of its tokens labelled so far (a segment is an episode's tokens between branch
    points; labels numbered per problem)."""

    owner: list[int]
    paths: list[tuple[int, ...]]
    labels: list[list[int]]
    counters: dict[int, int] = field(default_factory=dict)

    def close_segment(self, e: int, episode: Episode) -> None:
        """Label episode ``e``'s tokens since its last branch point as one new segment."""
        problem = self.owner[e]
        label = self.counters.get(problem, 0)
        self.counters[problem] = label + 1
        self.labels[e] += [label] * (len(episode.completion_ids) - len(self.labels[e]))

    def fork(
        self,
        e: int,
        factor: int,
        turn: int,
        episodes: list[Episode],
        envs: list[Environment | None],
        keys: list[int],
        faults: Faults,
    ) -> list[int]:
        """Episode ``e`` continued as ``factor`` episodes (itself first); their indices. Each
        copy of the environment is a call into it (:func:`_copy` under the time limit): one that
        fails is an environment fault, raised (``on_error: raise``, with how to make it
        copyable) or ending that child after its next action, as a failed reset does."""
        self.close_segment(e, episodes[e])
        base = self.paths[e]
        self.paths[e] = base + (0,)
        derived = derive(derive(torch.tensor([keys[e]]), -1 - turn), torch.arange(factor))
        children = [e]
        for j in range(1, factor):
            children.append(len(episodes))
            episodes.append(copy.deepcopy(episodes[e]))
            env, where = envs[e], f"env {type(envs[e]).__name__}, turn {turn + 1}"
            try:
                envs.append(_guarded(partial(_copy, env), where, "fork()/deepcopy", faults))
            except EnvFault as fault:
                if faults.on_error == "raise":
                    raise EnvFault(
                        f"{fault}; tree rollouts at turn boundaries copy each environment at a "
                        "branch point: give it a fork() method returning an independent copy, "
                        "or remove rollout.tree"
                    ) from fault
                envs.append(None)  # the child plays one action, then ends with the fault
                episodes[-1].fault = str(fault)
            keys.append(int(derived[j]))
            self.owner.append(self.owner[e])
            self.paths.append(base + (j,))
            self.labels.append(list(self.labels[e]))
        return children

    def finish(self, episodes: list[Episode]) -> list[Episode]:
        """The episodes with their groups and segments, by problem and depth-first."""
        for e, episode in enumerate(episodes):
            if len(self.labels[e]) < len(episode.completion_ids) or not self.labels[e]:
                self.close_segment(e, episode)
            episode.group, episode.segments = self.owner[e], self.labels[e]
        order = sorted(range(len(episodes)), key=lambda e: (self.owner[e], self.paths[e]))
        return [episodes[e] for e in order]


@dataclass(frozen=True)
class EpisodeContext:
    """What every episode of one batch shares, whichever engine plays it (:func:`run_episodes`:
    rlvr's turn loop over an environment; :func:`rlvr.envs.harness.play_recorded`: an agent
    program calling a recording endpoint).

    Attributes:
        problems: [P] the problems; ``n`` episodes of each (episode i of problem i // n).
        sampling: the run's sampling settings.
        keys: [P n] each episode's random stream (turn t samples from ``keys[i]`` for t = 0,
            then ``derive(keys[i], t)``).
        seeds: [P] each problem's episode seed (the episodes of a group start alike).
        renderer: the token-exact chat renderer.
        decode: sampled ids -> an action's text.
        budget: turn and token budgets.
        faults: the time limit of a call into the environment, and what a fault does.
        branching: tree rollouts at turn boundaries (:class:`TurnBranching`), or None.
    """

    problems: list[Problem]
    n: int
    sampling: SamplingParams
    keys: torch.Tensor
    seeds: list[int]
    renderer: ChatRenderer
    decode: Callable[[list[int]], str]
    budget: Budget
    faults: Faults = Faults()
    branching: TurnBranching | None = None


def run_episodes(
    ctx: EpisodeContext,
    open_session: Callable[[list[list[int]], int], TurnSession],
    make_env: Callable[[], Environment],
) -> tuple[list[list[int]], list[Episode]]:
    """Play ``ctx.n`` episodes of each problem, a fresh environment from ``make_env`` each, on
    the sessions ``open_session`` opens (episode i of problem i // n); turn t of episode i
    samples from the stream ``keys[i]`` for t = 0 (as a single completion does), then
    ``derive(keys[i], t)``. Environments are closed (their optional ``close()``) when the
    episodes end. Returns each problem's prompt ids and the episodes."""
    problems, n, sampling, keys = ctx.problems, ctx.n, ctx.sampling, ctx.keys
    renderer, decode, budget, faults = ctx.renderer, ctx.decode, ctx.budget, ctx.faults
    envs, episodes, prompts = start_episodes(make_env, renderer, problems, n, ctx.seeds, faults)
    log = _FaultLog()
    count = len(episodes)
    forest = _Forest(
        [e // n for e in range(count)], [(e,) for e in range(count)], [[] for _ in range(count)]
    )
    key_list = [int(k) for k in keys.tolist()]
    try:
        session = open_session(prompts, n)
        live = list(range(len(episodes)))
        for turn in range(budget.max_turns):
            budgets = [
                min(
                    sampling.max_new_tokens,
                    budget.max_episode_tokens - len(episodes[e].completion_ids),
                )
                for e in live
            ]
            turn_keys = torch.tensor([key_list[e] for e in live], dtype=torch.long)
            if turn > 0:  # the first turn samples from the episode's own stream, as a completion
                turn_keys = derive(turn_keys, turn)
            out = session.sample(sampling, turn_keys, budgets)
            keep, observations = [], []
            for row, e in enumerate(live):
                episode, ids = episodes[e], out.completion_ids[row]
                episode.add(ids, out.logprobs[row])
                episode.finished = out.finished[row]
                episode.messages.append({"role": "assistant", "content": decode(ids)})
                if envs[e] is None:  # its reset faulted: the group's prompt, one action
                    _end_with_fault(episode, episode.fault or "")
            by_problem: dict[int, list[int]] = {}  # the stepped rows of each problem, in order
            for row, e in enumerate(live):
                if envs[e] is not None:
                    by_problem.setdefault(forest.owner[e], []).append(row)
            for p, rows in by_problem.items():
                calls = [
                    partial(
                        _checked_step,
                        envs[live[row]],
                        episodes[live[row]].messages[-1]["content"],
                        f"env {type(envs[live[row]]).__name__}, problem {problems[p].id!r}, "
                        f"turn {turn + 1}",
                        faults,
                    )
                    for row in rows
                ]
                for row, result in zip(rows, _group_calls(calls), strict=True):
                    episode = episodes[live[row]]
                    if isinstance(result, EnvFault):
                        _end_with_fault(episode, log.fault(result, faults, problems[p]))
                        continue
                    log.ok()
                    obs = _observation(renderer, episode, out.completion_ids[row], result, budget)
                    if obs is None:
                        continue
                    if turn + 1 == budget.max_turns:  # no action follows this observation
                        episode.truncated = True
                        continue
                    episode.add(obs, None)
                    keep.append(row)
                    observations.append(obs)
            live = [live[row] for row in keep]
            if not live:
                break
            if ctx.branching is not None and turn < ctx.branching.depth:  # a branch point
                rows, obs_rows, children = [], [], []
                for row, obs, e in zip(keep, observations, live, strict=True):
                    for child in forest.fork(
                        e, ctx.branching.branch_factor, turn, episodes, envs, key_list, faults
                    ):
                        rows.append(row)
                        obs_rows.append(obs)
                        children.append(child)
                keep, observations, live = rows, obs_rows, children
            session.extend(keep, observations)
        session.close()  # the engine's caches are not kept while the learner trains
    finally:
        _close_all(envs, faults)
    if all(e.fault is not None for e in episodes):
        raise EnvFault(
            f"every episode of this batch ({len(episodes)}) ended in an environment fault; the "
            f"first: {episodes[0].fault}"
        )
    if ctx.branching is not None:
        episodes = forest.finish(episodes)
    return prompts, episodes
