"""Episodes an outside program plays itself, calling the model through an OpenAI-style chat
endpoint (an agent harness, an ecosystem's rollout loop): every call is recorded and the episode
is built from the record (the ids the policy sampled, their log-probs), never from the text the
program got back.

A :class:`Session` is one episode's calls. The first call's prompt is its messages through the
chat template. A later call continues the episode when its messages are the previous call's,
then the reply it got (the text the server returned), then new messages (a tool result, the
next user turn): its prompt is then *stitched*, token for token, as the previous prompt + the
reply's ids exactly as sampled + the new messages' observation tokens
(:meth:`~rlvr.envs.chat.ChatRenderer.observation_ids`), so nothing the policy sampled is
re-tokenised. A call that does not continue the episode (the program rewrote or dropped part of
the history) cannot be trained as one token sequence: it is an environment fault naming the
call and the first message that differs.

:func:`episode_from_calls` turns a session's calls into an :class:`~rlvr.envs.episodes.Episode`:
prompt = the first call's prompt; then each reply (loss mask 1, its log-probs) and the tokens
between it and the next call's reply (mask 0). Its ``tool_calls`` are the calls read out of its
replies plus the blocks that could not be read, which are its ``tool_errors`` (a reply with one
is an invalid action; the tool calls the program ran and that failed are the program's to
report, :class:`~rlvr.envs.harness.AgentOutcome`).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs.base import Message
from rlvr.envs.chat import ChatRenderer
from rlvr.envs.episodes import EnvFault, Episode


@dataclass
class Call:
    """One recorded chat call: its request messages, the prompt ids the server rendered for
    them, the reply's ids as sampled with their log-probs, whether it ended with a stop token,
    the reply's text as the program received it, and the tool calls the endpoint read out of
    it (when the request gave tools): (name, arguments), and how many blocks could not be read."""

    messages: list[Message]
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finished: bool
    text: str
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    tool_errors: int = 0


def _calls_of(message: Message) -> list[tuple[str, dict[str, Any]]] | None:
    """The (name, arguments) of an OpenAI message's ``tool_calls``, or None without any."""
    calls = message.get("tool_calls")
    if not calls:
        return None
    out = []
    for call in calls:
        function = call.get("function") or {}
        arguments = function.get("arguments") or "{}"
        try:
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            return [("", {})]
        out.append((str(function.get("name")), arguments))
    return out


def _same_reply(message: Message, call: Call) -> bool:
    """Whether ``message`` repeats the reply ``call`` got: its text, or the tool calls the
    endpoint read out of it."""
    if message.get("role") != "assistant":
        return False
    echoed = _calls_of(message)
    if echoed is not None:
        return echoed == call.tool_calls
    return _same(message, {"role": "assistant", "content": call.text})


def _same(a: Message, b: Message) -> bool:
    """Whether two chat messages are the same (role and content; a reply's content compared
    without surrounding whitespace, which clients often strip)."""
    if a.get("role") != b.get("role"):
        return False
    x, y = str(a.get("content") or ""), str(b.get("content") or "")
    return x == y or (a.get("role") == "assistant" and x.strip() == y.strip())


@dataclass
class Session:
    """The calls of one episode (see the module docstring); thread-safe."""

    name: str
    calls: list[Call] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def prompt_for(self, messages: list[Message], renderer: ChatRenderer) -> list[int]:
        """The prompt ids of a call with ``messages``: rendered for the first call, stitched
        onto the previous call for the next ones (raises :class:`EnvFault` when the messages
        do not continue the episode)."""
        with self._lock:
            if not self.calls:
                return renderer.prompt_ids(renderer.first_messages(messages))
            last = self.calls[-1]
            history = [*last.messages, {"role": "assistant", "content": last.text}]
            where = f"session {self.name!r}, call {len(self.calls) + 1}"
            for i, expected in enumerate(history):
                reply = i == len(history) - 1
                same = i < len(messages) and (
                    _same_reply(messages[i], last) if reply else _same(messages[i], expected)
                )
                if not same:
                    got = messages[i] if i < len(messages) else "nothing"
                    raise EnvFault(
                        f"{where}: its messages do not continue the episode at message {i} "
                        f"(expected {expected!r:.120}, got {got!r:.120}); an episode is trained "
                        "as one token sequence, so each call must repeat the history it was given"
                    )
            new = [
                {"role": m.get("role"), "content": str(m.get("content") or "")}
                for m in messages[len(history) :]
            ]
            if not new:
                raise EnvFault(f"{where}: no new message after the previous reply")
            observation = renderer.observation_ids(history, last.completion_ids, new)
            return [*last.prompt_ids, *last.completion_ids, *observation]

    def record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)


def episode_from_calls(calls: list[Call], reward: float, info: dict[str, Any]) -> Episode:
    """The episode of a session's calls (see the module docstring): its return is ``reward``
    (given at the last turn; the earlier turns get 0), ``info`` that turn's info; the
    transcript is the last call's messages and reply."""
    if not calls:
        raise EnvFault("the episode made no call to the model")
    episode = Episode(
        messages=[*calls[-1].messages, {"role": "assistant", "content": calls[-1].text}]
    )
    context = list(calls[0].prompt_ids)
    for k, call in enumerate(calls):
        if call.prompt_ids[: len(context)] != context:  # stitched prompts always extend
            raise EnvFault(f"call {k + 1} does not extend the episode's tokens")
        episode.add(call.prompt_ids[len(context) :], None)
        episode.add(call.completion_ids, call.logprobs)
        context = [*call.prompt_ids, *call.completion_ids]
        last = k == len(calls) - 1
        episode.turn_rewards.append(float(reward) if last else 0.0)
        episode.anchors.append(None)
        episode.infos.append(info if last else {})
        episode.tool_calls += len(call.tool_calls) + call.tool_errors
        episode.tool_errors += call.tool_errors
        episode.invalid_actions += int(call.tool_errors > 0)  # as a tool environment counts it
    episode.finished = calls[-1].finished
    episode.terminated = True
    return episode
