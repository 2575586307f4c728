"""A fork server for the ``rlvr`` commands and the Python examples of the docs' runnable
examples (tests/test_docs.py).

Every ``rlvr`` command (and every Python example) starts by importing torch and transformers'
model code, about 4.5 s of CPU, and the docs' examples run 27 commands and 7 Python scripts:
most of what the docs tests cost. This server imports what a command imports once, then forks
a child per command. A tiny launcher (:data:`LAUNCHER`: ``rlvr``, first on the examples' PATH,
and the ``python`` that runs the Python examples) hands the server its arguments, working
directory, environment and standard streams; the child runs ``rlvr.cli.app`` as the installed
``rlvr`` script does, or the script as ``python SCRIPT`` does (``runpy``: ``__main__``, its
directory first on ``sys.path``), in its own session; the launcher exits with the child's status, passes it
the signals it gets (SIGINT, SIGTERM, SIGHUP), and if the launcher is killed the server kills
the child's process group. What differs from a fresh process: the modules are imported before
the command's environment is set, so the server starts with the examples' environment
(:func:`tests.test_docs.block_env`) and values read at import time agree.

Run: ``python tests/cli_forkserver.py SOCKET`` (prints ``ready`` once it listens).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
import traceback

LAUNCHER = """#!{python} -S
# rlvr through the tests' fork server (tests/cli_forkserver.py)
import json, os, signal, socket, sys

conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect(os.environ["RLVR_TEST_FORKSERVER"])
request = {{"argv": [*{argv0!r}, *sys.argv[1:]], "cwd": os.getcwd(), "env": dict(os.environ),
           "python": {python_script!r}}}
socket.send_fds(conn, [json.dumps(request).encode() + b"\\n"], [0, 1, 2])
replies = conn.makefile("r")
pid = int(replies.readline())
for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(number, lambda signum, frame: os.kill(pid, signum))
status = replies.readline()
code = int(status) if status else 1
sys.exit(code if code >= 0 else 128 - code)
"""
"""A launcher (``{python}``: this interpreter; ``{argv0}``: what comes before its arguments in the
child's ``argv``, ``[the installed rlvr script's path]`` for ``rlvr``, ``[]`` for a Python
script, whose path is its first argument; ``{python_script}``: whether the child runs a Python
script or ``rlvr``); ``-S`` starts it without site-packages, in milliseconds."""


def _request(conn: socket.socket) -> tuple[dict, list[int]]:
    """A launcher's request (JSON up to a newline) and the three standard streams it sent."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 20)
        if not more:
            raise ConnectionError("the launcher closed before its request ended")
        data += more
    return json.loads(data), fds


def _child(request: dict, fds: list[int]) -> None:
    """In the forked child: become the command (streams, directory, environment, argv, default
    signal handling), run ``rlvr.cli.app`` or the Python script and exit with its status."""
    os.setsid()
    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(number, signal.SIG_DFL)
    sys.argv = list(request["argv"])
    code = 1
    try:
        if request["python"]:
            import runpy

            sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
            runpy.run_path(sys.argv[0], run_name="__main__")
        else:
            from rlvr.cli import app

            app()
        code = 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
    except BaseException:  # as the interpreter reports an uncaught exception
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def serve(path: str) -> None:
    """Import what an ``rlvr`` command imports, listen at ``path``, fork a child per request."""
    import rlvr.cli  # noqa: F401
    import rlvr.evaluation  # noqa: F401
    import rlvr.export  # noqa: F401
    import rlvr.trainer  # noqa: F401  (torch, transformers' model code)

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    print("ready", flush=True)
    selector = selectors.DefaultSelector()
    selector.register(server, selectors.EVENT_READ)
    running: dict[socket.socket, int] = {}
    while True:
        for key, _ in selector.select(timeout=0.05):
            if key.fileobj is server:
                conn, _ = server.accept()
                try:
                    request, fds = _request(conn)
                except (ConnectionError, ValueError, OSError):
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    server.close()
                    for other in running:
                        other.close()
                    conn.close()
                    _child(request, fds)
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"{pid}\n".encode())
                running[conn] = pid
                selector.register(conn, selectors.EVENT_READ)
            else:  # a launcher only ever closes: it was killed, so its command ends too
                conn = key.fileobj  # type: ignore[assignment]
                pid = running.pop(conn)
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.waitpid(pid, 0)
                selector.unregister(conn)
                conn.close()
        for conn, pid in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                try:
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass
                del running[conn]
                selector.unregister(conn)
                conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
