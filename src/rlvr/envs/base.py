"""The environment protocol: an agent task as a small gym-like object (GEM, SkyRL-gym style).

An episode starts with ``reset(problem, seed) -> messages`` (the chat the policy is first prompted
with) and goes on with ``step(action_text) -> StepResult`` for every turn the policy takes: the
environment reads the policy's text (a tool call, a guess, an answer) and answers with new
messages (a tool result, feedback), a reward for that turn, and whether the episode is over.
One environment object runs one episode at a time; the trainer makes one per episode (G per
problem) with ``Environment(**params)``.

A plain task is a one-step environment: reset returns the problem's chat, the first step scores
the answer and terminates (:class:`rlvr.envs.single_turn.SingleTurnEnv`).

``info`` of a step may carry:

* ``"anchor"``: a hashable key of the state the action was taken in (GiGPO's anchor state:
  turns of a problem's episodes with equal anchors form a step-level group);
* ``"action_valid"``: False when the action could not be used (a malformed tool call, a tool
  that raised): counted in ``tools/invalid_frac``;
* ``"tool_calls"``, ``"tool_errors"``: how many tool calls the action made, and how many failed.
"""

from __future__ import annotations

import difflib
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rlvr.data.base import Problem
from rlvr.errors import RlvrError
from rlvr.user_code import import_user_module

Message = dict[str, Any]  # {"role": "user" | "tool" | "system" | "assistant", "content": str}


class EnvError(RlvrError):
    """An environment that cannot be loaded or broke its protocol (names the env and the rule)."""


@dataclass
class StepResult:
    """What an environment answers to one action.

    Attributes:
        messages: the new messages appended to the chat (role "user" or "tool"); may be empty
            when the episode ends.
        reward: this turn's reward (finite float).
        terminated: the episode reached an end state (solved, failed, out of guesses).
        truncated: the environment cut the episode short (its own step limit).
        info: ``anchor``, ``action_valid``, ``tool_calls``, ``tool_errors``, anything else the
            environment wants logged (see the module docstring).
    """

    messages: list[Message]
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def anchor(self) -> Hashable | None:
        return self.info.get("anchor")


@runtime_checkable
class Environment(Protocol):
    """An agent environment (see the module docstring)."""

    def reset(self, problem: Problem, seed: int) -> list[Message]:
        """Start an episode on ``problem``; ``seed`` names its randomness (an int).
        Returns the first messages (system?, user)."""

    def step(self, action_text: str) -> StepResult:
        """Take the policy's text of one turn; answer with a :class:`StepResult`."""


def plain(value: Any) -> Any:
    """``value`` (a step's ``info``, whatever an environment put in it) as JSON data: dicts,
    lists, strings, numbers, bools and None as they are (tuples as lists, keys as strings),
    numpy/torch scalars as numbers, anything else as its ``str``. It can then be logged and sent
    between processes whatever the environment returned."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:
        return plain(item())
    return str(value)


def unknown_environment(ecosystem: str, env_id: str, known: Iterable[str]) -> EnvError:
    """The error for an id an ecosystem (textarena, GEM) does not register, with close
    matches."""
    close = difflib.get_close_matches(env_id, list(known), n=5, cutoff=0.5)
    hint = f"; close matches: {', '.join(close)}" if close else ""
    return EnvError(f"{ecosystem} has no environment {env_id!r}{hint}")


def load_environment_class(spec: str) -> type:
    """The environment class named ``module:Class`` (the current directory is on the path, as for
    user rewards). Raises :class:`EnvError` naming what was not found."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise EnvError(f"env {spec!r}: expected a built-in name or 'module:Class'")
    module = import_user_module(module_name, f"env {spec!r}", EnvError)
    cls = getattr(module, attr, None)
    if not isinstance(cls, type):
        raise EnvError(f"env {spec!r}: module {module_name!r} has no class {attr!r}")
    if callable(getattr(cls, "play", None)):  # an agent program (rlvr.envs.harness)
        return cls
    missing = [m for m in ("reset", "step") if not callable(getattr(cls, m, None))]
    if missing:
        raise EnvError(
            f"env {spec!r}: {attr} has no {' or '.join(missing)} method; an environment needs "
            "reset(problem, seed) -> messages and step(action_text) -> StepResult (or, for a "
            "program that calls the model itself, play(problem, seed, endpoint) -> AgentOutcome)"
        )
    return cls
