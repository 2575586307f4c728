"""verifiers environments that run their own episodes (their ``Env.run``, user turns the
environment plays) played against rlvr's recording endpoint: ``env.name: verifiers:<taskset>``
with ``env.params.harness: rlvr``.

verifiers 0.4 runs an episode as an agent *harness* (a program) whose model calls go through its
interception server to a model endpoint; its stock harnesses are programs ``uv`` installs from
PyPI and starts in a subprocess. :class:`RlvrHarness` is a harness that runs in this process
instead (a harness may, as long as every model call goes through the interception endpoint it
is given): one chat call per launch, on the messages verifiers resolves (its prompt, or the
whole conversation when the environment resumes the agent with a user turn). The interception
server relays each call to rlvr's recording endpoint (:mod:`rlvr.envs.harness`), so the episode
is built from the ids the policy sampled; the reward is the trace's (the task's rewards).
The harness does not connect MCP tool servers yet: tasksets whose tasks give MCP tools do not
run this way (the endpoint itself takes OpenAI tool calls).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from openai import AsyncOpenAI
from verifiers.v1.clients import ModelContext
from verifiers.v1.configs.harness import HarnessConfig
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.harness import Harness
from verifiers.v1.runtimes import ProgramResult, Runtime
from verifiers.v1.task import TaskData
from verifiers.v1.trace import Trace

from rlvr.data.base import Problem
from rlvr.envs.harness import AgentOutcome, Endpoint

HARNESS_ID = "rlvr_harness"
"""The id verifiers loads :class:`RlvrHarness` by: it imports a harness as a top-level module (or
one of its own), so this module is also known under that name."""
KEY_VARIABLE = "RLVR_ENDPOINT_KEY"
sys.modules.setdefault(HARNESS_ID, sys.modules[__name__])


class RlvrHarnessConfig(HarnessConfig):
    """No options beyond verifiers' own."""


class RlvrHarness(Harness[RlvrHarnessConfig]):
    """One chat call per launch, in this process (see the module docstring)."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    SUPPORTS_MCP = False
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
        try:
            reply = await client.chat.completions.create(model=ctx.model, messages=messages)
        finally:
            await client.close()
        return ProgramResult(exit_code=0, stdout=reply.choices[0].message.content or "", stderr="")


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

        async def run() -> Any:
            async with self.env.serving():
                return await self.env.run_episode(vf_task, ctx)

        episode = asyncio.run(run())
        errors = [f"{e.type}: {e.message}" for e in episode.errors]
        errors += [f"{e.type}: {e.message}" for t in episode.traces for e in t.errors]
        if errors:
            raise RuntimeError(f"the verifiers episode failed: {'; '.join(errors)[:500]}")
        trace = episode.traces[-1]
        rewards = {k: float(r.score) for k, r in trace.rewards.items()}
        info = {"verifiers_rewards": rewards, "verifiers_stop": str(trace.stop_condition)}
        return AgentOutcome(float(trace.reward), info)
