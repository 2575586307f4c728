"""Agent programs for the tests: they call the model themselves through an OpenAI client at the
endpoint rlvr gives them (loaded as ``agents_for_tests:Class``, like a user's)."""

from __future__ import annotations

from envs_for_tests import CountdownEnv
from openai import OpenAI

from rlvr.data import Problem
from rlvr.envs.harness import AgentOutcome, Endpoint


class EnvAgent:
    """Plays ``env`` (an rlvr environment) by calling the model at the endpoint: the chat grows
    by the reply and the environment's messages each turn, as any agent loop does."""

    def __init__(self, env=None, max_turns: int = 3, stream: bool = False) -> None:
        self.env = env if env is not None else CountdownEnv()
        self.max_turns, self.stream = max_turns, stream

    def play(self, problem: Problem, seed: int, endpoint: Endpoint) -> AgentOutcome:
        client = OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
        messages = self.env.reset(problem, seed)
        total = 0.0
        for _ in range(self.max_turns):
            if self.stream:
                chunks = client.chat.completions.create(
                    model=endpoint.model, messages=messages, stream=True
                )
                text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            else:
                reply = client.chat.completions.create(model=endpoint.model, messages=messages)
                text = reply.choices[0].message.content
            messages = [*messages, {"role": "assistant", "content": text}]
            result = self.env.step(text)
            total += result.reward
            if result.done:
                break
            messages += result.messages
        return AgentOutcome(total, {"turns": len(messages)})


class RewritingAgent(EnvAgent):
    """Drops the first reply from the history of its second call: not one token sequence."""

    def play(self, problem: Problem, seed: int, endpoint: Endpoint) -> AgentOutcome:
        client = OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
        messages = self.env.reset(problem, seed)
        client.chat.completions.create(model=endpoint.model, messages=messages)
        client.chat.completions.create(
            model=endpoint.model, messages=[*messages, {"role": "user", "content": "Again."}]
        )
        return AgentOutcome(1.0)


CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


class ToolCallingAgent:
    """Native OpenAI tool calling: gives ``tools``, runs each returned call itself and sends the
    result back as a ``tool`` message, until a reply without calls (scored 1 if it says 42)."""

    def __init__(self, stream: bool = False) -> None:
        self.stream = stream

    def play(self, problem: Problem, seed: int, endpoint: Endpoint) -> AgentOutcome:
        from rlvr.envs.calc import calc

        client = OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
        messages = [{"role": "user", "content": problem.prompt}]
        for _ in range(3):
            reply = client.chat.completions.create(
                model=endpoint.model, messages=messages, tools=[CALC]
            )
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return AgentOutcome(float("42" in (message.content or "")))
            for call in message.tool_calls:
                import json

                result = calc(**json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return AgentOutcome(0.0)


class ScriptedReplies:
    """An engine whose replies a subclass's ``reply(prompt_text)`` scripts (SmolLM2's chat
    format), each closed by ``<|im_end|>``; the replies given are kept in ``replies``."""

    def __init__(self, tok) -> None:
        self.tok, self.end = tok, tok.convert_tokens_to_ids("<|im_end|>")
        self.replies: list[str] = []

    def reply(self, text: str) -> str:
        raise NotImplementedError

    def generate(self, prompts, n, sampling, keys):
        from rlvr.rollout.base import Rollout

        texts = [self.reply(self.tok.decode(p)) for p in prompts]
        self.replies += texts
        ids = [self.tok(t, add_special_tokens=False)["input_ids"] + [self.end] for t in texts]
        return Rollout(prompts, ids, [[-0.5] * len(x) for x in ids], [True] * len(ids), 1)


def episode_context(
    tok, problems, n: int, budget, timeout_s: float, max_new_tokens: int = 64, seed: int = 0
):
    """The :class:`~rlvr.envs.episodes.EpisodeContext` of ``n`` episodes of each of ``problems``
    under ``tok``'s chat template: episode i on stream i, every problem's seed ``seed``."""
    import torch

    from rlvr.envs.chat import ChatRenderer
    from rlvr.envs.episodes import EpisodeContext, Faults
    from rlvr.models import stop_token_ids
    from rlvr.rollout import SamplingParams

    stops = stop_token_ids(tok)
    return EpisodeContext(
        problems,
        n,
        SamplingParams(max_new_tokens=max_new_tokens, stop_token_ids=stops),
        torch.arange(len(problems) * n),
        [seed] * len(problems),
        ChatRenderer(tok, stop_token_ids=stops),
        lambda ids: tok.decode(ids, skip_special_tokens=True),
        budget,
        Faults(timeout_s=timeout_s),
    )
