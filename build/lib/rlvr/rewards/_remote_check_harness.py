"""Runs inside the sandbox as ``main.py``, in the checker's process, which never holds the
solution (see :mod:`rlvr.rewards.remote`): bind each name the solution defines to a stand-in
that forwards calls over the channel and returns the answers (plain data, or an opaque
:class:`Remote` for anything else), run the tests of ``checks.json`` one after another in one
namespace, and write ``<nonce> <index> pass`` or ``<nonce> <index> fail <JSON message>``
(``load`` instead of an index when the solution did not load), the format
:func:`rlvr.rewards.code.parse_harness_output` reads. A failed assert's message shows the last
values the solution returned in that test; ``<nonce> note compared_object`` says a test
compared an object of the solution (not plain data) with something.

Every answer is checked here: a malformed or out-of-order line, an unknown type or a channel
that ends fails the test that was waiting for it. A :class:`Remote` compares equal only to
itself, so no object of the solution can pass an assert by overriding ``__eq__``.
"""

import builtins
import json
import os

plain = {}
with open("_plain.py") as f:
    exec(compile(f.read(), "_plain.py", "exec"), plain)
MAX_LINE = 1 << 24
_NOT_RAISED = (SystemExit, KeyboardInterrupt, GeneratorExit)


class ChannelError(RuntimeError):
    """The solution's process sent something that is not an answer, or ended."""


class _Channel:
    def __init__(self, spec):
        self.requests = os.fdopen(spec["requests"], "wb")
        self.answers = os.fdopen(spec["responses"], "rb")
        self.next_id = 0
        self.returned = []  # the values of this test's calls, for a failed assert's message
        self.compared = False  # a test compared an object of the solution

    def receive(self):
        line = self.answers.readline(MAX_LINE)
        if not line.endswith(b"\n"):
            raise ChannelError("the solution's process ended or sent a line that is too long")
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            raise ChannelError("the solution's process sent a line that is not JSON") from None
        if type(message) is not dict:
            raise ChannelError("the solution's process sent a line that is not an object")
        return message

    def ask(self, target, op, attr=None, args=(), kwargs=None):
        self.next_id += 1
        request = {"id": self.next_id, "target": target, "op": op, "attr": attr}
        request["args"] = [_argument(a) for a in args]
        request["kwargs"] = {str(k): _argument(a) for k, a in (kwargs or {}).items()}
        try:
            self.requests.write((json.dumps(request) + "\n").encode())
            self.requests.flush()
        except OSError:
            raise ChannelError("the solution's process ended") from None
        answer = self.receive()
        if answer.get("id") != self.next_id:
            raise ChannelError("the solution's process answered out of turn")
        value = _result(answer, self)
        if op == "call":
            self.returned = [*self.returned[-2:], value]
        return value


def _argument(value):
    if type(value) is Remote:
        return {"h": value._handle}
    try:
        return {"v": plain["encode"](value)}
    except TypeError as err:
        raise TypeError(f"cannot pass {err} to the solution (plain data only)") from None


def _raise(kind, message):
    found = getattr(builtins, kind, None) if type(kind) is str else None
    if isinstance(found, type) and issubclass(found, BaseException):
        if not issubclass(found, _NOT_RAISED):
            raise found(message)
    raise RuntimeError(f"the solution raised {kind}: {message}")


def _result(answer, channel):
    if set(answer) == {"id", "ok"}:
        return plain["decode"](answer["ok"])
    if set(answer) == {"id", "handle", "type"} and type(answer["handle"]) is int:
        return Remote(channel, ["handle", answer["handle"]], str(answer["type"]))
    if set(answer) == {"id", "err"} and type(answer["err"]) is list and len(answer["err"]) == 2:
        _raise(*answer["err"])
    raise ChannelError("the solution's process sent a malformed answer")


class Remote:
    """A name or object of the solution: calls and attribute reads are forwarded; equal only
    to itself; not iterable, not hashable by value, no arithmetic."""

    def __init__(self, channel, target, kind):
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_kind", kind)

    @property
    def _handle(self):
        if self._target[0] != "handle":
            raise TypeError(f"cannot pass the solution's {self._target[1]} back to it")
        return self._target[1]

    def __call__(self, *args, **kwargs):
        return self._channel.ask(self._target, "call", None, args, kwargs)

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return self._channel.ask(self._target, "get", attr)

    def __setattr__(self, attr, value):
        raise TypeError("cannot set attributes of the solution's objects from a test")

    def __eq__(self, other):
        self._channel.compared = True
        return self is other

    def __ne__(self, other):
        self._channel.compared = True
        return self is not other

    __hash__ = object.__hash__

    def __repr__(self):
        kind, key = self._target
        return f"<the solution's {self._kind} object>" if kind == "handle" else f"<{key}>"


def _emit(nonce, index, message):
    if message is None:
        line = f"\n{nonce} {index} pass\n"
    else:
        line = f"\n{nonce} {index} fail {json.dumps(message[:300])}\n"
    os.write(1, line.encode())


def _namespace(names, channel):
    namespace = {"__name__": "__main__"}
    for name, entry in names.items():
        if type(name) is not str or hasattr(builtins, name) or type(entry) is not dict:
            continue  # a solution cannot shadow what a test calls from builtins
        if entry.get("kind") == "value":
            namespace[name] = plain["decode"](entry["value"])
        else:
            namespace[name] = Remote(channel, ["name", name], str(entry.get("kind")))
    return namespace


def main():
    with open("checks.json") as f:
        spec = json.load(f)
    nonce, tests = spec["nonce"], spec["tests"]
    channel = _Channel(spec)
    try:
        first = channel.receive()
        if "load_error" in first:
            _emit(nonce, "load", str(first["load_error"]))
            return
        namespace = _namespace(first["names"], channel)
    except BaseException as err:  # noqa: BLE001 - nothing to test against
        _emit(nonce, "load", f"{type(err).__name__}: {err}")
        return
    for index, test in enumerate(tests):
        channel.returned = []
        try:
            exec(compile(test, f"<test {index}>", "exec"), namespace)
        except AssertionError as err:
            shown = ", ".join(repr(v)[:80] for v in channel.returned)
            returned = f"the solution returned {shown}" if shown else ""
            _emit(nonce, index, f"AssertionError: {str(err) or returned}")
        except BaseException as err:  # noqa: BLE001 - each test's failure is reported
            _emit(nonce, index, f"{type(err).__name__}: {err}")
        else:
            _emit(nonce, index, None)
    if channel.compared:
        os.write(1, f"\n{nonce} note compared_object\n".encode())


if __name__ == "__main__":
    main()
