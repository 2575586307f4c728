"""Registries: the named parts a config selects (advantage estimators, policy losses,
aggregations, KL estimators, sample and group filters, credit rules, presets, curricula,
environments). Each is a :class:`Registry`, a dict from name to part that refuses a name twice
and whose unknown-name error lists every registered name, users' plug-ins included
(:mod:`rlvr.plugins`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

V = TypeVar("V")


class Registry(dict[str, V]):
    """Name -> part, for one kind of part (``kind`` names it in messages, e.g.
    "advantage estimator")."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def add(self, name: str, value: V) -> V:
        """Register ``value`` as ``name``; ValueError if the name is taken."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} needs a non-empty string name, got {name!r}")
        if name in self:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self[name] = value
        return value

    def unknown(self, name: object) -> str:
        """The message for a name that is not registered: what is."""
        return f"unknown {self.kind} {name!r}; registered: {', '.join(sorted(self)) or 'none'}"

    def get_or_raise(self, name: str) -> V:
        """The part registered as ``name``; ValueError listing the registered names."""
        if name not in self:
            raise ValueError(self.unknown(name))
        return self[name]


def check_params(
    fn: Callable[..., Any], params: Mapping[str, Any], label: str, reserved: Iterable[str] = ()
) -> None:
    """ValueError unless every key of ``params`` is a keyword argument ``fn`` accepts (any, when
    it takes ``**kwargs``) and none of ``reserved`` (arguments the caller fills itself).
    ``label`` names the part in the message (e.g. "algorithm.params.advantage (rank)")."""
    taken = sorted(set(params) & set(reserved))
    if taken:
        raise ValueError(f"{label}: {', '.join(taken)} is set by rlvr, not by params")
    signature = inspect.signature(fn)
    kinds = {p.kind for p in signature.parameters.values()}
    if inspect.Parameter.VAR_KEYWORD in kinds:
        return
    accepted = [
        name
        for name, p in signature.parameters.items()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and name not in reserved
    ]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(
            f"{label}: unknown parameter(s) {', '.join(unknown)}; "
            f"{getattr(fn, '__name__', 'it')} accepts: {', '.join(accepted) or 'none'}"
        )
