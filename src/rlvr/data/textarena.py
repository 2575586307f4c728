"""Problems for the ``textarena`` environment (:class:`rlvr.envs.textarena.TextArenaEnv`): labels
of games, since a TextArena game comes from the environment's ``env_id`` and its reset seed
(``task.name: textarena:<env_id>``). Needs nothing installed: the games do."""

from __future__ import annotations

from typing import Any

from rlvr.data.base import Problem

PREFIX = "textarena:"


class TextArenaTask:
    """The problems :class:`TextArenaEnv` episodes start on: labels, since the game itself
    comes from the environment's ``env_id`` and reset seed.

    ``train_problem(i)`` has id ``textarena-<env_id>-train-<i>``; ``eval_problems()`` are
    ``textarena-<env_id>-eval-0 .. n_eval-1``. ``prompt`` names the game (for logs; the chat
    comes from the environment's reset) and ``answer`` is empty (the reward comes from the
    game). Whether train and eval episodes play different games depends on the seeds they are
    reset with.

    Args:
        env_id: the textarena id the environment plays, e.g. "GuessTheNumber-v0-raw".
        n_eval: number of eval problems.
        ecosystem: whose environments these are: ``textarena``, ``gem`` or ``openenv`` (the
            same labels for :class:`rlvr.envs.gem.GemEnv`, ``task.name: gem:<env_id>``, and
            :class:`rlvr.envs.openenv.OpenEnvEnv`, ``task.name: openenv:<URL>``).
    """

    def __init__(self, env_id: str, n_eval: int = 32, ecosystem: str = "textarena") -> None:
        if n_eval < 0:
            raise ValueError(f"n_eval must be >= 0, got {n_eval}")
        self.env_id = env_id
        self.ecosystem = ecosystem
        self.name = f"{ecosystem}:{env_id}"
        self.n_eval = n_eval

    def _problem(self, split: str, index: int) -> Problem:
        """The labelled problem ``index`` of ``split`` ("train" or "eval")."""
        return Problem(
            f"{self.ecosystem}-{self.env_id}-{split}-{index}",
            f"{self.ecosystem} game {self.env_id}, {split} game {index}",
            "",
        )

    def train_problem(self, index: int) -> Problem:
        """Training problem ``index`` (a label; see the class docstring)."""
        return self._problem("train", index)

    def eval_problems(self) -> list[Problem]:
        """The ``n_eval`` eval problems (labels; see the class docstring)."""
        return [self._problem("eval", i) for i in range(self.n_eval)]

    def score(self, completion: str, problem: Problem) -> float:
        """Not used for environment episodes, whose reward comes from the game's steps: 0.0."""
        return 0.0


def textarena_task(env_id: str, n_eval: int = 32, **_: Any) -> TextArenaTask:
    """``task.name: textarena:<env_id>``: labelled games of a TextArena environment (options
    other than n_eval, e.g. the seed, do not change the labels)."""
    return TextArenaTask(env_id, n_eval)


def gem_task(env_id: str, n_eval: int = 32, **_: Any) -> TextArenaTask:
    """``task.name: gem:<env_id>``: labelled episodes of a GEM environment."""
    return TextArenaTask(env_id, n_eval, "gem")


def openenv_task(url: str, n_eval: int = 32, **_: Any) -> TextArenaTask:
    """``task.name: openenv:<URL>``: labelled episodes of an OpenEnv server's environment."""
    return TextArenaTask(url, n_eval, "openenv")
