"""OpenEnv environments (Meta-PyTorch's ``openenv-core``: environments served over HTTP and
WebSocket) run as rlvr environments: ``env.name: openenv:<URL>`` of a running server, with
``task.name: openenv:<URL>`` (its problems are episode labels).

Install: ``pip install 'rlvr[openenv]'`` (``openenv-core``). An OpenEnv environment is a server:
``create_app(Environment, Action, Observation)``, locally (``uvicorn``, ``openenv serve``) or in
a container or a Hugging Face Space; clients talk to it over a WebSocket session
(``EnvClient``): ``reset(**kwargs)`` and ``step(action)`` answer ``(observation, reward,
done)``, where actions and observations are the environment's own pydantic models, sent as JSON.
rlvr speaks that protocol through OpenEnv's own ``GenericEnvClient`` (one WebSocket session per
episode) and needs none of the environment's Python classes:

* the action: the policy's text goes into one string field of the action, ``action_field``
  (default: the only required string field of the action schema the server publishes at
  ``/schema``);
* an observation is shown as one user message: its ``observation_field`` (default: the only
  string field of the observation schema), or, with no such field, its fields as JSON;
* ``reset(problem, seed)`` resets with ``seed`` (and ``reset_kwargs``); the reset's observation
  is the first user message (after the run's system prompt);
* a step's reward as given (None is 0), ``done`` is ``terminated`` (OpenEnv has no truncated
  flag), the observation's other fields are the step's ``info["openenv"]``; the session is
  closed when the episode ends. A session whose call was cut off (``env.step_timeout_s``: a
  frozen server) is not closed politely, which would wait on the server again: its client's
  pending tasks are cancelled and its socket dropped.

**MCP environments** (OpenEnv's ``MCPEnvironment``: tools of a FastMCP server, called with
``CallToolAction``; recognised by an action schema with ``tool_name`` and ``arguments``, or
``mcp: true``): the server's tools (``list_tools``, once per process) are the environment's
``tools``, shown to the policy by the chat template like any tool environment's, and each
``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` of a turn (Hermes format) is sent as a
``call_tool`` step. Each call's result (its text content, or ``Error: ...`` for the server's
error or the tool's own) is a ``tool`` message; the steps' rewards add up, and a step that says
``done`` ends the episode. A turn without a call is the policy's final answer and ends the
episode (an MCP environment scores through its tools, e.g. a ``submit`` tool). Calls that
cannot be parsed are answered with the error; ``info`` counts ``tool_calls`` and
``tool_errors`` as for rlvr's own tool environments.

A server serves as many sessions at once as its ``max_concurrent_envs``: at least
``rollout.prompts_per_step x rollout.group_size`` for a run's episodes to play side by side.
A server that goes away mid-episode is an environment fault (``env.on_error``).
"""

from __future__ import annotations

import asyncio
import json
from functools import cache
from typing import Any

from rlvr.data.base import Problem, with_system_prompt
from rlvr.envs.base import EnvError, Message, StepResult
from rlvr.envs.parsers import parse_hermes
from rlvr.envs.tools import Tool

INSTALL_HINT = "pip install 'rlvr[openenv]'  (the openenv-core package)"
SCHEMES = ("http://", "https://", "ws://", "wss://")
_SKIP = {"done", "reward", "metadata"}


def import_openenv_client() -> type:
    """OpenEnv's ``GenericEnvClient``, or an EnvError saying how to install it."""
    try:
        from openenv.core import GenericEnvClient
    except ImportError as err:
        raise EnvError(
            f"OpenEnv environments need the openenv-core package: {INSTALL_HINT}"
        ) from err
    return GenericEnvClient


@cache
def server_schema(url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The action and observation JSON schemas the server at ``url`` publishes (``/schema``),
    fetched once per process."""
    import httpx

    http = url.replace("ws://", "http://", 1).replace("wss://", "https://", 1).rstrip("/")
    try:
        response = httpx.get(f"{http}/schema", timeout=timeout_s)
        response.raise_for_status()
        schema = response.json()
    except (httpx.HTTPError, ValueError) as err:
        raise EnvError(
            f"OpenEnv server {url}: no schema at {http}/schema ({type(err).__name__}: {err}); is "
            "an OpenEnv server running there?"
        ) from err
    if not isinstance(schema, dict) or not {"action", "observation"} <= set(schema):
        raise EnvError(f"OpenEnv server {url}: /schema gave {schema!r:.200}, not OpenEnv schemas")
    return schema


def is_mcp(action_schema: dict[str, Any]) -> bool:
    """Whether an action schema is OpenEnv's ``CallToolAction`` (an MCP environment's)."""
    return {"tool_name", "arguments"} <= set(action_schema.get("properties", {}))


def _on_server(**arguments: Any) -> Any:
    raise EnvError("an MCP tool runs on the OpenEnv server: it is called through the env's step")


@cache
def server_tools(url: str, message_timeout_s: float = 60.0) -> tuple[Tool, ...]:
    """The tools of the MCP environment at ``url`` (its ``list_tools``), fetched once per
    process, as rlvr tools (their calls go to the server)."""
    client = import_openenv_client()(base_url=url, message_timeout_s=message_timeout_s).sync()
    try:
        client.connect()
        listed = client.step({"type": "list_tools"}).observation
    except Exception as err:  # noqa: BLE001 - any client failure: the server is not usable
        raise EnvError(
            f"OpenEnv server {url}: list_tools failed ({type(err).__name__}: {err})"
        ) from err
    finally:
        client.close()
    specs = listed.get("tools") if isinstance(listed, dict) else None
    if not isinstance(specs, list) or not specs:
        raise EnvError(f"OpenEnv server {url}: list_tools gave no tools ({listed!r:.200})")
    return tuple(
        Tool(t["name"], t.get("description") or "", t.get("input_schema") or {}, _on_server)
        for t in specs
    )


def tool_text(observation: dict[str, Any]) -> tuple[str, bool]:
    """A ``call_tool`` observation as the text of a tool message, and whether the call
    succeeded: the server's error, else the result's text content (the tool's own error
    marked), else its data as JSON."""
    error = observation.get("error")
    if error:
        message = error.get("message", error) if isinstance(error, dict) else error
        return f"Error: {message}", False
    result = observation.get("result")
    if not isinstance(result, dict):
        return ("" if result is None else str(result)), True
    parts = [c.get("text", "") for c in result.get("content") or () if isinstance(c, dict)]
    text = "\n".join(p for p in parts if p) or json.dumps(result.get("data"))
    if result.get("is_error"):
        return f"Error: {text}", False
    return text, True


def string_fields(schema: dict[str, Any], required_only: bool) -> list[str]:
    """The string properties of a JSON schema (its required ones when ``required_only``),
    without OpenEnv's own (done, reward, metadata)."""
    required = set(schema.get("required", ()))
    return [
        name
        for name, prop in schema.get("properties", {}).items()
        if prop.get("type") == "string"
        and name not in _SKIP
        and (name in required or not required_only)
    ]


def _pick(fields: list[str], what: str, key: str, url: str, schema: dict[str, Any]) -> str:
    if len(fields) == 1:
        return fields[0]
    names = [n for n in schema.get("properties", {}) if n not in _SKIP]
    raise EnvError(
        f"OpenEnv server {url}: its {what} has {len(fields)} string fields ({', '.join(fields)}) "
        f"among {names}; name the one for the policy's text with env.params.{key}"
    )


class OpenEnvEnv:
    """An OpenEnv server's environment as an rlvr environment (see the module docstring).

    Args:
        env_id: the server's URL, e.g. "http://127.0.0.1:8000".
        system_prompt: the run's ``model.system_prompt`` (first in the chat).
        action_field: the action's field the policy's text goes in (default: read from the
            server's schema).
        observation_field: the observation's field shown to the policy (default: its only
            string field; none: all its fields as JSON).
        reset_kwargs: more keyword arguments of every reset (e.g. a difficulty).
        message_timeout_s: seconds OpenEnv's client waits for one answer (rlvr's own limit,
            ``env.step_timeout_s``, applies as well).
        mcp: whether the server is an MCP environment (None: read from its action schema).
    """

    def __init__(
        self,
        env_id: str,
        system_prompt: str | None = None,
        action_field: str | None = None,
        observation_field: str | None = None,
        reset_kwargs: dict[str, Any] | None = None,
        message_timeout_s: float = 60.0,
        mcp: bool | None = None,
    ) -> None:
        self._client_type = import_openenv_client()
        if not env_id.startswith(SCHEMES):
            raise EnvError(
                f"openenv:{env_id}: expected the URL of a running OpenEnv server, e.g. "
                "openenv:http://127.0.0.1:8000"
            )
        self.url, self.system_prompt = env_id.rstrip("/"), system_prompt
        schema = server_schema(self.url)
        action, observation = schema["action"], schema["observation"]
        self.mcp = is_mcp(action) if mcp is None else mcp
        self.tools = list(server_tools(self.url, message_timeout_s)) if self.mcp else []
        self.tool_format = "hermes"
        self.action_field = action_field or (
            "tool_name"
            if self.mcp
            else _pick(string_fields(action, True), "action", "action_field", self.url, action)
        )
        if self.action_field not in action.get("properties", {}):
            raise EnvError(
                f"OpenEnv server {self.url}: its action has no field {self.action_field!r} "
                f"(fields: {', '.join(action.get('properties', {}))})"
            )
        shown = string_fields(observation, False)
        self.observation_field = observation_field or (shown[0] if len(shown) == 1 else None)
        self.reset_kwargs = dict(reset_kwargs or {})
        self.message_timeout_s = message_timeout_s
        self._client: Any = None
        self._calling = False  # a client call has not returned (cut off by a deadline)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The client's ``method``, marked as running until it returns."""
        self._calling = True
        result = getattr(self._client, method)(*args, **kwargs)
        self._calling = False
        return result

    def text_of(self, observation: Any) -> str:
        """An observation as the text the policy is shown (see the module docstring)."""
        if not isinstance(observation, dict):
            return str(observation)
        if self.observation_field is not None:
            return str(observation.get(self.observation_field, ""))
        return json.dumps(observation, sort_keys=True)

    def reset(self, problem: Problem, seed: int) -> list[Message]:
        """A new WebSocket session, reset with ``seed`` (``problem`` is not read: the
        episode is a function of the server's environment and the seed)."""
        self.close()
        client = self._client_type(base_url=self.url, message_timeout_s=self.message_timeout_s)
        self._client = client.sync()
        self._call("connect")
        result = self._call("reset", seed=seed, **self.reset_kwargs)
        first = [{"role": "user", "content": self.text_of(result.observation)}]
        return with_system_prompt(first, self.system_prompt)

    def step(self, action_text: str) -> StepResult:
        """The server's step on ``{action_field: action_text}`` (see the module docstring)."""
        if self._client is None:
            raise EnvError(f"OpenEnv server {self.url}: no episode in progress; call reset first")
        if self.mcp:
            return self._tool_step(action_text)
        result = self._call("step", {self.action_field: action_text})
        observation = result.observation if isinstance(result.observation, dict) else {}
        done = bool(result.done)
        info = {"openenv": {k: v for k, v in observation.items() if k != self.observation_field}}
        messages = [] if done else [{"role": "user", "content": self.text_of(result.observation)}]
        if done:
            self.close()
        return StepResult(
            messages,
            reward=0.0 if result.reward is None else float(result.reward),
            terminated=done,
            info=info,
        )

    def _tool_step(self, action_text: str) -> StepResult:
        """An MCP environment's turn: each tool call of ``action_text`` as a ``call_tool`` step
        (see the module docstring)."""
        parsed = parse_hermes(action_text)
        if not parsed.calls and not parsed.errors:  # the final answer
            self.close()
            return StepResult([], 0.0, terminated=True, info={"tool_calls": 0})
        messages: list[Message] = []
        reward, done, errors, last = 0.0, False, len(parsed.errors), {}
        for call in parsed.calls:
            payload = {"type": "call_tool", "tool_name": call.name, "arguments": call.arguments}
            result = self._call("step", payload)
            last = result.observation if isinstance(result.observation, dict) else {}
            text, ok = tool_text(last)
            errors += not ok
            messages.append({"role": "tool", "content": text})
            reward += 0.0 if result.reward is None else float(result.reward)
            if result.done:
                done = True
                break
        messages += [{"role": "tool", "content": f"Error: {e}"} for e in parsed.errors]
        info = {
            "tool_calls": len(parsed.calls) + len(parsed.errors),
            "tool_errors": errors,
            "action_valid": errors == 0,
            "openenv": {k: v for k, v in last.items() if k != "result"},
        }
        if done:
            self.close()
        return StepResult([] if done else messages, reward, terminated=done, info=info)

    def close(self) -> None:
        """End the WebSocket session (the episode loop calls it when the episode is over);
        one whose last call was cut off is dropped (see the module docstring)."""
        client, self._client = self._client, None
        if client is None:
            return
        cut_off, self._calling = self._calling, False
        if not cut_off:
            try:  # a polite close, bounded: the server may freeze after its last answer
                _on_loop(client, client.async_client.close(), CLOSE_WAIT_S)
                client._stop_loop()
                return
            except Exception:  # noqa: BLE001 - it did not close in time: dropped below
                pass
        _drop(client)


CLOSE_WAIT_S = 2.0
"""Seconds a session's polite close may take before the session is dropped."""


def _on_loop(client: Any, coro: Any, timeout_s: float) -> Any:
    """``coro`` run on a sync client's event loop, waited for at most ``timeout_s``."""
    loop = getattr(client, "_loop", None)
    if loop is None or not loop.is_running():
        coro.close()
        return None
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=timeout_s)


def _drop(client: Any) -> None:
    """Cancel the tasks of a sync client's event loop (a cut-off call's among them), drop its
    socket and stop the loop, without waiting on the server. Reads openenv-core 0.3's
    ``SyncEnvClient`` internals (``_loop``, ``_stop_loop``) and its client's ``_ws``; the loop
    is stopped whatever happens (even a deadline landing here)."""

    async def cancel_all() -> None:
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        ws = getattr(client.async_client, "_ws", None)
        if ws is not None and ws.transport is not None:
            ws.transport.abort()
            await asyncio.sleep(0)  # the transport's connection_lost runs before the loop stops

    try:
        _on_loop(client, cancel_all(), 1.0)
    except Exception:  # noqa: BLE001 - the session is being thrown away either way
        pass
    finally:
        client._stop_loop()
