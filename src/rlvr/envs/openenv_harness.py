"""OpenEnv's own agent loop played against rlvr's recording endpoint: ``env.name:
openenv:<URL>`` of an MCP environment with ``env.params.harness: openenv``.

openenv-core ships a white-box harness (``openenv.core.harness.MCPHarnessAdapter``): given a
``ResourceSession`` (the episode's first messages, its tools, ``call_tool``) and a *model step*
(messages and tools in, the next assistant message out), it runs the tool-calling loop itself:
each reply's tool calls run on the session and come back as ``tool`` messages, until a reply
calls no tool or a tool result says done (its own reply limit is set out of reach: rlvr's
``env.max_turns`` and ``env.max_episode_tokens`` end an episode, truncated).
:class:`OpenEnvHarnessProgram` plays one episode with it (an agent program,
:mod:`rlvr.envs.harness`):

* the session is OpenEnv's ``StepEnvSessionAdapter`` over a WebSocket session of the server
  (reset with the episode seed and ``reset_kwargs``; each tool call one ``call_tool`` step); its
  first message is the reset observation as a user message, after the run's system prompt;
* the model step is OpenEnv's own ``OpenAIClient`` at the episode's session of rlvr's recording
  endpoint: the tools go out as OpenAI ``tools``, the reply's calls come back as ``tool_calls``,
  and the episode is built from the ids the policy sampled, never from returned text;
* a tool result's text is what rlvr's own MCP mapping shows (``Error: ...`` for a failure,
  counted in ``tool_errors``); its reward is the step's; a call of a tool the server does not
  have is answered with an error (OpenEnv's session would raise, ending the episode as a fault);
* the episode's reward is OpenEnv's rule (``_resolve_env_reward``): the last tool result that
  carries a reward, else the session's ``verify``; 0 when the environment gave none (a first
  reply without a call).
"""

from __future__ import annotations

import asyncio
from typing import Any

from rlvr.data.base import Problem, with_system_prompt
from rlvr.envs.base import EnvError, Message
from rlvr.envs.harness import AgentOutcome, Endpoint
from rlvr.envs.openenv import OpenEnvEnv, tool_text
from rlvr.envs.tools import unknown_tool

HARNESSES = ("openenv",)
HARNESS_TURNS = 10_000
"""The harness's own limit on replies, out of reach: rlvr's ``env.max_turns`` and
``env.max_episode_tokens`` end the episode first (an empty reply, the episode truncated)."""


def openenv_environment(
    env_id: str, system_prompt: str | None = None, harness: str | None = None, **params: Any
) -> Any:
    """The environment of ``env.name: openenv:<URL>``: an :class:`OpenEnvEnv` (``params`` are
    its options), or with ``harness: openenv`` an :class:`OpenEnvHarnessProgram` playing it
    with OpenEnv's own agent loop."""
    if harness is not None and harness not in HARNESSES:
        raise EnvError(f"openenv:{env_id}: harness {harness!r}; expected one of {HARNESSES}")
    env = OpenEnvEnv(env_id, system_prompt, **params)
    return env if harness is None else OpenEnvHarnessProgram(env)


class OpenEnvHarnessProgram:
    """Plays an MCP environment's episode with OpenEnv's ``MCPHarnessAdapter`` (see the module
    docstring).

    Args:
        env: the server's environment as rlvr maps it (its URL, tools, observation field,
            reset options, system prompt and message timeout are used).
    """

    def __init__(self, env: OpenEnvEnv) -> None:
        if not env.mcp:
            raise EnvError(
                f"openenv:{env.url}: harness: openenv plays an MCP environment (tools called "
                "with CallToolAction); this server's action has no tool_name/arguments"
            )
        from openenv.core.env_server.mcp_types import Tool

        self.env = env
        self.specs = [
            Tool(name=t.name, description=t.description, input_schema=t.parameters)
            for t in env.tools
        ]

    def play(self, problem: Problem, seed: int, endpoint: Endpoint) -> AgentOutcome:
        from openenv.core.harness import (
            HarnessRunLimits,
            MCPHarnessAdapter,
            StepEnvSessionAdapter,
            ToolResult,
        )

        env, failed = self.env, [0]

        def first_messages(result: Any, task: Any) -> list[Message]:
            shown = [{"role": "user", "content": env.text_of(result.observation)}]
            return with_system_prompt(shown, env.system_prompt)

        def tool_result(name: str, arguments: dict, result: Any, state: Any) -> Any:
            observation = result.observation if isinstance(result.observation, dict) else {}
            text, ok = tool_text(observation)
            failed[0] += not ok
            metadata = {} if result.reward is None else {"reward": float(result.reward)}
            return ToolResult(text, bool(result.done), metadata, None if ok else text)

        client = env._client_type(base_url=env.url, message_timeout_s=env.message_timeout_s)
        session = StepEnvSessionAdapter(
            client,
            task=problem.id,
            seed=seed,
            tool_specs=self.specs,
            action_builder=lambda name, args: {
                "type": "call_tool",
                "tool_name": name,
                "arguments": args,
            },
            initial_messages_builder=first_messages,
            tool_result_builder=tool_result,
            reset_kwargs=env.reset_kwargs,
        )
        served, names = session.call_tool, {t.name for t in self.specs}

        def call_tool(name: str, arguments: dict) -> Any:  # OpenEnv's raises KeyError
            if name in names:
                return served(name, arguments)
            failed[0] += 1
            text = f"Error: {unknown_tool(name, names)}"
            return ToolResult(text, False, {}, text)

        session.call_tool = call_tool  # type: ignore[method-assign]
        try:
            limits = HarnessRunLimits(max_turns=HARNESS_TURNS)
            rollout = MCPHarnessAdapter().run_white_box(_model_step(endpoint), session, limits)
            verify = session.verify(rollout.messages, {"done": rollout.done})
        finally:
            session.close()
        info = {
            "tool_errors": failed[0],
            "openenv_metrics": dict(rollout.metrics),
            "openenv_verify": dict(verify.metrics),
        }
        return AgentOutcome(_env_reward(rollout, verify), info)


def _model_step(endpoint: Endpoint) -> Any:
    """OpenEnv's model step: its ``OpenAIClient`` at ``endpoint`` (a fresh client per call,
    each call run on its own event loop)."""
    from openai import AsyncOpenAI
    from openenv.core.harness import ModelStepResult
    from openenv.core.llm_client import OpenAIClient

    def step(messages: list[Message], tools: list[Any], sampling: dict) -> Any:
        async def call() -> Any:
            client = OpenAIClient("http://unused", 0, endpoint.model)
            # its OpenAI client at the episode's URL, never retrying: a call sent again would
            # not continue the recorded episode
            client._client = AsyncOpenAI(
                base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0
            )
            try:
                specs = [
                    {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                    for t in tools
                ]
                return await client.complete_with_tools(messages, specs)
            finally:
                await client._client.close()

        return ModelStepResult(response=asyncio.run(call()))

    return step


def _env_reward(rollout: Any, verify: Any) -> float:
    """OpenEnv's reward of a harness rollout: the last tool result with a reward, else the
    verify's, else 0 (the environment gave none)."""
    for entry in reversed(rollout.tool_trace):
        reward = entry.result.metadata.get("reward")
        if reward is not None:
            return float(reward)
    return 0.0 if verify.env_reward is None else float(verify.env_reward)
