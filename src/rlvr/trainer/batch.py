"""One step's samples as one columnar table (:class:`Samples`), from the engine to the learner.

A player returns its groups as a table; the collector adds columns to it (the rewards, the
signals an estimator needs), selects the rows its filters keep and joins the draws of a step;
the learner reads the columns it needs. No record is copied field by field on the way: a part
that adds something per sample adds a named column, and :meth:`Samples.select` and
:meth:`Samples.concat` carry every column, whatever it is.

The seam between the rollout side and the learning side of a run (docs/design.md, "One
training step"): everything here is plain data (token ids, floats, problems), cheap to pickle,
so a table crosses process boundaries (Ray workers, a checkpoint's batches sampled ahead).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch

from rlvr.data import Problem

T = TypeVar("T")

SIGNAL = "signal/"
"""The prefix of a produced signal's column (:mod:`rlvr.trainer.signals`)."""


def take(column: Any, rows: list[int]) -> Any:
    """Rows ``rows`` of a column: a list, a tensor, or an object with ``select(rows)`` (a reward
    breakdown)."""
    if isinstance(column, torch.Tensor):
        return column[torch.tensor(rows, dtype=torch.long)]
    if isinstance(column, list):
        return [column[i] for i in rows]
    return column.select(rows)


def join(parts: Sequence[Any]) -> Any:
    """Columns of several tables end to end: lists chained, tensors concatenated, other objects
    by their type's ``concat(parts)``."""
    first = parts[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(list(parts))
    if isinstance(first, list):
        return [x for part in parts for x in part]
    return type(first).concat(parts)


class Column(Generic[T]):
    """A per-sample column read as an attribute of the table (None where the table has none)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, table: Samples | None, owner: type | None = None) -> T:
        if table is None:
            return self  # type: ignore[return-value]
        return table.columns.get(self.name)  # type: ignore[return-value]

    def __set__(self, table: Samples, value: Any) -> None:
        raise AttributeError(f"a table's columns change with with_columns({self.name}=...)")


@dataclass(kw_only=True)
class Samples:
    """N samples in P groups (one per problem), column by column.

    Attributes:
        problems: [P] the problems.
        prompt_ids: [P] each prompt's token ids (chat template applied; an environment's first
            messages).
        columns: [N] per sample, by name. Every table has ``completion_ids`` (token ids exactly
            as sampled; a multi-turn episode's actions and the observations between them),
            ``sampler_logprobs`` (the behaviour policy's log-prob of each sampled token, 0 for
            the data's completions), ``finished`` (ended with a stop token or string),
            ``texts`` (decoded: what the rewards read; an episode's last action), ``group_ids``
            (a long tensor: the problem of each sample) and ``breakdown`` (the reward's terms,
            reasons and counts: :class:`rlvr.rewards.combined.RewardBreakdown`). Parts add
            theirs: ``rewards`` (float tensor: the collector's, with DAPO's overlong penalty),
            ``signal/<name>`` (a produced signal), ``action_mask`` / ``turn_rewards`` /
            ``anchors`` / ``transcripts`` / ``infos`` / ``faults`` (multi-turn episodes),
            ``tree_segments`` (tree rollouts: each completion token's segment label, unique
            within its group; the completions are the trees' leaves), ``expert`` (bool tensor:
            a worked solution added to its group, ``algorithm.expert.traces``; not sampled),
            ``step_rewards`` (a process reward's ``[(token, value)]``: each reasoning step's
            reward on its last token), ``given_tokens`` (the leading completion tokens that were
            given, not sampled: a guided sample's prefix, G2RPO-A), ``token_entropies`` (the
            entropy at temperature 1 of each sampled token's distribution, when the engine
            recorded it: HAPO's adaptive temperatures).
        group_columns: [P] per group, by name: ``demonstration_ids`` and ``demonstration_mask``
            (each problem's demonstration for an SFT term, ``sft_coef``).
        info: about the whole table: ``tokens_per_s``, ``seconds``, ``reward_seconds`` (the
            engine's and the reward's time), ``policy_version`` (optimizer updates of the policy
            that sampled it), ``episode_counts`` (an environment's summed counts).
    """

    problems: list[Problem]
    prompt_ids: list[list[int]]
    columns: dict[str, Any]
    group_columns: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)

    # the columns read as attributes (None where the table has none)
    completion_ids = Column[list[list[int]]]()
    sampler_logprobs = Column[list[list[float]]]()
    finished = Column[list[bool]]()
    texts = Column[list[str]]()
    group_ids = Column[torch.Tensor]()
    breakdown = Column[Any]()
    rewards = Column[torch.Tensor]()
    action_mask = Column[list[list[int]] | None]()
    turn_rewards = Column[list[list[float]] | None]()
    anchors = Column[list[list[Any]] | None]()
    transcripts = Column[list[list[dict[str, Any]]] | None]()
    infos = Column[list[list[dict[str, Any]]] | None]()
    faults = Column[list[str | None] | None]()
    expert = Column[torch.Tensor | None]()
    given_tokens = Column[list[int] | None]()
    token_entropies = Column[list[list[float]] | None]()

    REQUIRED = (
        "completion_ids",
        "sampler_logprobs",
        "finished",
        "texts",
        "group_ids",
        "breakdown",
    )

    def __post_init__(self) -> None:
        missing = [name for name in self.REQUIRED if name not in self.columns]
        if missing:
            raise ValueError(f"a sample table needs the columns {', '.join(missing)}")
        n = len(self.columns["completion_ids"])
        for name, column in self.columns.items():
            if len(column) != n:
                raise ValueError(f"column {name!r} has {len(column)} rows, the table {n}")
        for name, column in self.group_columns.items():
            if len(column) != len(self.prompt_ids):
                raise ValueError(f"group column {name!r}: {len(column)} rows for P groups")

    def __len__(self) -> int:
        return len(self.columns["completion_ids"])

    def __getstate__(self) -> dict[str, Any]:
        fields = ("problems", "prompt_ids", "columns", "group_columns", "info")
        return {name: getattr(self, name) for name in fields}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle, also a batch pickled by an rlvr that kept one attribute per field (a
        checkpoint's pending batch, ``rollout.max_staleness``)."""
        if "columns" not in state:
            state = _from_fields(state)
        for name, value in state.items():
            object.__setattr__(self, name, value)

    @property
    def signals(self) -> dict[str, torch.Tensor]:
        """The produced signals [N], by name."""
        return {k[len(SIGNAL) :]: v for k, v in self.columns.items() if k.startswith(SIGNAL)}

    @property
    def terms(self) -> dict[str, list[float]]:
        """Each reward term's unweighted value [N], by label."""
        return self.breakdown.components

    @property
    def term_weights(self) -> dict[str, float]:
        """Each reward term's weight in the reward (GDPO sums the normalised terms with them)."""
        return self.breakdown.weights

    def reasons(self, i: int) -> dict[str, str]:
        """The reason each reward term gave sample ``i`` (a judge's reply, a failed test), by
        label; terms that gave none are left out."""
        return {k: r[i] for k, r in self.breakdown.reasons.items() if r[i] is not None}

    def sampled(self) -> Samples:
        """The policy's own samples: the table without its expert traces (``expert``)."""
        if self.expert is None or not bool(self.expert.any()):
            return self
        return self.select(torch.nonzero(~self.expert).flatten())

    @property
    def demonstration_ids(self) -> list[list[int]] | None:
        return self.group_columns.get("demonstration_ids")

    @property
    def demonstration_mask(self) -> list[list[int]] | None:
        return self.group_columns.get("demonstration_mask")

    @property
    def tokens_per_s(self) -> float:
        return self.info.get("tokens_per_s", 0.0)

    @property
    def policy_version(self) -> int:
        return self.info.get("policy_version", 0)

    def with_columns(self, **columns: Any) -> Samples:
        """The table with ``columns`` added (or replaced), [N] each."""
        return dataclasses.replace(self, columns={**self.columns, **columns})

    def select(self, rows: list[int] | torch.Tensor) -> Samples:
        """The samples ``rows`` (in that order), every column; the groups unchanged."""
        rows = rows.tolist() if isinstance(rows, torch.Tensor) else rows
        columns = {name: take(column, rows) for name, column in self.columns.items()}
        return dataclasses.replace(self, columns=columns)

    def groups(self, groups: list[int]) -> Samples:
        """The groups ``groups`` (in that order) and their samples, the groups renumbered
        0..len(groups)-1."""
        ids = self.group_ids.tolist()
        by_group: dict[int, list[int]] = {}
        for i, owner in enumerate(ids):
            by_group.setdefault(owner, []).append(i)
        rows = [i for g in groups for i in by_group.get(g, [])]
        table = self.select(rows)
        new = {g: k for k, g in enumerate(groups)}
        table.columns["group_ids"] = torch.tensor([new[ids[i]] for i in rows], dtype=torch.long)
        return dataclasses.replace(
            table,
            problems=[self.problems[g] for g in groups],
            prompt_ids=[self.prompt_ids[g] for g in groups],
            group_columns={k: [v[g] for g in groups] for k, v in self.group_columns.items()},
        )

    def add_rows(self, more: Samples) -> Samples:
        """The table with the samples of ``more`` after its own: more samples of the same groups
        (``more``'s group ids index this table's problems), with the same columns."""
        _same_columns([self, more])
        columns = {
            name: join([column, more.columns[name]]) for name, column in self.columns.items()
        }
        return dataclasses.replace(self, columns=columns)

    @staticmethod
    def concat(parts: Sequence[Samples], **info: Any) -> Samples:
        """Tables end to end, as one: their groups too (a later table's group ids offset by the
        groups before it), every column joined; ``info`` the joined table's (throughputs and
        times do not add up the same way for shards of a draw and draws of a step). The parts
        must have the same columns: none is dropped silently."""
        _same_columns(parts)
        names = list(parts[0].columns)
        offsets, total = [], 0
        for part in parts:
            offsets.append(total)
            total += len(part.prompt_ids)
        columns = {
            name: join([part.columns[name] for part in parts])
            for name in names
            if name != "group_ids"
        }
        columns["group_ids"] = torch.cat(
            [p.group_ids + o for p, o in zip(parts, offsets, strict=True)]
        )
        group_columns = {
            name: [x for part in parts for x in part.group_columns[name]]
            for name in parts[0].group_columns
        }
        return Samples(
            problems=[p for part in parts for p in part.problems],
            prompt_ids=[ids for part in parts for ids in part.prompt_ids],
            columns={name: columns[name] for name in names},
            group_columns=group_columns,
            info=info,
        )


def _same_columns(parts: Sequence[Samples]) -> None:
    """ValueError unless every table has the same columns (none is dropped silently)."""
    names = set(parts[0].columns)
    for part in parts[1:]:
        if set(part.columns) != names:
            raise ValueError(
                f"tables with other columns cannot be joined: {sorted(names)} and "
                f"{sorted(part.columns)}"
            )


Trajectories = Samples
"""The name a step's batch had before it was a table: pickles of it (a checkpoint's pending
batches) name this class."""


def _from_fields(state: dict[str, Any]) -> dict[str, Any]:
    """The table of a batch pickled with one attribute per field."""
    from rlvr.rewards.combined import RewardBreakdown

    terms = state.get("terms") or {}
    reasons = state.get("reasons") or [{} for _ in state["completion_ids"]]
    rewards = state["rewards"]
    columns: dict[str, Any] = {
        "completion_ids": state["completion_ids"],
        "sampler_logprobs": state["sampler_logprobs"],
        "finished": state["finished"],
        "texts": state["texts"],
        "group_ids": state["group_ids"],
        "breakdown": RewardBreakdown(
            total=rewards.tolist(),
            components=terms,
            weights=state.get("term_weights") or {},
            errors={label: 0 for label in terms},
            reasons={label: [r.get(label) for r in reasons] for label in terms},
        ),
        "rewards": rewards,
    }
    optional = ("action_mask", "turn_rewards", "anchors", "transcripts", "infos")
    for name in optional:
        if state.get(name) is not None:
            columns[name] = state[name]
    signals = dict(state.get("signals") or {})
    for name in ("greedy_rewards", "baselines", "reference_rewards"):  # before signals had names
        if state.get(name) is not None:
            signals[name] = state[name]
    columns.update({SIGNAL + name: values for name, values in signals.items()})
    group_columns = {
        name: state[name]
        for name in ("demonstration_ids", "demonstration_mask")
        if state.get(name) is not None
    }
    info = {"tokens_per_s": state.get("tokens_per_s", 0.0)}
    info["policy_version"] = state.get("policy_version", 0)
    return {
        "problems": state["problems"],
        "prompt_ids": state["prompt_ids"],
        "columns": columns,
        "group_columns": group_columns,
        "info": info,
    }


Sampled = tuple[int, Samples, dict[str, float]]
"""A batch sampled ahead of its step (``rollout.max_staleness``): (step, batch, its sampling
metrics); a checkpoint stores the pending ones."""
