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

The docs' examples and the tests that run ``rlvr`` as a process (a run killed or interrupted,
then resumed; ``rlvr serve``) start their commands through it (:func:`rlvr_command`): the same
command, without those seconds of imports each.

Run: ``python tests/cli_forkserver.py SOCKET`` (prints ``ready`` once it listens; it exits when
the process that started it does).
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

LAUNCHER = """#!{python} -S
# rlvr through the tests' fork server (tests/cli_forkserver.py)
import json, os, signal, socket, sys

conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect({socket!r})
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
"""A launcher (``{python}``: this interpreter; ``{socket}``: the server's socket; ``{argv0}``: what comes before its arguments in the
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

    parent = os.getppid()
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
        if os.getppid() != parent:  # the test process is gone: so are its commands
            for pid in running.values():
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return
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


@dataclass(frozen=True)
class Server:
    """A running fork server: its process, its directory (the socket, the launchers), and the
    launchers of ``rlvr`` (``bin/rlvr``) and of a Python script (``python SCRIPT``)."""

    process: subprocess.Popen
    where: Path
    rlvr: Path
    python: Path

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.where, ignore_errors=True)


def start(env: dict[str, str]) -> Server:
    """Start a fork server with the environment ``env`` (what its commands read at import) and
    write its two launchers; returns once it listens."""
    where = Path(tempfile.mkdtemp(prefix="rlvr-fork-"))  # short: a socket path has <= 107 bytes
    socket_path = str(where / "socket")
    process = subprocess.Popen(
        [sys.executable, __file__, socket_path],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    if process.stdout.readline() != "ready\n":
        process.kill()
        raise RuntimeError(f"the fork server did not start (exit status {process.wait()})")
    script = Path(sys.executable).parent / "rlvr"
    rlvr = where / "bin" / "rlvr"
    rlvr.parent.mkdir()
    python = where / "python"  # not on a PATH: a script's own `python` is the real interpreter
    for path, argv0, python_script in ((rlvr, [str(script)], False), (python, [], True)):
        path.write_text(
            LAUNCHER.format(
                python=sys.executable, socket=socket_path, argv0=argv0, python_script=python_script
            )
        )
        path.chmod(0o755)
    return Server(process, where, rlvr, python)


_OWN: list[Server] = []


def rlvr_command() -> list[str]:
    """What runs ``rlvr`` through this test process's own fork server (started on first use
    with this process's environment, unbuffered, the tests' directory importable; stopped when
    the process exits), in place of ``[sys.executable, "-m", "rlvr.cli"]``: the command's
    output, exit status and signals are the installed script's
    (``tests/test_docs.py::test_the_launcher_runs_rlvr_as_the_installed_script_does``)."""
    if not _OWN:
        tests = str(Path(__file__).resolve().parent)
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (tests, path) if p)
        _OWN.append(start(env))
        atexit.register(_OWN[0].close)
    return [str(_OWN[0].rlvr)]


if __name__ == "__main__":
    serve(sys.argv[1])
