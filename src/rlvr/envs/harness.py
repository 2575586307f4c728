"""Episodes played by an outside program (an agent harness, an ecosystem's rollout) that calls the
model itself through an OpenAI-compatible endpoint: rlvr serves the policy on 127.0.0.1, records
every call and builds each episode from the record (:mod:`rlvr.envs.recorded`).

An :class:`AgentProgram` plays one episode: ``play(problem, seed, endpoint) -> AgentOutcome``,
where ``endpoint`` gives the ``base_url`` (and model name) any OpenAI client can use; the
outcome is the episode's reward and info. The ``n`` episodes of each problem run side by side,
one thread each, each with its own session URL (``.../s/<episode>/v1``).

The engine stays on the thread that calls :func:`play_recorded`: the endpoint's handlers queue
their requests, and this thread samples every request queued at that moment in one batch, with
the run's sampling settings (the request's own temperature and top-p are not used: the policy
samples as it does in training) and at most the tokens left in the episode's budget. Call k of
episode i samples from the stream ``keys[i]`` for k = 0 (as a single completion does), then
``derive(keys[i], k)``, so a batch's make-up does not change what is sampled. Budgets: at most
``max_turns`` calls and ``max_episode_tokens`` tokens after the prompt per episode; once spent,
every further call gets an empty reply (``finish_reason: "length"``, not recorded) and the
episode is truncated. The episode ends when the program returns, or faults (its exception, a
call that does not continue the episode, no call and no return within ``timeout_s``).

Tool calls: a first call that gives OpenAI ``tools`` fixes the episode's tools; they are shown by
the chat template, or described in the system prompt with the Hermes syntax
(:func:`~rlvr.envs.parsers.tools_prompt`), and a reply's ``<tool_call>`` blocks are returned as
``tool_calls``. The program's echo of that reply is matched by its calls, its ``tool`` messages
are observation tokens.
"""

from __future__ import annotations

import json
import queue
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch

from rlvr.data.base import Problem
from rlvr.envs.base import EnvError, Message
from rlvr.envs.chat import ChatRenderer
from rlvr.envs.episodes import (
    Budget,
    EnvFault,
    Episode,
    EpisodeContext,
    Faults,
    info_problem,
    reward_problem,
)
from rlvr.envs.parsers import parse_hermes, tools_prompt
from rlvr.envs.recorded import Call, Session, episode_from_calls
from rlvr.envs.tools import Tool
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.streams import derive

MODEL_NAME = "rlvr-policy"


@dataclass(frozen=True)
class Endpoint:
    """Where a program reaches the policy: an OpenAI ``base_url`` for its session, the model
    name to ask for, and an API key (any: the endpoint does not check it)."""

    base_url: str
    model: str = MODEL_NAME
    api_key: str = "rlvr"


@dataclass
class AgentOutcome:
    """An episode's result: its reward and what to log with it. ``info["tool_errors"]`` (a
    count), when the program gives it, is how many of the tool calls it ran failed: they are
    counted in ``tools/errors`` (the endpoint sees the calls, not their results)."""

    reward: float
    info: dict[str, Any] = field(default_factory=dict)


class AgentProgram(Protocol):
    """Plays one episode of ``problem`` against ``endpoint`` (see the module docstring)."""

    def play(self, problem: Problem, seed: int, endpoint: Endpoint) -> AgentOutcome: ...


@dataclass
class _Request:
    session: Session
    prompt_ids: list[int]
    max_new_tokens: int
    key: torch.Tensor
    done: threading.Event = field(default_factory=threading.Event)
    result: tuple[list[int], list[float], bool] | None = None


@dataclass
class _Episode:
    session: Session
    key: torch.Tensor
    budget: Budget
    label: str  # "agent <program's class>, problem <id>", how its faults begin
    truncated: bool = False
    returned: bool = False
    outcome: AgentOutcome | None = None
    fault: str | None = None
    renderer: ChatRenderer | None = None  # with the tools the first call gave

    def where(self) -> str:
        """Where a fault of the program happens, as every environment's fault says it: the
        agent, the problem and the turn (the reply it was handling, counted from 1; turn 1
        before its first call)."""
        return f"{self.label}, turn {max(1, len(self.session.calls))}"


class RecordingEndpoint:
    """The HTTP side: ``/s/<session>/v1/chat/completions`` (and ``/v1/models``) for the
    episodes being played; requests go to :attr:`requests` for the engine's thread."""

    def __init__(self, renderer: ChatRenderer, decode: Callable[[list[int]], str]) -> None:
        try:
            import uvicorn

            from rlvr.envs.endpoint import make_app
        except ImportError as err:
            raise EnvError(
                f"the recording endpoint needs fastapi and uvicorn ({err.name} is missing): "
                "pip install 'rlvr[serve]'"
            ) from err

        self.renderer, self.decode = renderer, decode
        self.episodes: dict[str, _Episode] = {}
        self.requests: queue.Queue[_Request] = queue.Queue()
        self.closed = False
        app = make_app(self._chat, MODEL_NAME)
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="rlvr-endpoint", daemon=True)
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise EnvFault("the recording endpoint could not start")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]

    def url(self, session: str) -> str:
        return f"http://127.0.0.1:{self.port}/s/{session}/v1"

    def close(self) -> None:
        """Stop serving; requests still queued are answered with an error."""
        self.closed = True
        while not self.requests.empty():
            self.requests.get_nowait().done.set()
        self.server.should_exit = True
        self.thread.join(5)

    def _chat(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        episode = self.episodes.get(name)
        if episode is None:
            raise EnvFault(f"no episode {name!r} is being played")
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("content") or "", str) for m in messages
        ):
            raise EnvFault(f"session {name!r}: messages must be a list of {{role, content}}")
        messages = [_message(m) for m in messages]
        session, budget = episode.session, episode.budget
        if not session.calls and body.get("tools"):
            episode.renderer = _tools_renderer(self.renderer, body["tools"], name)
        if episode.truncated or len(session.calls) >= budget.max_turns:
            episode.truncated = True
            return _answer("", [], [], False)  # the budget is spent: an empty reply, "length"
        renderer = episode.renderer or self.renderer
        prompt = session.prompt_for(messages, renderer)
        first = session.calls[0].prompt_ids if session.calls else prompt
        left = budget.max_episode_tokens - (len(prompt) - len(first))
        if left < 1:
            episode.truncated = True
            return _answer("", [], [], False)
        turn = len(session.calls)
        key = episode.key if turn == 0 else derive(episode.key.view(1), turn)[0]
        request = _Request(session, prompt, left, key)
        if self.closed:
            raise EnvFault(f"session {name!r}: the episode is over")
        self.requests.put(request)
        request.done.wait()
        if request.result is None:
            raise EnvFault(f"session {name!r}: the policy could not sample")
        ids, logprobs, finished = request.result
        text = self.decode(ids)
        calls, unread = [], 0
        if episode.renderer is not None:  # the request gave tools: read the calls out
            parsed = parse_hermes(text)
            calls, unread = [(c.name, c.arguments) for c in parsed.calls], len(parsed.errors)
        session.record(Call(messages, prompt, ids, logprobs, finished, text, calls, unread))
        answer = _answer(text, prompt, ids, finished)
        if calls:
            message = answer["choices"][0]["message"]
            message["content"] = _outside_calls(text) or None
            message["tool_calls"] = [
                {
                    "id": f"call_{name}_{turn}_{k}",
                    "type": "function",
                    "function": {"name": n, "arguments": json.dumps(a, ensure_ascii=False)},
                }
                for k, (n, a) in enumerate(calls)
            ]
            answer["choices"][0]["finish_reason"] = "tool_calls"
        return answer


def _message(m: dict[str, Any]) -> Message:
    """A request message as the session reads it: role, content (None: ""), its tool calls."""
    out: Message = {"role": m.get("role"), "content": m.get("content") or ""}
    if m.get("tool_calls"):
        out["tool_calls"] = m["tool_calls"]
    return out


def _tools_renderer(renderer: ChatRenderer, tools: Any, session: str) -> ChatRenderer:
    """The session's renderer for a request's OpenAI ``tools``: shown by the chat template
    when it renders them, else described in the system prompt with the Hermes call syntax, which
    the replies are then read in."""
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and isinstance(t.get("function"), dict) for t in tools
    ):
        raise EnvFault(f"session {session!r}: tools must be a list of {{type, function}}")
    described = [
        Tool(
            str(t["function"].get("name")),
            str(t["function"].get("description") or ""),
            t["function"].get("parameters") or {"type": "object", "properties": {}},
            fn=_unused,
        )
        for t in tools
    ]
    schemas = [t.schema() for t in described]
    return ChatRenderer(
        renderer.tokenizer, schemas, tools_prompt(described, "hermes"), renderer.stop_token_ids
    )


def _unused(**arguments: Any) -> None:
    """The function of a tool described to the policy but run by the program, not here."""


def _outside_calls(text: str) -> str:
    """``text`` without its ``<tool_call>`` blocks."""
    return re.sub(r"<tool_call>.*?</tool_call>", "", text, flags=re.DOTALL).strip()


def _answer(text: str, prompt: list[int], ids: list[int], finished: bool) -> dict[str, Any]:
    """An OpenAI chat completion body, with the prompt's and the reply's token ids."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL_NAME,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop" if finished else "length",
                "token_ids": ids,
                "logprobs": None,
            }
        ],
        "prompt_token_ids": prompt,
        "usage": {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(ids),
            "total_tokens": len(prompt) + len(ids),
        },
    }


def play_recorded(
    ctx: EpisodeContext, engine: Any, make_program: Callable[[], AgentProgram]
) -> tuple[list[list[int]], list[Episode]]:
    """Play ``ctx.n`` episodes of each problem on ``engine``, each with a fresh program from
    ``make_program`` (see the module docstring); each problem's prompt ids (its episodes'
    first call) and the episodes."""
    problems, n, sampling, keys = ctx.problems, ctx.n, ctx.sampling, ctx.keys
    budget, faults, seeds = ctx.budget, ctx.faults, ctx.seeds
    endpoint = RecordingEndpoint(ctx.renderer, ctx.decode)
    played: list[_Episode] = []
    threads = []
    try:
        for i in range(len(problems) * n):
            problem, name = problems[i // n], f"e{i}-{uuid.uuid4().hex[:8]}"
            program = make_program()
            label = f"agent {type(program).__name__}, problem {problem.id!r}"
            episode = _Episode(Session(name), keys[i], budget, label)
            endpoint.episodes[name] = episode
            played.append(episode)
            target = _runner(program, problem, seeds[i // n], Endpoint(endpoint.url(name)), episode)
            threads.append(threading.Thread(target=target, name=f"agent-{i}", daemon=True))
        for thread in threads:
            thread.start()
        _serve_requests(engine, endpoint, threads, sampling, faults, played)
    finally:
        endpoint.close()
    _one_action_for_the_silent(engine, played, problems, n, sampling)
    return _episodes(played, problems, n, faults)


def _runner(
    program: AgentProgram, problem: Problem, seed: int, endpoint: Endpoint, episode: _Episode
) -> Callable[[], None]:
    def run() -> None:
        try:
            episode.outcome = program.play(problem, seed, endpoint)
            episode.returned = True
        except Exception as err:  # noqa: BLE001 - the program's failure is the episode's fault
            text = " ".join(str(err).split())[:300]
            episode.fault = f"{episode.where()}: play() raised {type(err).__name__}: {text}"

    return run


def _serve_requests(
    engine: Any,
    endpoint: RecordingEndpoint,
    threads: list[threading.Thread],
    sampling: SamplingParams,
    faults: Faults,
    played: list[_Episode],
) -> None:
    """Sample every queued request in one batch until every program has returned (or overrun
    ``faults.timeout_s`` without a call)."""
    last_activity = time.monotonic()
    while any(t.is_alive() for t in threads):
        try:
            first = endpoint.requests.get(timeout=0.02)
        except queue.Empty:
            if time.monotonic() - last_activity > faults.timeout_s:
                for episode, thread in zip(played, threads, strict=True):
                    if thread.is_alive() and episode.fault is None:
                        episode.fault = (
                            f"{episode.where()}: no call to the model and no return within "
                            f"{faults.timeout_s:g} s (env.step_timeout_s)"
                        )
                return
            continue
        time.sleep(0.02)  # the calls made at about the same time join the batch
        batch = [first]
        while not endpoint.requests.empty():
            batch.append(endpoint.requests.get_nowait())
        for budget in sorted({r.max_new_tokens for r in batch}):
            part = [r for r in batch if r.max_new_tokens == budget]
            params = replace(sampling, max_new_tokens=min(budget, sampling.max_new_tokens))
            out = engine.generate(
                [r.prompt_ids for r in part], 1, params, torch.stack([r.key for r in part])
            )
            for r, ids, lps, fin in zip(
                part, out.completion_ids, out.logprobs, out.finished, strict=True
            ):
                r.result = (ids, lps, fin)
                r.done.set()
        last_activity = time.monotonic()


def _one_action_for_the_silent(
    engine: Any, played: list[_Episode], problems: list[Problem], n: int, sampling: SamplingParams
) -> None:
    """An episode whose program failed before calling the model plays one action from its
    group's prompt (sampled from its own stream, rewarded 0), as an environment that cannot
    reset does (:mod:`rlvr.envs.episodes`); a group none of whose episodes called stops."""
    for p in range(len(problems)):
        group = played[p * n : (p + 1) * n]
        called = [e for e in group if e.session.calls]
        if not called:
            first = next(
                (e.fault for e in group if e.fault),
                f"{group[0].where()}: the program returned without calling the model",
            )
            raise EnvFault(f"{first}; no episode of this problem called the model")
        start = called[0].session.calls[0]
        for e in group:
            if not e.session.calls:
                e.fault = e.fault or f"{e.where()}: the program returned without calling the model"
                out = engine.generate([start.prompt_ids], 1, sampling, e.key.view(1))
                ids, lps, fin = out.completion_ids[0], out.logprobs[0], out.finished[0]
                call = Call(start.messages, start.prompt_ids, ids, lps, fin, "")
                e.session.record(call)


def _outcome_fault(e: _Episode) -> str | None:
    """What is wrong with the outcome a program returned (as an environment's step result is
    checked), or None."""
    outcome, where = e.outcome, e.where()
    if not e.returned:
        return f"{where}: the program did not return"
    if not isinstance(outcome, AgentOutcome):
        return f"{where}: play() returned {type(outcome).__name__}, not an AgentOutcome"
    problem = reward_problem(outcome.reward, "play()") or info_problem(
        outcome.info, ("tool_errors",), "play()"
    )
    return None if problem is None else f"{where}: {problem}"


def _episodes(
    played: list[_Episode], problems: list[Problem], n: int, faults: Faults
) -> tuple[list[list[int]], list[Episode]]:
    """The recorded sessions as episodes, each problem's prompt its first episode's."""
    episodes, prompts = [], []
    for p, problem in enumerate(problems):
        group = played[p * n : (p + 1) * n]
        prompt = group[0].session.calls[0].prompt_ids
        prompts.append(prompt)
        for e in group:
            if e.session.calls[0].prompt_ids != prompt:
                raise EnvFault(
                    f"problem {problem.id!r}: the episodes of one group started from different "
                    "prompts; with the same problem and seed they must start alike"
                )
            fault = e.fault or _outcome_fault(e)
            if fault is not None and faults.on_error == "raise":
                raise EnvFault(fault)
            ok = e.outcome is not None and fault is None
            reward = float(e.outcome.reward) if ok else 0.0  # type: ignore[union-attr]
            info = dict(e.outcome.info) if ok else {"env_fault": fault}  # type: ignore[union-attr]
            episode = episode_from_calls(e.session.calls, reward, info)
            episode.tool_errors += int(info.get("tool_errors", 0))
            episode.truncated = e.truncated or fault is not None
            episode.terminated = not episode.truncated
            episode.fault = fault
            episodes.append(episode)
    if all(e.fault is not None for e in episodes):
        raise EnvFault(
            f"every episode of this batch ({len(episodes)}) ended in a fault; the first: "
            f"{episodes[0].fault}"
        )
    return prompts, episodes
