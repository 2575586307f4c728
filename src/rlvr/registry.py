"""Registries: the named things a config selects (advantage estimators, policy losses,
aggregations, KL estimators, group selectors, credit rules, presets, curricula, stages, rewards,
tasks, environments, ecosystems, backends). Each is a :class:`Registry`: a dict from name to
part that refuses a name twice and whose unknown-name error lists every registered name, users'
plug-ins included (:mod:`rlvr.plugins`).

A registry can hold what is expensive to import as a lazy ``"module:attr"`` entry
(:meth:`Registry.add_lazy`), imported the first time it is looked up; it can import the modules
whose import registers its built-in entries when it is first read (``modules``); and a name
``PREFIX<placeholder>`` is a family: ``PREFIX<id>`` finds it with the id
(:meth:`Registry.lookup`, e.g. ``gem:<env_id>`` for ``gem:game:GuessTheNumber-v0``).
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

V = TypeVar("V")


@dataclass(frozen=True)
class Lazy:
    """A registry entry imported when first looked up: ``target`` is ``"module:attr"``."""

    target: str

    def load(self) -> Any:
        module, _, attr = self.target.partition(":")
        value: Any = importlib.import_module(module)
        for part in attr.split("."):
            value = getattr(value, part)
        return value


class Registry(dict[str, V]):
    """Name -> part, for one kind of part.

    Args:
        kind: names the part in messages, e.g. "advantage estimator".
        modules: modules whose import registers the built-in entries, imported before the
            registry is first read.
        same: ``same(old, new)``: registering ``new`` under a taken name replaces ``old``
            instead of failing (e.g. a module imported twice registers its function again).
    """

    def __init__(
        self,
        kind: str,
        modules: Iterable[str] = (),
        same: Callable[[Any, Any], bool] | None = None,
    ) -> None:
        super().__init__()
        self.kind = kind
        self.descriptions: dict[str, str] = {}
        self._modules = tuple(modules)
        self._loaded = not self._modules
        self._loading = False
        self._same = same
        self._lock = threading.RLock()

    def add(self, name: str, value: V, description: str = "") -> V:
        """Register ``value`` as ``name`` (with one line on what it is); ValueError if the name
        is taken (unless ``same`` says the new value is the old one again)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} needs a non-empty string name, got {name!r}")
        with self._lock:
            if dict.__contains__(self, name):
                old = dict.__getitem__(self, name)
                if self._same is None or isinstance(old, Lazy) or not self._same(old, value):
                    raise ValueError(f"{self.kind} {name!r} is already registered")
            dict.__setitem__(self, name, value)
            if description:
                self.descriptions[name] = description
        return value

    def add_lazy(self, name: str, target: str, description: str = "") -> None:
        """Register ``"module:attr"`` as ``name``, imported when first looked up."""
        if target.count(":") != 1 or not all(target.split(":")):
            raise ValueError(f"{self.kind} {name!r}: a lazy entry is 'module:attr', got {target!r}")
        self.add(name, Lazy(target), description)  # type: ignore[arg-type]

    def _load_modules(self) -> None:
        """Import ``modules`` once, before the registry is first read; a reader in another
        thread waits for them, one in this thread (a module reading its own registry while it
        registers) reads what is there."""
        if self._loaded:
            return
        with self._lock:
            if self._loaded or self._loading:
                return
            self._loading = True
            try:
                for module in self._modules:
                    importlib.import_module(module)
                self._loaded = True  # a module that failed is imported again next time
            finally:
                self._loading = False

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def __getitem__(self, name: str) -> V:
        self._load_modules()
        value = dict.__getitem__(self, name)
        if isinstance(value, Lazy):
            value = value.load()
            dict.__setitem__(self, name, value)
        return value

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return self[name] if name in self else default

    def __contains__(self, name: object) -> bool:
        self._load_modules()
        return dict.__contains__(self, name)

    def __iter__(self) -> Iterator[str]:
        self._load_modules()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._load_modules()
        return dict.__len__(self)

    def keys(self) -> Any:
        self._load_modules()
        return dict.keys(self)

    def values(self) -> list[V]:  # type: ignore[override]
        return [self[name] for name in self]

    def items(self) -> list[tuple[str, V]]:  # type: ignore[override]
        return [(name, self[name]) for name in self]

    def lookup(self, name: str) -> tuple[str, str | None] | None:
        """``(entry, id)``: ``(name, None)`` for a registered name, ``(PREFIX<placeholder>,
        id)`` for a name ``PREFIX<id>`` of a family entry; None when neither."""
        if name in self:
            return name, None
        for key in self:
            if key.endswith(">") and "<" in key:
                prefix = key[: key.index("<")]
                if name.startswith(prefix) and len(name) > len(prefix):
                    return key, name[len(prefix) :]
        return None

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
    ``label`` names the part in the message (e.g. "advantage")."""
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
