"""A verifiers (v1) taskset whose own environment plays the user: it answers each wrong guess
with feedback, up to three guesses (as verifiers' textarena taskset does)."""

import verifiers.v1 as vf


class GuessData(vf.TaskData):
    secret: int = 7


class GuessTask(vf.Task[GuessData]):
    @vf.reward(weight=1.0)
    async def solved(self, trace: vf.Trace) -> float:
        return float(str(self.data.secret) in (trace.last_reply or ""))


class GuessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()
    max_guesses: int = 3


class GuessEnv(vf.Env[GuessEnvConfig]):
    async def run(self, task, agents):
        async with agents.player.interaction(task) as it:
            segment = await it.turn()
            for _ in range(self.config.max_guesses - 1):
                if segment.terminated or str(task.data.secret) in segment.last_reply:
                    break
                segment = await it.turn("Wrong, guess again.")


class GuessTaskset(vf.Taskset[GuessTask, vf.TasksetConfig]):
    def load(self):
        prompt = "Guess my number (1-10). Reply with just the number."
        return [
            GuessTask(GuessData(prompt=prompt, secret=9000 + k), self.config.task) for k in range(6)
        ]


__all__ = ["GuessTaskset", "GuessEnv"]
