"""The sandbox's zygote: a pre-started interpreter that forks one supervisor per program.
Started by :mod:`rlvr.sandbox.sandbox` as ``python -I -S -B -c <this source> <config json>``
(one per trainer process, on first use); never imported.

Starting a Python interpreter costs more than everything else a sandboxed run does, so the
zygote starts once and then, for each request on its socket (a config as JSON, and the run's
stdin, stdout, stderr, info pipe and channel as fds), forks a process that becomes the run's
launcher (``_sandbox_launcher.py``: namespaces, file view, cgroup, init, worker, rlimits,
uid, seccomp, exactly as for a fresh interpreter), and answers with a pidfd of it. The
program then runs in the worker, a fork of this already started interpreter: its start-up is
a ``fork``, not an interpreter's.

What the zygote holds is what every program may see: the standard library modules it
imported and the launcher's code. It never reads a run's files (the launcher reads them after
the fork), so nothing of one run (a checker's tests) can be found in the memory of another.
It ignores ``SIGCHLD`` (the kernel reaps its children) and exits when the trainer's end of
its socket closes (the trainer exited, or stopped it); its launchers die with it
(``PR_SET_PDEATHSIG``), and with them every run.
"""

import json
import os
import signal
import socket
import sys
import types

MAX_FDS = 64
MAX_REQUEST = 1 << 20


def _module(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"{name}.py", "exec"), module.__dict__)
    return module


def serve(cfg: dict) -> dict:
    """Answer requests until the socket closes (then exit). Returns only in a run's worker,
    with the boot configuration of the program it runs."""
    launcher = _module("_sandbox_launcher", cfg["launcher"])
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    channel = socket.socket(fileno=cfg["socket_fd"])
    me = os.getpid()
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(channel, MAX_REQUEST, MAX_FDS)
        except OSError:
            os._exit(0)
        if not message:
            os._exit(0)  # the trainer closed its end
        request = json.loads(message)
        request.update(zygote_pid=me, boot=cfg["boot"])
        try:
            pid = os.fork()
        except OSError as err:
            for fd in fds:
                os.close(fd)
            channel.sendall(json.dumps({"error": str(err)}).encode())
            continue
        if pid == 0:
            channel.close()
            return launcher.launch(request, fds)
        for fd in fds:
            os.close(fd)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as err:  # e.g. a kernel before 5.3
            os.kill(pid, signal.SIGKILL)
            channel.sendall(json.dumps({"error": f"pidfd_open: {err}"}).encode())
            continue
        socket.send_fds(channel, [json.dumps({"pid": pid}).encode()], [pidfd])
        os.close(pidfd)


config = json.loads(sys.argv[1])
boot = _module("_sandbox_boot", config["boot"])
program = serve(config)
del config
boot.run(program)  # as ``python main.py`` would, and exits with its status
