"""The reward protocol: what a reward function is, what it is given and what it may return.

Two kinds of reward (both pure functions of text; fields are keyword arguments):

- per-sample, ``kind="sample"``: ``fn(completion: str, problem: Problem, **fields) -> float``;
- per-group, ``kind="group"``: ``fn(completions: list[str], problem: Problem, **fields) ->
  list[float]``, called once with all completions of one prompt. Label-free rewards need the
  whole group, e.g. TTRL's majority vote (Zuo et al., 2025, "TTRL: Test-Time Reinforcement
  Learning") rewards a sample for agreeing with the group's most common answer.

A reward declares the fields it uses as keyword parameters (``num_tokens``, ``schema``,
``references``, ...), read by :class:`RewardSignature`; the combined reward
(:class:`~rlvr.rewards.combined.CombinedReward`) passes each function only the fields it
accepts (all of them if it takes ``**fields``), so one batch can carry fields for several
rewards; :data:`SAMPLE_FIELDS` lists the per-sample fields a training run provides. Keyword
parameters that no field provides are set under ``params`` in the config.

A reward returns a real number: a ``float`` or ``int``, a ``bool`` (True scores 1.0), or a
numpy scalar; a :class:`Score` is a float that also carries a human-readable reason. Anything
else (a string such as ``"0.5"``, None, a list from a per-sample reward), a non-finite value, a
value beyond ``max_abs`` in magnitude (default :data:`DEFAULT_MAX_ABS`) or a group reward of the
wrong length is a :class:`RewardError` naming the reward, the sample and its problem; a reward
that cannot be used as configured is a :class:`RewardConfigError`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from rlvr.errors import RlvrError

if TYPE_CHECKING:
    from rlvr.data.base import Problem

RewardKind = Literal["sample", "group"]

#: Largest reward magnitude accepted by default. Advantages are computed in float32, where the
#: standard deviation of [1e30, 0] is already inf (its square overflows): every advantage of the
#: group then silently becomes 0 or NaN. 1e6 leaves ample headroom for real rewards.
DEFAULT_MAX_ABS = 1e6

#: The per-sample fields a training run passes to rewards that declare them as keyword
#: parameters, each with the stand-in value
#: :meth:`~rlvr.rewards.combined.CombinedReward.check` passes at start-up: ``num_tokens``
#: (completion length in tokens); ``token_entropy`` and ``self_certainty`` (means over the
#: completion's tokens, from the rollout engine); ``reference_logprobs`` and
#: ``reference_logprobs_bare`` (per-token log-probs of the reference answer after the
#: completion's reasoning, and with no reasoning). The trainer computes the last four only
#: for rewards that declare them.
SAMPLE_FIELDS: dict[str, Any] = {
    "num_tokens": 8,
    "token_entropy": 1.0,
    "self_certainty": 1.0,
    "reference_logprobs": [-1.0, -1.0],
    "reference_logprobs_bare": [-1.0],
}

#: The reward signatures, quoted by errors about a reward that cannot be called.
SIGNATURE_HELP = (
    "a reward is f(completion: str, problem: rlvr.data.Problem, **fields) -> float, or a "
    "group reward registered with @rlvr.rewards.register_reward(name, kind='group'): "
    "f(completions: list[str], problem: rlvr.data.Problem, **fields) -> list[float]; "
    f"fields: {', '.join(SAMPLE_FIELDS)}, or fixed values set under params"
)


class SampleReward(Protocol):
    """``(completion, problem, **fields) -> float``: the reward of one completion."""

    def __call__(self, completion: str, problem: Problem, /, **fields: Any) -> float: ...


class GroupReward(Protocol):
    """``(completions, problem, **fields) -> list[float]``: rewards of one prompt's group."""

    def __call__(
        self, completions: list[str], problem: Problem, /, **fields: Any
    ) -> list[float]: ...


class Score(float):
    """A reward value (a ``float``) with a ``reason``, e.g. ``"2/3 tests passed; test 1: ..."``,
    ``events``: what was observed while scoring, as metric names (the code rewards report
    e.g. ``"sandbox/killed/memory"``, ``"sandbox/forbidden/syscall"``), ``parts``: named
    sub-scores of this sample (a rubric's criteria), ``usage``: amounts the scoring cost,
    summed over the batch (a judge's ``judge/calls``, ``time/judge``, ...), and ``steps``: a
    process reward's score of each reasoning step, ``(end, value)`` with ``end`` the character
    offset in the completion where the step ends (:mod:`rlvr.rewards.process`).

    :class:`~rlvr.rewards.combined.CombinedReward` collects the reasons into
    :attr:`~rlvr.rewards.combined.RewardBreakdown.reasons`, counts the samples per event in
    :attr:`~rlvr.rewards.combined.RewardBreakdown.events`, averages each part over the samples
    that report it and sums the usage.
    """

    reason: str
    events: tuple[str, ...]
    parts: dict[str, float]
    usage: dict[str, float]
    steps: tuple[tuple[int, float], ...]

    def __new__(
        cls,
        value: float,
        reason: str = "",
        events: tuple[str, ...] = (),
        parts: dict[str, float] | None = None,
        usage: dict[str, float] | None = None,
        steps: Sequence[tuple[int, float]] = (),
    ) -> Score:
        obj = super().__new__(cls, value)
        obj.reason = reason
        obj.events = tuple(events)
        obj.parts = dict(parts or {})
        obj.usage = dict(usage or {})
        obj.steps = tuple((int(end), float(v)) for end, v in steps)
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        return (Score, (float(self), self.reason, self.events, self.parts, self.usage, self.steps))

    def __repr__(self) -> str:
        extra = f", {self.events!r}" if self.events else ""
        extra += f", parts={self.parts!r}" if self.parts else ""
        return f"Score({float(self)!r}, {self.reason!r}{extra})"


class RewardError(RlvrError, RuntimeError):
    """A reward raised, returned a bad value, or timed out, on a given sample.

    The message names the reward, the sample index in the batch, the problem id (when known)
    and the first 80 characters of the completion; the attributes carry the same for programs.
    """

    def __init__(
        self,
        reward: str,
        index: int,
        completion: str,
        detail: str,
        problem_id: str | None = None,
    ) -> None:
        self.reward, self.index, self.detail = reward, index, detail
        self.problem_id = problem_id
        self.completion_head = completion[:80]
        problem = "" if problem_id is None else f"problem {problem_id!r}, "
        super().__init__(
            f"reward {reward!r} failed on sample {index} ({problem}completion starts "
            f"{self.completion_head!r}): {detail}"
        )


class RewardConfigError(RlvrError, ValueError):
    """A reward that cannot be used as configured: an unknown name, a ``module:function`` that
    does not import, a signature that does not fit the reward protocol, unknown parameters, or
    a start-up check (:meth:`~rlvr.rewards.combined.CombinedReward.check`) that failed."""


def qualified_name(fn: Callable) -> str:
    """``module.qualname`` of a function, as errors name it."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


@dataclass(frozen=True)
class RewardSignature:
    """Keyword parameters a reward accepts beyond its two positional ones."""

    names: frozenset[str]
    required: frozenset[str]
    var_keyword: bool

    @classmethod
    def of(cls, fn: Callable) -> RewardSignature:
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError) as err:
            raise RewardConfigError(
                f"reward {qualified_name(fn)}: cannot read its signature ({err}); {SIGNATURE_HELP}"
            ) from None
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][
            :2
        ]
        rest = [p for p in params if p not in positional and p.kind != p.VAR_POSITIONAL]
        keywords = [p for p in rest if p.kind != p.VAR_KEYWORD]
        return cls(
            names=frozenset(p.name for p in keywords),
            required=frozenset(p.name for p in keywords if p.default is p.empty),
            var_keyword=any(p.kind == p.VAR_KEYWORD for p in rest),
        )

    def accepts(self, name: str) -> bool:
        return self.var_keyword or name in self.names
