"""Environments written for other trainers, run unchanged as rlvr environments.

TextArena (Guertler et al., 2025, "TextArena", arXiv:2504.11442,
https://github.com/LeonGuertler/TextArena) is a gym-like collection of text games; its
single-player games (``GuessTheNumber-v0``, ``TowerOfHanoi-v0``, ``Minesweeper-v0-small``,
``Mastermind-v0``, ``FrozenLake-v0``, ``Sudoku-v0-very-easy``, ...) run offline with no model
and no API key. :class:`TextArenaEnv` plays one of them as player 0 through textarena's own
``make / reset / get_observation / step / close`` calls, and :class:`rlvr.data.textarena.TextArenaTask`
(``task.name: textarena:<env_id>``) is the stream of problems its episodes are started on. It
needs ``pip install 'rlvr[envs]'``.

Environment ids: textarena registers every game three ways. ``NAME`` and ``NAME-train`` wrap
the game in observation wrappers that restate the whole game so far in every observation (for
agents prompted afresh each turn); ``NAME-raw`` has no wrappers, so each observation is only
what happened since the last action. In a multi-turn chat the earlier turns are already in the
context, so the ``-raw`` ids are the ones to train on; the wrapped ids work too (each user
message is then the wrapper's full text, as textarena's own agents see it).

Games that textarena cannot run offline fail at construction with an :class:`EnvError` naming
the game: word games (``Wordle-v0``, ``Hangman-v0``, ``WordLadder-v0``, ``WordSearch-v0``)
need NLTK's ``words`` corpus (``python -m nltk.downloader words``; their modules try to
download it when imported), and ``TwentyQuestions-v0`` and ``GuessWho-v0`` need an OpenRouter
API key for their game master.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rlvr.data.base import Problem, with_system_prompt
from rlvr.envs.base import EnvError, Message, StepResult, unknown_environment

INSTALL_HINT = "pip install 'rlvr[envs]'"
_PLAYER = 0  # the policy plays textarena's player 0 of a one-player game
# textarena seeds and draws from the process-wide ``random`` module; the swap of each game's
# own state in and out of it (see TextArenaEnv._own_random) holds this lock.
_RANDOM_LOCK = threading.Lock()


def _import_textarena() -> Any:
    """The ``textarena`` module, or an :class:`EnvError` that says how to install it."""
    try:
        import textarena
    except ImportError as err:
        raise EnvError(
            f"TextArenaEnv needs the textarena package, which is not installed: {INSTALL_HINT}"
        ) from err
    return textarena


class TextArenaEnv:
    """A single-player textarena game as an rlvr environment (see the module docstring).

    ``reset(problem, seed)`` calls textarena's ``reset(num_players=1, seed=seed)``: the game
    (the secret number, the board) is a pure function of ``env_id``, ``env_kwargs`` and
    ``seed``; ``problem`` is not read, so the episodes of one problem play the same game exactly
    when they are reset with the same seed. It answers ``[{"role": "user", "content": text}]``
    with textarena's first observation. ``step(action_text)`` passes the text unchanged to the
    game's ``step`` and answers with the observation textarena has for the player afterwards:

    * messages: one user message with that observation: the string of a wrapped id as it is;
      for a ``-raw`` id, the texts of the new observation messages, one per line, without the
      game's echo of the action itself (it is already the assistant turn); none when there
      is nothing new.
    * reward: 0.0 until the game is over, then textarena's reward for player 0 (from
      ``close()``; e.g. GuessTheNumber gives 1 for a win and the closeness of the last guess
      for a loss).
    * terminated: textarena's ``done`` (a win, a loss, the game's turn limit, too many invalid
      moves); truncated is always False, textarena has no separate cut-off.
    * info: textarena's step info, and at the end its game info for player 0 (``reason``,
      ``turn_count``, ``invalid_move``, ``role``); ``action_valid``: False when textarena
      rejected the move (it then asks again, or ends the game after too many); ``anchor``: the
      ``repr`` of textarena's ``game_state`` before the action.

    textarena seeds Python's global ``random`` at every reset and draws from it during play;
    here every call into the game runs with the game's own saved ``random`` state swapped in
    (under a lock), so episodes stay deterministic when several run side by side and the
    caller's ``random`` state is left as it was.

    Args:
        env_id: a textarena id, e.g. "GuessTheNumber-v0-raw".
        system_prompt: the run's ``model.system_prompt`` (first in the chat, as for every task).
        **env_kwargs: the game's own options, overriding the registered ones, e.g.
            ``max_number=50`` for GuessTheNumber.
    """

    def __init__(self, env_id: str, system_prompt: str | None = None, **env_kwargs: Any) -> None:
        self._ta = _import_textarena()
        registry = self._ta.envs.registration.ENV_REGISTRY
        if env_id not in registry:
            raise unknown_environment("textarena", env_id, registry)
        self.env_id, self.system_prompt = env_id, system_prompt
        self.env_kwargs = dict(env_kwargs)
        self._random_state = random.getstate()
        self._env = self._make()
        self._done = True  # no episode until reset

    def _make(self) -> Any:
        """A new textarena environment (wrappers keep their history across resets, so every
        episode gets a fresh one); :class:`EnvError` when the game cannot be made."""
        try:
            with self._own_random():
                return self._ta.make(self.env_id, **self.env_kwargs)
        except Exception as err:  # noqa: BLE001 - any failure of the game's module is reported
            hint = (
                " (word games need NLTK's corpus: python -m nltk.downloader words)"
                if isinstance(err, LookupError)
                else ""
            )
            raise EnvError(
                f"textarena environment {self.env_id!r} with options {self.env_kwargs} could "
                f"not be made: {type(err).__name__}: {str(err).strip()}{hint}"
            ) from err

    @contextmanager
    def _own_random(self) -> Iterator[None]:
        """Run the block with this game's ``random`` state in the global ``random`` module,
        keep the state it leaves, and give the caller's state back."""
        with _RANDOM_LOCK:
            outer = random.getstate()
            random.setstate(self._random_state)
            try:
                yield
            finally:
                self._random_state = random.getstate()
                random.setstate(outer)

    def reset(self, problem: Problem, seed: int) -> list[Message]:
        """Start a game with textarena's ``reset(num_players=1, seed=seed)`` (``problem`` is not
        read); the first user message is textarena's first observation."""
        self._env = self._make()
        self._random_state = random.Random(seed).getstate()
        try:
            with self._own_random():
                self._env.reset(num_players=1, seed=seed)
        except AssertionError as err:
            raise EnvError(
                f"textarena environment {self.env_id!r} is not a single-player game "
                f"(TextArenaEnv plays one player): {err}"
            ) from err
        self._done = False
        return with_system_prompt(self._observation(), self.system_prompt)

    def step(self, action_text: str) -> StepResult:
        """Play ``action_text`` as player 0's move (see the class docstring for the result)."""
        if self._done:
            raise EnvError(
                f"textarena environment {self.env_id!r}: no game in progress (it ended or was "
                "never started); call reset(problem, seed) first"
            )
        state = self._env.state
        anchor = repr(state.game_state)
        turn = state.turn
        with self._own_random():
            done, step_info = self._env.step(action_text)
            messages = self._observation()
            rewards, game_info = self._env.close() if done else (None, {})
        self._done = done
        info = dict(step_info)
        reward = 0.0
        if done:
            if not rewards or _PLAYER not in rewards:
                raise EnvError(
                    f"textarena environment {self.env_id!r} ended without a reward for player "
                    f"{_PLAYER} (close() gave {rewards!r})"
                )
            reward = float(rewards[_PLAYER])
            info.update(game_info[_PLAYER])
        invalid = state.game_info[_PLAYER]["invalid_move"] or (not done and state.turn == turn)
        info.update(action_valid=not invalid, anchor=anchor)
        return StepResult(messages, reward=reward, terminated=done, info=info)

    def _observation(self) -> list[Message]:
        """Textarena's pending observation for player 0 as user messages (see the class
        docstring); empty when there is nothing new."""
        player, observation = self._env.get_observation()
        if player != _PLAYER:
            raise EnvError(
                f"textarena environment {self.env_id!r} asked player {player} to move; "
                f"TextArenaEnv plays player {_PLAYER} of single-player games only"
            )
        if not isinstance(observation, str):
            observation = "\n".join(
                text
                for _, text, kind in observation
                if kind != self._ta.ObservationType.PLAYER_ACTION
            )
        return [{"role": "user", "content": observation}] if observation else []
