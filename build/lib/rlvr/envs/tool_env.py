"""A tool-using environment: the policy calls tools until it gives its final answer.

Each turn the policy's text is parsed in the environment's ``tool_format``
(:mod:`rlvr.envs.parsers`). Tool calls are run (:func:`rlvr.envs.tools.call_tool`: a timeout per
call, errors returned as text) and their results come back as ``tool`` messages; a malformed call
or a tool that fails is answered with the error, marks the action invalid and is counted
(``info["tool_errors"]``). A turn without a call is the final answer: it ends the episode and is
scored by the task's verifier (``task.score``, which reads ``Answer: ...`` or, without it, the
last number).

The anchor state of a turn (GiGPO) is the list of tool results (and errors) so far: episodes
whose calls returned the same results stand in the same state.

Call formats: ``hermes`` passes JSON arguments; ``action`` (``Action: name[text]``) passes one
text argument, so every tool of an ``action`` environment must take at most one parameter
(checked when the environment is built).

Worked examples (``examples``): exchanges put in every episode's chat before the problem, the
in-context demonstrations of ReAct-style prompting (Yao et al. 2023), which a small model
follows far more readily than a description of the call format. Each is a list of messages:
``{"role": "user" | "assistant" | "tool", "content": ...}``, where an assistant message may give
``"tool_call": {"name", "arguments"}`` instead of a content (written in the environment's call
format) and a tool message without a content gets the tool's real result for the call before
it. They are part of the prompt: the policy's actions and the logs' turns start after them.
"""

from __future__ import annotations

from typing import Any

from rlvr.answers import numeric_reward
from rlvr.data.base import Problem, Task
from rlvr.envs.base import EnvError, Message, StepResult
from rlvr.envs.parsers import PARSERS, format_call
from rlvr.envs.tools import Tool, ToolCall, action_parameters, call_tool


class ToolEnv:
    """Tools, a call format and a verifier (see the module docstring).

    Args:
        tools: the tools the policy may call.
        tool_format: ``hermes`` or ``action`` (:data:`rlvr.envs.parsers.PARSERS`).
        task: the task whose ``score`` judges the final answer (None: numeric match with the
            problem's answer).
        system_prompt: the system message of every episode (None: the template's default).
        tool_reward: reward of a turn whose calls all succeed (0: the outcome alone).
        examples: worked examples put before the problem (see the module docstring).
    """

    def __init__(
        self,
        tools: list[Tool],
        tool_format: str = "hermes",
        task: Task | None = None,
        system_prompt: str | None = None,
        tool_reward: float = 0.0,
        examples: list[list[dict[str, Any]]] | None = None,
    ) -> None:
        if tool_format not in PARSERS:
            raise ValueError(f"tool_format {tool_format!r}: expected one of {sorted(PARSERS)}")
        for tool in tools if tool_format == "action" else ():
            names = action_parameters(tool)
            if len(names) > 1:
                raise EnvError(
                    f"tool {tool.name!r} takes {len(names)} parameters ({', '.join(names)}), but "
                    "tool_format action passes one text argument (Action: name[text]); use "
                    "tool_format: hermes (JSON arguments) or give the tool one parameter"
                )
        self.tools = tools
        self.by_name = {t.name: t for t in tools}
        self.tool_format = tool_format
        self.task = task
        self.system_prompt = system_prompt
        self.tool_reward = tool_reward
        self.calls: list[str] = []
        self.examples = [m for i, e in enumerate(examples or []) for m in self._worked(e, i)]

    def _worked(self, example: Any, index: int) -> list[Message]:
        """One worked example's messages: calls written in the call format, missing tool
        results filled in by running the tool (see the module docstring)."""
        where = f"examples[{index}]"
        if not isinstance(example, list) or not example:
            raise EnvError(f"{where}: expected a non-empty list of messages, got {example!r:.100}")
        out: list[Message] = []
        call: ToolCall | None = None
        for j, message in enumerate(example):
            role = message.get("role") if isinstance(message, dict) else None
            if role not in ("user", "assistant", "tool"):
                raise EnvError(f"{where}[{j}]: expected a user, assistant or tool message")
            if role == "assistant" and "tool_call" in message:
                spec = message["tool_call"]
                call = ToolCall(spec.get("name", ""), dict(spec.get("arguments", {})))
                if call.name not in self.by_name:
                    raise EnvError(
                        f"{where}[{j}]: no tool {call.name!r} ({', '.join(self.by_name)})"
                    )
                out.append({"role": role, "content": format_call(call, self.tool_format)})
                continue
            if role == "tool" and "content" not in message:
                if call is None:
                    raise EnvError(f"{where}[{j}]: a tool message without content follows no call")
                outcome = call_tool(self.by_name, call)
                if not outcome.ok:
                    raise EnvError(f"{where}[{j}]: the example's call failed: {outcome.text}")
                out.append({"role": role, "content": outcome.text})
                continue
            out.append({"role": role, "content": str(message.get("content", ""))})
        if out[0]["role"] != "user" or out[-1]["role"] != "assistant":
            raise EnvError(f"{where}: an example starts with a user and ends with an assistant")
        return out

    def reset(self, problem: Problem, seed: int) -> list[Message]:
        self.problem = problem
        self.calls = []
        messages = problem.messages(self.system_prompt)
        at = 1 if messages and messages[0]["role"] == "system" else 0
        return [*messages[:at], *self.examples, *messages[at:]]

    def score(self, text: str) -> float:
        if self.task is not None:
            return float(self.task.score(text, self.problem))
        return numeric_reward(text, self.problem.answer)

    def step(self, action_text: str) -> StepResult:
        parsed = PARSERS[self.tool_format](action_text)
        anchor = tuple(self.calls)
        if parsed.calls or parsed.errors:
            outcomes = [call_tool(self.by_name, call) for call in parsed.calls]
            texts = [o.text for o in outcomes] + [f"Error: {e}" for e in parsed.errors]
            errors = sum(not o.ok for o in outcomes) + len(parsed.errors)
            self.calls += texts
            info: dict[str, Any] = {
                "anchor": anchor,
                "tool_calls": len(outcomes) + len(parsed.errors),
                "tool_errors": errors,
                "action_valid": errors == 0,
            }
            reward = self.tool_reward if errors == 0 else 0.0
            return StepResult([{"role": "tool", "content": t} for t in texts], reward, info=info)
        reward = self.score(action_text)
        verdict = "Correct." if reward >= 1.0 else "Wrong."
        info = {"anchor": anchor, "action_valid": True, "success": reward >= 1.0}
        return StepResult(
            [{"role": "user", "content": verdict}], reward, terminated=True, info=info
        )
