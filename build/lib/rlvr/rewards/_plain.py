"""Plain data across a process boundary, as tagged JSON: ``None``, ``bool``, ``int``, ``float``,
``str``, and lists, tuples, sets, frozensets and dicts of them, checked by exact type (a
subclass, e.g. an ``int`` whose ``__eq__`` always succeeds, is not plain data). Generators are
read into lists. Standalone (no imports from rlvr): the sandbox harnesses load this file with
``exec``, and :mod:`rlvr.rewards.verdict` imports it.
"""

import math

_ATOMS = {type(None): "none", bool: "bool", int: "int", str: "str"}
_CONTAINERS = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}
MAX_DEPTH = 50
MAX_ITEMS = 100_000


def encode(value, depth=0):
    """``{"t": type, "v": value}`` for plain data; TypeError naming the first other type."""
    if depth > MAX_DEPTH:
        raise TypeError("nested too deeply")
    kind = type(value)
    if kind in _ATOMS:
        return {"t": _ATOMS[kind], "v": value}
    if kind is float:
        return {"t": "float", "v": value if math.isfinite(value) else repr(value)}
    if kind.__name__ == "generator" and kind.__module__ == "builtins":
        value, kind = list(_bounded(value)), list
    if kind in _CONTAINERS:
        items = list(_bounded(value))
        if kind in (set, frozenset):
            items.sort(key=repr)
        return {"t": _CONTAINERS[kind], "v": [encode(v, depth + 1) for v in items]}
    if kind is dict:
        pairs = list(_bounded(value.items()))
        return {"t": "dict", "v": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in pairs]}
    raise TypeError(f"a {kind.__name__}, not plain data")


def _bounded(items):
    for k, item in enumerate(items):
        if k >= MAX_ITEMS:
            raise TypeError(f"more than {MAX_ITEMS} items")
        yield item


def decode(data):
    """The value of a tree written by :func:`encode`; ValueError for anything else."""
    if type(data) is not dict or set(data) != {"t", "v"}:
        raise ValueError("not a tagged value")
    kind, value = data["t"], data["v"]
    if kind == "none" and value is None:
        return None
    if kind in ("bool", "int", "str") and type(value).__name__ == kind:
        return value
    if kind == "float" and type(value) in (float, int):
        return float(value)
    if kind == "float" and value in ("nan", "inf", "-inf"):
        return float(value)
    if kind in ("list", "tuple", "set", "frozenset") and type(value) is list:
        items = [decode(v) for v in value]
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[kind](items)
    if (
        kind == "dict"
        and type(value) is list
        and all(type(p) is list and len(p) == 2 for p in value)
    ):
        return {decode(k): decode(v) for k, v in value}
    raise ValueError(f"bad tagged value of type {kind!r}")
