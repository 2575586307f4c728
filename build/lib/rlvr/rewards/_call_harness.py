"""Runs inside the sandbox as ``main.py``, in the solution's process: execute ``solution.py``,
then make each call of ``calls.json`` and write one line per call, ``<nonce> <index> ok
<tagged JSON>`` or ``<nonce> <index> err <JSON message>`` (see :mod:`rlvr.rewards.verdict`). A
call is ``{"fn": name, "args": [...]}``: ``name(*args)`` for a top-level function of the
solution, else ``Solution().name(*args)`` (LeetCode style, a fresh instance per call). The
optional ``prelude`` runs in the namespace before the solution. This process never sees an
expected value or a verdict: whatever the solution does to it only changes the values it
reports.
"""

import json
import os

plain = {}
with open("_plain.py") as f:
    exec(compile(f.read(), "_plain.py", "exec"), plain)


def _emit(nonce, index, kind, body):
    os.write(1, f"\n{nonce} {index} {kind} {body}\n".encode())


def _function(namespace, name):
    """The solution's top-level function ``name``, else the method of a fresh ``Solution()``."""
    found = namespace.get(name)
    if callable(found):
        return found
    cls = namespace.get("Solution")
    if isinstance(cls, type) and hasattr(cls, name):
        return getattr(cls(), name)
    raise NameError(f"the solution defines neither a function {name} nor Solution.{name}")


def main():
    with open("calls.json") as f:
        spec = json.load(f)
    os.remove("calls.json")
    nonce, calls = spec["nonce"], spec["calls"]
    with open("solution.py", "rb") as f:
        source = f.read()
    namespace = {"__name__": "solution"}
    try:
        exec(compile(spec.get("prelude", ""), "<prelude>", "exec"), namespace)
        exec(compile(source, "solution.py", "exec"), namespace)
    except BaseException as err:  # noqa: BLE001 - the solution failing to load fails every call
        message = json.dumps(f"solution: {type(err).__name__}: {err}"[:300])
        for index in range(len(calls)):
            _emit(nonce, index, "err", message)
        return
    for index, call in enumerate(calls):
        try:
            value = _function(namespace, call["fn"])(*call["args"])
            body, kind = json.dumps(plain["encode"](value)), "ok"
        except BaseException as err:  # noqa: BLE001 - reported per call
            body, kind = json.dumps(f"{type(err).__name__}: {err}"[:300]), "err"
        _emit(nonce, index, kind, body)


if __name__ == "__main__":
    main()
