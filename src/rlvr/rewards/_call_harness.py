"""Runs inside the sandbox as ``main.py``, in the solution's process: execute ``solution.py``,
then evaluate each call expression of ``calls.json`` in its namespace and write one line per
call, ``<nonce> <index> ok <tagged JSON>`` or ``<nonce> <index> err <JSON message>``. It never
sees an expected value or a verdict (see :mod:`rlvr.rewards.verdict`): whatever the solution
does to this process only changes the values it reports.
"""

import json
import os

plain = {}
with open("_plain.py") as f:
    exec(compile(f.read(), "_plain.py", "exec"), plain)


def _emit(nonce, index, kind, body):
    os.write(1, f"\n{nonce} {index} {kind} {body}\n".encode())


def main():
    with open("calls.json") as f:
        spec = json.load(f)
    os.remove("calls.json")
    nonce, calls = spec["nonce"], spec["calls"]
    with open("solution.py", "rb") as f:
        source = f.read()
    namespace = {"__name__": "solution"}
    try:
        exec(compile(source, "solution.py", "exec"), namespace)
        for module in spec["imports"]:
            exec(compile(module, "<imports>", "exec"), namespace)
    except BaseException as err:  # noqa: BLE001 - the solution failing to load fails every call
        message = json.dumps(f"solution: {type(err).__name__}: {err}"[:300])
        for index in range(len(calls)):
            _emit(nonce, index, "err", message)
        return
    for index, call in enumerate(calls):
        try:
            value = eval(compile(call, f"<call {index}>", "eval"), namespace)
            body, kind = json.dumps(plain["encode"](value)), "ok"
        except BaseException as err:  # noqa: BLE001 - reported per call
            body, kind = json.dumps(f"{type(err).__name__}: {err}"[:300]), "err"
        _emit(nonce, index, kind, body)


if __name__ == "__main__":
    main()
