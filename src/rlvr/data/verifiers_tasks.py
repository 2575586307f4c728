"""A verifiers taskset (Prime Intellect's ``verifiers`` 0.4, its ``v1`` API: the format of the
Environments Hub) as an rlvr task: ``task.name: verifiers:<taskset id>``.

Install: ``pip install --no-deps 'verifiers==0.4.0'`` and its own dependencies (``make install``
does: :data:`INSTALL_HINT`). A taskset is a module (importable by its id, the current directory
included) exporting a ``vf.Taskset`` subclass in ``__all__``; its ``load()`` gives ``vf.Task``
objects, each with its data (``prompt`` and the fields its rewards read) and its rewards
(``@vf.reward`` methods scoring a ``vf.Trace``, weighted).

:class:`VerifiersTask` takes the taskset's tasks in their order: the first ``n_eval`` are the
held-out problems, the rest the training stream (cycled). A problem's ``prompt`` is the task's
prompt (a chat when the prompt is a list of messages); ``answer`` is the task's ``answer``
field when it has one (for the logs: the reward is the taskset's). ``score(completion,
problem)`` builds the trace verifiers' own rollout would (the user's prompt, the policy's reply
as the sampled message) and runs the task's rewards on it: their weighted sum is the reward, so
a single-turn verifiers environment trains as any rlvr task (and ``env.name:
verifiers:<taskset id>`` plays it as a one-step environment that logs each reward).
"""

from __future__ import annotations

import asyncio
from typing import Any

from rlvr.data.base import Problem
from rlvr.errors import DataError

INSTALL_HINT = (
    "pip install --no-deps 'verifiers==0.4.0' 'renderers==0.1.12' 'gepa==0.1.4' "
    "'prime-pydantic-config==0.4.3' 'prime-sandboxes==0.5.1' 'prime-tunnel==0.1.15' "
    "'prime-runs==0.1.4' 'prime-traces==0.0.10' 'connectrpc==0.11.1' 'pyqwest==0.12.0' "
    "'protobuf-py==0.1.1' 'protobuf-py-ext==0.1.1' 'tenacity>=9,<10' 'aiofiles>=24' "
    "'tomli>=2' 'tomli-w>=1'"
)
"""verifiers 0.4.0 pins openai < 3 and mcp == 2.0.0, which rlvr's openai 3 and vLLM's mcp 2.3
exclude; it runs with the newer ones (scoring, the in-process episodes), so it is installed
without its pins."""
PREFIX = "verifiers:"


def import_verifiers() -> Any:
    """``verifiers.v1``, or a DataError saying how to install it."""
    try:
        import verifiers.v1 as vf
    except ImportError as err:
        raise DataError(f"verifiers tasksets need the verifiers package: {INSTALL_HINT}") from err
    return vf


def _chat(prompt: Any) -> tuple[str, tuple[tuple[str, str], ...] | None]:
    """A task's prompt as rlvr's (user message, chat or None)."""
    if isinstance(prompt, str):
        return prompt, None
    messages = [m if isinstance(m, dict) else m.model_dump() for m in prompt]
    chat = tuple((str(m["role"]), str(m.get("content") or "")) for m in messages)
    return chat[-1][1], chat


class VerifiersTask:
    """The tasks of a verifiers taskset (see the module docstring).

    Args:
        taskset_id: the taskset's id (its module's name).
        n_eval: held-out problems (the taskset's first tasks).
        **taskset_config: the taskset's own config fields.
    """

    def __init__(self, taskset_id: str, n_eval: int = 32, **taskset_config: Any) -> None:
        self.vf = import_verifiers()
        self.taskset_id = taskset_id
        self.name = f"{PREFIX}{taskset_id}"
        try:
            config = self.vf.TasksetConfig(id=taskset_id, **taskset_config)
            tasks = list(self.vf.load_taskset(config))
        except Exception as err:  # noqa: BLE001 - the taskset's own failure, reported
            text = " ".join(str(err).split())[:300]
            raise DataError(
                f"task {self.name}: the taskset could not be loaded: {type(err).__name__}: {text}"
            ) from err
        if len(tasks) <= n_eval:
            raise DataError(
                f"task {self.name}: the taskset has {len(tasks)} tasks; task.n_eval ({n_eval}) "
                "must leave some to train on"
            )
        self.n_eval = n_eval
        self.tasks = {self._id(i): t for i, t in enumerate(tasks)}
        self._order = list(self.tasks)

    def _id(self, index: int) -> str:
        return f"verifiers-{self.taskset_id}-{index}"

    def _problem(self, index: int) -> Problem:
        pid = self._order[index]
        data = self.tasks[pid].data
        prompt, chat = _chat(data.prompt)
        return Problem(pid, prompt, str(getattr(data, "answer", "") or ""), chat=chat)

    def train_problem(self, index: int) -> Problem:
        """Training problem ``index``: the taskset's tasks after the held-out ones, cycled."""
        return self._problem(self.n_eval + index % (len(self._order) - self.n_eval))

    def eval_problems(self) -> list[Problem]:
        return [self._problem(i) for i in range(self.n_eval)]

    def rewards(self, completion: str, problem: Problem) -> tuple[float, dict[str, float]]:
        """The task's rewards on ``completion`` as the reply to ``problem``: their weighted sum
        and each one."""
        task = self.tasks.get(problem.id)
        if task is None:
            raise DataError(f"task {self.name}: no task {problem.id!r} in the taskset")
        vf = self.vf
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import TraceTask

        prompt = [vf.UserMessage(content=problem.prompt)] if problem.chat is None else None
        nodes = [MessageNode(message=m) for m in prompt] if prompt else []
        for role, content in problem.chat or ():
            kinds = {"system": vf.SystemMessage, "user": vf.UserMessage}
            kind = kinds.get(role, vf.AssistantMessage)
            nodes.append(
                MessageNode(parent=len(nodes) - 1 if nodes else None, message=kind(content=content))
            )
        reply = vf.AssistantMessage(content=completion)
        nodes.append(MessageNode(parent=len(nodes) - 1, message=reply, sampled=True))
        trace = vf.Trace(
            task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            agent=vf.AgentInfo(config=vf.AgentConfig()),
            nodes=nodes,
        )
        asyncio.run(task.score(trace))
        if trace.errors:
            raise DataError(f"task {self.name}, {problem.id}: its rewards failed: {trace.errors}")
        return float(trace.reward), {k: float(r.score) for k, r in trace.rewards.items()}

    def score(self, completion: str, problem: Problem) -> float:
        """The weighted sum of the task's rewards (see :meth:`rewards`)."""
        return self.rewards(completion, problem)[0]


def verifiers_task(taskset: str, **options: Any) -> VerifiersTask:
    """``task.name: verifiers:<taskset>``: the taskset's tasks (its config fields from the
    options; the run's seed does not apply: the taskset orders its own tasks)."""
    config = {k: v for k, v in options.items() if k not in ("seed", "n_eval")}
    return VerifiersTask(taskset, options.get("n_eval", 32), **config)
