"""SkyRL-gym environments (NovaSky, "SkyRL": the ``skyrl-gym`` package) run as rlvr environments:
``env.name: skyrl_gym:<env_id>`` on any rlvr task whose problems carry the ground truth.

Install: ``pip install 'rlvr[skyrl]'`` (``skyrl-gym``). SkyRL-gym's environments are text
environments made per dataset row: ``skyrl_gym.make(env_id, env_config=..., extras=row)``, where
``extras`` carries the row's ``reward_spec`` (``{"ground_truth": ...}``) and whatever else the
environment reads (``max_turns``, ``db_id``, ...); ``init(prompt) -> (prompt, metadata)`` takes
the OpenAI-format chat, and ``step(action_text)`` answers ``{"observations": [messages],
"reward", "done", "metadata"}``. SkyRL-gym never calls a model. Offline here: ``gsm8k``
(one turn, reads ``#### <answer>``), ``gsm8k_multi_turn`` (feedback turns, a small format
credit per turn), ``aime`` (reads ``Answer: <answer>``), ``lcb`` (LiveCodeBench-style stdin
tests run in a subprocess; the ground truth is the JSON list of tests), ``searchcode`` (a python
tool), ``text2sql`` (with a local sqlite database under ``env_config.db_path``); ``search``
needs a retrieval server.

:class:`SkyRLGymEnv` maps one SkyRL-gym episode onto rlvr's protocol, the policy's tokens
untouched:

* ``reset(problem, seed)``: ``extras`` = ``params.extras`` updated with the problem's own:
  ``reward_spec.ground_truth`` (and AIME's ``reward_model.ground_truth``) is the problem's
  answer, unless the answer is a JSON object, which is then the row's extras itself (how a data
  file gives ``db_id`` or a test list); a fresh ``skyrl_gym.make``; ``init`` on the problem's
  chat, whose messages are the episode's first;
* ``step(text)``: SkyRL-gym's step on the sampled text; its observations become the next
  messages (role ``user``, or ``tool`` where SkyRL-gym says so); reward as given; ``done``
  is ``terminated`` (SkyRL-gym does not tell its own turn limit apart); ``metadata`` is the
  info, with ``postprocessed_action`` (what SkyRL's own trainer would have put in the chat
  history: rlvr keeps the sampled tokens) and, at the end, the environment's ``get_metrics()``
  under ``"skyrl_metrics"``. A tool environment's step (``searchcode``, ``text2sql``, ``search``:
  its metadata names ``tool_name``) counts one tool call when a tool call was read from the
  action, and marks the action invalid (``action_valid: False``, in ``tools/invalid_frac``) when
  none was: no tool named (``searchcode``), or none of its input (``text2sql``, ``search``,
  which still run their tool on None).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from rlvr.data.base import Problem
from rlvr.envs.base import EnvError, Message, StepResult, unknown_environment

INSTALL_HINT = "pip install 'rlvr[skyrl]'  (the skyrl-gym package)"


def import_skyrl_gym() -> Any:
    """The ``skyrl_gym`` module, or an EnvError saying how to install it."""
    try:
        import skyrl_gym
    except ImportError as err:
        raise EnvError(
            f"SkyRL-gym environments need the skyrl-gym package: {INSTALL_HINT}"
        ) from err
    return skyrl_gym


def problem_extras(problem: Problem, base: dict[str, Any]) -> dict[str, Any]:
    """The SkyRL ``extras`` of ``problem`` (see the module docstring): ``base`` (deep-copied)
    updated with the answer as ground truth, or with the answer's JSON object."""
    extras = copy.deepcopy(base)
    try:
        row = json.loads(problem.answer)
    except ValueError:
        row = None
    if isinstance(row, dict):
        extras.update(row)
        return extras
    for key in ("reward_spec", "reward_model"):
        extras[key] = {**extras.get(key, {}), "ground_truth": problem.answer}
    extras.setdefault("extra_info", {})
    return extras


def _has_none(tool_input: Any) -> bool:
    """Whether a tool's input misses its argument: text2sql and search read none from an
    action without their block and pass None on (text2sql's tool then answers that the action
    is invalid)."""
    return tool_input is None or (isinstance(tool_input, (list, tuple)) and None in tool_input)


def _messages(observations: Any, where: str) -> list[Message]:
    """SkyRL-gym's observations as rlvr messages (role ``tool`` kept, anything else ``user``)."""
    if not isinstance(observations, list):
        raise EnvError(f"{where}: observations {observations!r:.200} are not a list of messages")
    out = []
    for m in observations:
        if not isinstance(m, dict) or "content" not in m:
            raise EnvError(f"{where}: observation {m!r:.200} is not a {{role, content}} message")
        role = "tool" if m.get("role") == "tool" else "user"
        out.append({"role": role, "content": str(m["content"])})
    return out


class SkyRLGymEnv:
    """A SkyRL-gym environment as an rlvr environment (see the module docstring).

    Args:
        env_id: a SkyRL-gym id, e.g. "gsm8k", "gsm8k_multi_turn", "aime", "lcb", "text2sql".
        system_prompt: the run's ``model.system_prompt`` (first in the chat, as for every task).
        extras: fields every row shares (e.g. ``{"max_turns": 3}``), under the problem's own.
        env_config: SkyRL-gym's ``env_config`` (e.g. ``{"db_path": ...}`` of text2sql).
    """

    def __init__(
        self,
        env_id: str,
        system_prompt: str | None = None,
        extras: dict[str, Any] | None = None,
        env_config: dict[str, Any] | None = None,
    ) -> None:
        self._gym = import_skyrl_gym()
        if env_id not in self._gym.registry:
            raise unknown_environment("SkyRL-gym", env_id, self._gym.registry)
        self.env_id = env_id
        self.system_prompt = system_prompt
        self.extras = dict(extras or {})
        self.env_config = dict(env_config or {})
        self._env: Any = None

    def reset(self, problem: Problem, seed: int) -> list[Message]:
        """A fresh SkyRL-gym environment for ``problem``'s row (``seed`` is not read: SkyRL-gym
        environments are a function of their row)."""
        from omegaconf import OmegaConf  # a skyrl-gym dependency; its envs read attributes

        extras = problem_extras(problem, self.extras)
        where = f"SkyRL-gym environment {self.env_id!r}, problem {problem.id!r}"
        try:
            self._env = self._gym.make(
                self.env_id, env_config=OmegaConf.create(self.env_config), extras=extras
            )
        except Exception as err:  # noqa: BLE001 - any failure of SkyRL-gym's module is reported
            raise EnvError(
                f"{where}: could not be made from extras {extras}: {type(err).__name__}: "
                f"{str(err).strip()}"
            ) from err
        prompt = problem.messages(self.system_prompt)
        messages, _ = self._env.init(prompt)
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]

    def step(self, action_text: str) -> StepResult:
        """SkyRL-gym's step on the policy's text (see the module docstring for the mapping)."""
        if self._env is None:
            raise EnvError(
                f"SkyRL-gym environment {self.env_id!r}: no episode in progress; call reset first"
            )
        out = self._env.step(action_text)
        where = f"SkyRL-gym environment {self.env_id!r}"
        if not isinstance(out, dict) or not {"reward", "done"} <= set(out):
            raise EnvError(f"{where}: step() gave {out!r:.200}; expected reward and done")
        done = bool(out["done"])
        info = dict(out.get("metadata") or {})
        if out.get("postprocessed_action") is not None:
            info["postprocessed_action"] = out["postprocessed_action"]
        if "tool_name" in info:  # a tool environment's step: a tool ran, or none was read
            read = info["tool_name"] is not None and not _has_none(info.get("tool_input"))
            info["tool_calls"], info["action_valid"] = int(read), read
        if done:
            info["skyrl_metrics"] = self._env.get_metrics()
            self._env.close()
            self._env = None
        return StepResult(
            _messages(out.get("observations") or [], where),
            reward=float(out["reward"]),
            terminated=done,
            info=info,
        )
