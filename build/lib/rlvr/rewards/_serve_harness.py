"""Runs inside the sandbox as ``main.py``, in the solution's process (see
:mod:`rlvr.rewards.remote`): execute ``solution.py``, send its names to the checker, then answer
the checker's requests until it closes the channel. One JSON object per line, both ways.

Names (first line out): ``{"names": {name: {"kind": "callable" | "object"} | {"kind": "value",
"value": tagged}}}``, or ``{"load_error": message}``. A request ``{"id", "target": ["name", n] |
["handle", k], "op": "call" | "get", "attr", "args", "kwargs"}`` (arguments ``{"v": tagged}``
or ``{"h": handle}``) gets ``{"id", "ok": tagged}`` for plain data, ``{"id", "handle": k,
"type": name}`` for anything else (kept here, opaque to the checker), or ``{"id", "err": [type,
message]}``. This process never sees a test, an expected value or a verdict: whatever the
solution does to it only changes the values it answers with.
"""

import builtins
import json
import os

plain = {}
with open("_plain.py") as f:
    exec(compile(f.read(), "_plain.py", "exec"), plain)
MAX_LINE = 1 << 24


def _names(namespace):
    names = {}
    for name, value in namespace.items():
        if name.startswith("__") or hasattr(builtins, name) or type(value).__name__ == "module":
            continue
        try:
            names[name] = {"kind": "value", "value": plain["encode"](value)}
        except TypeError:
            names[name] = {"kind": "callable" if callable(value) else "object"}
    return names


def _answer(request, namespace, handles):
    kind, key = request["target"]
    target = namespace[key] if kind == "name" else handles[key]
    if request["op"] == "get":
        value = getattr(target, request["attr"])
    else:
        if request.get("attr") is not None:
            target = getattr(target, request["attr"])
        args = [handles[a["h"]] if "h" in a else plain["decode"](a["v"]) for a in request["args"]]
        kwargs = {
            k: handles[a["h"]] if "h" in a else plain["decode"](a["v"])
            for k, a in request["kwargs"].items()
        }
        value = target(*args, **kwargs)
    try:
        return {"ok": plain["encode"](value)}
    except TypeError:
        handles.append(value)
        return {"handle": len(handles) - 1, "type": type(value).__name__}


def _send(out, message):
    out.write((json.dumps(message) + "\n").encode())
    out.flush()


def main():
    with open("serve.json") as f:
        spec = json.load(f)
    os.remove("serve.json")
    requests = os.fdopen(spec["requests"], "rb")
    out = os.fdopen(spec["responses"], "wb")
    with open("solution.py", "rb") as f:
        source = f.read()
    namespace = {"__name__": "solution"}
    try:
        exec(compile(source, "solution.py", "exec"), namespace)
        _send(out, {"names": _names(namespace)})
    except BaseException as err:  # noqa: BLE001 - the solution failing to load fails every test
        _send(out, {"load_error": f"{type(err).__name__}: {err}"[:300]})
        return
    handles = []
    while line := requests.readline(MAX_LINE):
        request = json.loads(line)
        try:
            answer = _answer(request, namespace, handles)
        except BaseException as err:  # noqa: BLE001 - reported to the checker
            answer = {"err": [type(err).__name__, str(err)[:300]]}
        _send(out, {"id": request["id"], **answer})


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # the checker is done
        pass
