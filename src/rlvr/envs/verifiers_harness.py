"""verifiers environments that run their own episodes (their ``Env.run``, user turns the
environment plays) played against rlvr's recording endpoint: ``env.name: verifiers:<taskset>``
with ``env.params.harness: rlvr``.

verifiers 0.4 runs an episode as an agent *harness* (a program) whose model calls go through its
interception server to a model endpoint; its stock harnesses are programs ``uv`` installs from
PyPI and starts in a subprocess. :class:`RlvrHarness` is a harness that runs in this process
instead (a harness may, as long as every model call goes through the interception endpoint it
is given): chat calls on the messages verifiers resolves (its prompt, or the whole conversation
when the environment resumes the agent with a user turn). The interception server relays each
call to rlvr's recording endpoint (:mod:`rlvr.envs.harness`), so the episode is built from the
ids the policy sampled; the reward is the trace's (the task's rewards).

Tools: where a task gives MCP tool servers (its ``toolsets``, which verifiers starts per
episode and passes as ``mcp_urls``), the harness lists their tools (verifiers' own
``connect_mcp``) and sends them with each call as OpenAI ``tools``; each tool call of a reply is
run on its server (``call_mcp``) and answered by a ``tool`` message, and the next call carries
the conversation on, until a reply calls no tool or ``max_tool_rounds`` calls were made. A
failed call is answered with ``Error: ...``, as rlvr's own tool environments do, and counted in
the episode's ``tool_errors`` (the harness runs in the episode's own event loop, so
:class:`VerifiersProgram` reads its count through a context variable).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from contextlib import AsyncExitStack
from contextvars import ContextVar
from typing import Any

from openai import AsyncOpenAI
from verifiers.v1.clients import ModelContext
from verifiers.v1.configs.harness import HarnessConfig
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.harness import Harness
from verifiers.v1.harnesses.utils.mcp import connect_mcp, mcp_content_to_chat_content
from verifiers.v1.runtimes import ProgramResult, Runtime
from verifiers.v1.task import TaskData
from verifiers.v1.trace import Trace

from rlvr.data.base import Problem
from rlvr.envs.harness import AgentOutcome, Endpoint
from rlvr.envs.tools import unknown_tool

HARNESS_ID = "rlvr_harness"
"""The id verifiers loads :class:`RlvrHarness` by: it imports a harness as a top-level module (or
one of its own), so this module is also known under that name."""
KEY_VARIABLE = "RLVR_ENDPOINT_KEY"
sys.modules.setdefault(HARNESS_ID, sys.modules[__name__])
_FAILED_TOOL_CALLS: ContextVar[list[int] | None] = ContextVar("failed_tool_calls", default=None)
"""The episode's count of failed tool calls, set by :meth:`VerifiersProgram.play`."""


class RlvrHarnessConfig(HarnessConfig):
    """``max_tool_rounds``: the most chat calls of one launch when replies call tools."""

    max_tool_rounds: int = 16


class RlvrHarness(Harness[RlvrHarnessConfig]):
    """Chat calls in this process, tools on the task's MCP servers (see the module
    docstring)."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    SUPPORTS_MCP = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: ModelContext,
        trace: Trace,
        runtime: Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: TaskData,
    ) -> ProgramResult:
        system_prompt, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = []
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages += [message_to_wire(m) for m in prompt]
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
        async with AsyncExitStack() as stack:
            stack.push_async_callback(client.close)
            tools: list[dict[str, Any]] = []
            dispatch: dict[str, Any] = {}
            servers: dict[str, Any] = {}
            if mcp_urls:
                timeout = self.config.tool_timeout
                servers_config = {n: {"url": u, "timeout": timeout} for n, u in mcp_urls.items()}
                tools, dispatch, servers = await connect_mcp({"mcpServers": servers_config}, stack)
            for _ in range(self.config.max_tool_rounds):
                extra = {"tools": tools} if tools else {}
                completion = await client.chat.completions.create(
                    model=ctx.model, messages=messages, **extra
                )
                reply = completion.choices[0].message.model_dump(exclude_none=True)
                messages.append(reply)
                if not reply.get("tool_calls"):
                    break
                for call in reply["tool_calls"]:
                    content, ok = await _tool_result(servers, dispatch, call["function"])
                    failed = _FAILED_TOOL_CALLS.get()
                    if failed is not None and not ok:
                        failed[0] += 1
                    messages.append(
                        {"role": "tool", "tool_call_id": call["id"], "content": content}
                    )
        return ProgramResult(exit_code=0, stdout=messages[-1].get("content") or "", stderr="")


async def _tool_result(
    servers: Any, dispatch: dict[str, Any], function: dict[str, Any]
) -> tuple[str, bool]:
    """The text of one tool call's result on its MCP server and True, or ``Error: ...`` and
    False: an unknown tool, arguments that are not a JSON object, or the call failing."""
    name = function.get("name", "")
    if name not in dispatch:
        return f"Error: {unknown_tool(name, dispatch)}", False
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError:
        return f"Error: the arguments of {name!r} are not valid JSON", False
    if not isinstance(arguments, dict):
        return f"Error: the arguments of {name!r} must be a JSON object", False
    server, raw = dispatch[name]
    try:  # verifiers' call_mcp, keeping the result's is_error (a tool that raised)
        result = await servers[server].run(lambda client: client.call_tool(raw, arguments))
    except Exception as err:  # noqa: BLE001 - the tool's failure is the model's to read
        return f"Error: {type(err).__name__}: {err}", False
    content = mcp_content_to_chat_content(result.content)
    if not isinstance(content, str):
        content = "\n".join(p.get("text", "") for p in content if p.get("type") == "text")
    if getattr(result, "is_error", False):
        return f"Error: {content}", False
    return content, True


__all__ = ["RlvrHarness"]


class VerifiersProgram:
    """A verifiers taskset's episode, played by its environment with :class:`RlvrHarness`
    against rlvr's endpoint (an agent program: :mod:`rlvr.envs.harness`).

    Args:
        env_id: the taskset's id (its module may also export the ``vf.Env`` that plays it).
        task: the run's :class:`~rlvr.data.verifiers_tasks.VerifiersTask` (the same id).
    """

    def __init__(self, env_id: str, task: Any) -> None:
        from verifiers.v1.utils.loaders import env_config_type, resolve_env_config

        self.vf, self.task = task.vf, task
        kind = env_config_type(env_id, "")  # the taskset's own Env, or the single-agent one
        roles = [
            name
            for name, field in kind.model_fields.items()
            if isinstance(field.annotation, type)
            and issubclass(field.annotation, self.vf.AgentConfig)
        ]
        agent = {"harness": {"id": HARNESS_ID}, "runtime": {"type": "subprocess"}}
        config = resolve_env_config({"taskset": {"id": env_id}, **dict.fromkeys(roles, agent)})
        self.env = self.vf.load_environment(config)

    def play(self, problem: Problem, seed: int, endpoint: Endpoint) -> AgentOutcome:
        vf_task = self.task.tasks[problem.id]
        os.environ.setdefault(KEY_VARIABLE, endpoint.api_key)
        client = self.vf.EvalClientConfig(base_url=endpoint.base_url, api_key_var=KEY_VARIABLE)
        ctx = self.vf.ModelContext(model=endpoint.model, client=client)

        failed = [0]

        async def run() -> Any:
            _FAILED_TOOL_CALLS.set(failed)  # seen by the harness's tasks, made from this one
            async with self.env.serving():
                return await self.env.run_episode(vf_task, ctx)

        episode = asyncio.run(run())
        errors = [f"{e.type}: {e.message}" for e in episode.errors]
        errors += [f"{e.type}: {e.message}" for t in episode.traces for e in t.errors]
        if errors:
            raise RuntimeError(f"the verifiers episode failed: {'; '.join(errors)[:500]}")
        trace = episode.traces[-1]
        rewards = {k: float(r.score) for k, r in trace.rewards.items()}
        info = {
            "verifiers_rewards": rewards,
            "verifiers_stop": str(trace.stop_condition),
            "tool_errors": failed[0],
        }
        return AgentOutcome(float(trace.reward), info)
