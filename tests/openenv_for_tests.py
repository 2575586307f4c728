"""Two OpenEnv environments written against ``openenv.core`` as their authors would, served on
127.0.0.1 by the tests (``python openenv_for_tests.py NAME PORT``): ``guess`` (find a number
in 1..8 from higher/lower hints, four tries), ``echo`` (OpenEnv's template environment: the
reward grows with the message, two turns) and ``mcp`` (an MCP environment, OpenEnv's
``MCPEnvironment`` over a FastMCP server: tools ``add(a, b)`` and ``submit(answer)``, the
reward 1 for submitting the episode's target sum)."""

from __future__ import annotations

import random
import re
import sys
from uuid import uuid4

from fastmcp import FastMCP
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.env_server.types import Action, Observation, State


class GuessAction(Action):
    text: str


class GuessObservation(Observation):
    prompt: str = ""


class GuessEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs) -> GuessObservation:
        self.target = random.Random(seed).randint(1, 8)
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return GuessObservation(
            prompt="I am thinking of a number from 1 to 8. Guess it: answer \\boxed{n}.",
            done=False,
            reward=0.0,
        )

    def step(self, action: GuessAction, timeout_s=None, **kwargs) -> GuessObservation:
        self._state.step_count += 1
        found = re.findall(r"\\boxed\{(\d+)\}", action.text)
        guess = int(found[-1]) if found else None
        won = guess == self.target
        if guess is None:
            hint = "Answer with \\boxed{n}."
        else:
            hint = "Correct!" if won else ("Higher." if guess < self.target else "Lower.")
        done = won or self._state.step_count >= 4
        return GuessObservation(prompt=hint, done=done, reward=1.0 if won else 0.0)

    @property
    def state(self) -> State:
        return self._state


class EchoAction(Action):
    message: str


class EchoObservation(Observation):
    echoed_message: str = ""
    message_length: int = 0


class EchoEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs) -> EchoObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return EchoObservation(echoed_message="Echo environment ready! Say something.")

    def step(self, action: EchoAction, timeout_s=None, **kwargs) -> EchoObservation:
        self._state.step_count += 1
        n = len(action.message)
        return EchoObservation(
            echoed_message=action.message,
            message_length=n,
            done=self._state.step_count >= 2,
            reward=min(n, 20) / 20,
        )

    @property
    def state(self) -> State:
        return self._state


class SumObservation(Observation):
    prompt: str = ""


class SumEnvironment(MCPEnvironment):
    """Add two numbers with the ``add`` tool and ``submit`` the sum: the episode's pair comes
    from the reset's seed; ``submit`` ends it, rewarded 1 when right."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("sum")
        self.pair, self.submitted = (0, 0), None

        @mcp.tool()
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        @mcp.tool()
        def submit(answer: int) -> str:
            """Submit the final answer."""
            self.submitted = answer
            return "submitted"

        super().__init__(mcp)
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs) -> SumObservation:
        rng = random.Random(seed)
        self.pair, self.submitted = (rng.randint(10, 99), rng.randint(10, 99)), None
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        a, b = self.pair
        return SumObservation(prompt=f"What is {a} + {b}? Use the tools, then submit.")

    def _scored(self, observation: Observation) -> Observation:
        if self.submitted is not None:
            observation.done = True
            observation.reward = float(self.submitted == sum(self.pair))
        return observation

    def step(self, action, timeout_s=None, **kwargs) -> Observation:
        return self._scored(super().step(action, timeout_s=timeout_s, **kwargs))

    async def step_async(self, action, timeout_s=None, **kwargs) -> Observation:
        return self._scored(await super().step_async(action, timeout_s=timeout_s, **kwargs))

    def _step_impl(self, action, timeout_s=None, **kwargs) -> Observation:
        return SumObservation(prompt="Call a tool.")

    @property
    def state(self) -> State:
        return self._state


APPS = {
    "guess": (GuessEnvironment, GuessAction, GuessObservation),
    "echo": (EchoEnvironment, EchoAction, EchoObservation),
    "mcp": (SumEnvironment, CallToolAction, SumObservation),
}

if __name__ == "__main__":
    import uvicorn

    name, port = sys.argv[1], int(sys.argv[2])
    env, action, observation = APPS[name]
    app = create_app(env, action, observation, env_name=name, max_concurrent_envs=64)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
