"""GEM environments (Liu et al. 2025, "GEM: A Gym for Agentic LLMs") run as rlvr environments:
``env.name: gem:<env_id>`` with ``task.name: gem:<env_id>`` (its problems are episode labels).

Install: ``pip install 'rlvr[gem]'`` (:data:`INSTALL_HINT`; next to vLLM, without gem-llm's pins).
GEM's environments are Gymnasium-style text environments: ``gem.make(env_id, **kwargs)``,
``reset(seed) -> (observation, info)`` and ``step(action) -> (observation, reward, terminated,
truncated, info)``, the action being the policy's text (games and reasoning tasks read the
answer in its last ``\\boxed{...}``). GEM never calls a model. Offline here: the games
(``game:GuessTheNumber-v0-easy``, ``game:Mastermind-v0-easy``, ``game:Minesweeper-v0-easy``,
``game:Sudoku-v0-easy``, ``game:TowerofHanoi-v0-easy``, ``game:Game2048-v0-easy``,
``game:FifteenPuzzle-v0-easy``, ``game:Sokoban-v0-easy``, ...; the word games need NLTK's
``words`` corpus) and every reasoning-gym task (``rg:basic_arithmetic``, ...); its ``math:*``,
``code:*`` and ``qa:*`` ids download datasets from the hub.

:class:`GemEnv` maps one GEM episode onto rlvr's protocol, the policy's tokens untouched (the
chat template renders each observation as a user message, as for every environment):

* ``reset(problem, seed)``: a fresh ``gem.make`` (GEM environments keep state across resets),
  ``reset(seed=seed)``; the first user message is GEM's observation;
* ``step(text)``: GEM's step on the text; the next user message is GEM's observation followed
  by ``info["suffix"]`` when GEM gives one and the episode goes on (the line that asks for the
  next move), none at GEM's terminal-state marker; reward as GEM gives it; ``terminated`` as GEM's;
  ``truncated`` only when GEM truncated without terminating (its single-turn tasks report both);
  GEM's info is kept. GEM tells an action it could not parse (a game's move with no
  ``\\boxed{...}``) only by its format-error reward (``LanguageGameReward.format_error_reward``,
  -0.1): a game's step with that reward is an invalid action (``action_valid: False``, counted in
  ``tools/invalid_frac`` and the evaluation's invalid actions).

GEM's tools (``env.params.wrappers: [python_tool]``, names of GEM's ``WRAPPER_FACTORY``) wrap
the environment as GEM's own scripts do: an action holding a ``<python>...</python>`` block (or a
search call) runs the tool and its output is the next user message; any other action is the
environment's step. GEM's cumulative ``tool_use_counter`` and ``tool_success_counter`` become
the step's ``tool_calls`` and ``tool_errors`` (calls less successes; a failed call makes the
action invalid, as in rlvr's tool environments), logged as ``tools/*``. Only one tool wrapper is
taken (each overwrites the counts of the one it wraps), and only tool wrappers: GEM's observation wrappers re-render the whole conversation into one
observation string, which rlvr's chat template does itself. GEM's python tool runs the code in
a plain subprocess of GEM's (not rlvr's sandbox), as it does under GEM's own trainers.
"""

from __future__ import annotations

import logging
from typing import Any

from rlvr.data.base import Problem, with_system_prompt
from rlvr.envs.base import EnvError, Message, StepResult, unknown_environment

INSTALL_HINT = (
    "pip install 'rlvr[gem]' (where vLLM is installed: pip install --no-deps 'gem-llm==0.1.0' "
    "'pylatexenc>=2.10,<3')"
)
"""gem-llm 0.1.0 pins reasoning-gym 0.1.23 (rlvr runs with it), nltk 3.9.1 and msgspec 0.19.0,
older than vLLM's; it runs with vLLM's, so next to vLLM it is installed without its pins (the
Makefile does so)."""
TERMINAL = "<｜TERMINAL_STATE｜>"
"""The observation GEM returns when an episode has ended."""


def import_gem() -> Any:
    """The ``gem`` module (importing it does not reconfigure logging: GEM calls
    ``logging.basicConfig`` on import, which is undone), or an EnvError saying how to install."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        import gem
    except ImportError as err:
        raise EnvError(f"GEM environments need the gem-llm package: {INSTALL_HINT}") from err
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    return gem


class GemEnv:
    """A GEM environment as an rlvr environment (see the module docstring).

    Args:
        env_id: a GEM id, e.g. "game:GuessTheNumber-v0-easy" or "rg:basic_arithmetic".
        system_prompt: the run's ``model.system_prompt`` (first in the chat, as for every task).
        wrappers: GEM's tool wrapper, e.g. ``["python_tool"]`` (a list of one name, or the
            name as a string, as GEM's scripts take it).
        **env_kwargs: options of ``gem.make`` overriding the registered ones.
    """

    def __init__(
        self,
        env_id: str,
        system_prompt: str | None = None,
        wrappers: list[str] | str | None = None,
        **env_kwargs: Any,
    ) -> None:
        self._gem = import_gem()
        registry = self._gem.envs.registration.ENV_REGISTRY
        if env_id not in registry:
            raise unknown_environment("GEM", env_id, registry)
        self.env_id, self.system_prompt = env_id, system_prompt
        self.env_kwargs = dict(env_kwargs)
        self._wrapper = tool_wrapper(wrappers)
        self._env: Any = None
        self._done = True
        self._counts = (0, 0)  # GEM's tool uses and successes so far in the episode
        self._format_error = format_error_reward(env_id)

    def _make(self) -> Any:
        try:
            env = self._gem.make(self.env_id, **self.env_kwargs)
            return env if self._wrapper is None else self._wrapper(env)
        except Exception as err:  # noqa: BLE001 - any failure of GEM's module is reported
            raise EnvError(
                f"GEM environment {self.env_id!r} with options {self.env_kwargs} could not be "
                f"made: {type(err).__name__}: {str(err).strip()}"
            ) from err

    def reset(self, problem: Problem, seed: int) -> list[Message]:
        """A new GEM environment reset with ``seed`` (``problem`` is not read: the game is a
        function of the id, its options and the seed)."""
        self._env = self._make()
        observation, _ = self._env.reset(seed=seed)  # its instructions end with the first ask
        self._done, self._counts = False, (0, 0)
        return with_system_prompt(_messages(observation, None), self.system_prompt)

    def step(self, action_text: str) -> StepResult:
        """GEM's step on the policy's text (see the module docstring for the mapping)."""
        if self._done:
            raise EnvError(
                f"GEM environment {self.env_id!r}: no episode in progress; call reset first"
            )
        observation, reward, terminated, truncated, info = self._env.step(action_text)
        terminated, truncated = bool(terminated), bool(truncated) and not terminated
        self._done = terminated or truncated
        info = dict(info or {})
        if "tool_use_counter" in info:  # the tool wrapper's running counts, as this step's
            uses = int(info["tool_use_counter"])
            counts = (uses, int(info.get("tool_success_counter", uses)))
            calls, ok = counts[0] - self._counts[0], counts[1] - self._counts[1]
            info.update(tool_calls=calls, tool_errors=calls - ok, action_valid=calls == ok)
            self._counts = counts
        if reward == self._format_error:  # a game's action with no parseable move
            info["action_valid"] = False
        return StepResult(
            _messages(observation, None if self._done else info),
            reward=float(reward),
            terminated=terminated,
            truncated=truncated,
            info=info,
        )


def format_error_reward(env_id: str) -> float | None:
    """The reward by which GEM's game ``env_id`` answers an action it cannot parse (GEM's
    ``LanguageGameReward.format_error_reward``); None for its other environments, which have no
    such reward."""
    if not env_id.startswith("game:"):
        return None
    from gem.utils.constants import LanguageGameReward

    return float(LanguageGameReward.format_error_reward)


def tool_wrapper(names: list[str] | str | None) -> Any:
    """GEM's tool wrapper by its ``WRAPPER_FACTORY`` name (see the module docstring), or None
    when none is named; an EnvError names what it cannot take and why."""
    if not names:
        return None
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    from gem.tools.tool_env_wrapper import ToolEnvWrapper
    from gem.wrappers.wrapper_factory import WRAPPER_FACTORY

    tools = sorted(k for k, v in WRAPPER_FACTORY.items() if getattr(v, "func", v) is ToolEnvWrapper)
    if len(names) > 1:  # each ToolEnvWrapper overwrites the counts of the one it wraps
        raise EnvError(
            f"GEM wrappers {names}: give one tool wrapper (GEM puts several tools in one "
            "ToolEnvWrapper; stacked ones report only the outer one's calls)"
        )
    (name,) = names
    if name not in tools:
        why = (
            "it re-renders the conversation, which rlvr's chat template does"
            if name in WRAPPER_FACTORY
            else "GEM has no such wrapper"
        )
        raise EnvError(
            f"GEM wrapper {name!r} cannot be used ({why}); GEM's tool wrappers: {', '.join(tools)}"
        )
    return WRAPPER_FACTORY[name]


def _messages(observation: Any, info: dict[str, Any] | None) -> list[Message]:
    """GEM's observation (and the suffix asking for the next move) as one user message; none at
    the terminal-state marker."""
    text = str(observation)
    if text.strip() == TERMINAL:
        return []
    suffix = (info or {}).get("suffix")
    if suffix and not text.rstrip().endswith(str(suffix).strip()):
        text = f"{text.rstrip()}\n{suffix}"
    return [{"role": "user", "content": text}]
