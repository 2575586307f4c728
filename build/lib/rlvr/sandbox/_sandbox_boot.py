"""First code of the sandboxed program's interpreter: :func:`main`, called by the sandbox's
zygote in the worker it forked (``_sandbox_zygote.py``), or run as ``python -I -S -B -c <this
source> <config json>`` by a worker that had to exec a fallback interpreter.

It restores the default action of ``SIGXFSZ`` (see ``main``), installs a best-effort audit
hook (PEP 578) for the protections the kernel could not give this run (``hook_net`` when there
is no network namespace, ``hook_fs`` when there is no read-only mount namespace), then runs
``main.py`` from the working directory as ``__main__``.
An audit hook is not a security boundary: native code (ctypes, extension modules) bypasses it.
"""

import atexit
import json
import os
import signal
import sys
import traceback
import types

_NET_EVENTS = frozenset(
    {
        "socket.connect",
        "socket.bind",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
    }
)
# Events whose first argument is a path that must stay inside the workdir, with the position
# of their dir_fd argument (a path relative to a directory fd cannot be checked: refused).
_FS_PATH_EVENTS = {
    "os.remove": 1,
    "os.rmdir": 1,
    "os.mkdir": 2,
    "os.chmod": 2,
    "os.chown": 3,
    "os.truncate": None,
    "os.utime": 3,
    "os.chflags": None,
    "os.lchflags": None,
    "os.mkfifo": 2,
    "os.mknod": 3,
    "shutil.rmtree": 1,
}
# Events with two paths (source, destination), both inside the workdir.
_FS_PAIR_EVENTS = frozenset({"os.rename", "os.link", "os.symlink"})
# Ways to run code the hook cannot see.
_ESCAPE_EVENTS = frozenset(
    {"os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen", "ctypes.dlopen"}
)
AT_FDCWD = -100
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _make_hook(workdir: str, hook_net: bool, hook_fs: bool):
    root = os.path.realpath(workdir)
    allowed = {"/dev/null"}

    def inside(path) -> bool:
        if isinstance(path, int):
            return True  # an fd the program already opened
        real = os.path.realpath(os.fsdecode(path))
        return real in allowed or real == root or real.startswith(root + os.sep)

    def hook(event: str, args: tuple) -> None:
        if hook_net and event in _NET_EVENTS:
            raise PermissionError(f"sandbox: network access is disabled ({event})")
        if not hook_fs:
            return
        if event == "open":
            path, _mode, flags = args
            if flags is not None and flags & _WRITE_FLAGS and not inside(path):
                raise PermissionError(f"sandbox: writing outside the workdir: {path!r}")
        elif event in _FS_PATH_EVENTS:
            at = _FS_PATH_EVENTS[event]
            dir_fd = args[at] if at is not None and at < len(args) else None
            if not inside(args[0]) or dir_fd not in (None, -1, AT_FDCWD):
                raise PermissionError(f"sandbox: {event} outside the workdir: {args[0]!r}")
        elif event in _FS_PAIR_EVENTS:
            if not (inside(args[0]) and inside(args[1])):
                raise PermissionError(f"sandbox: {event} outside the workdir")
        elif event in _ESCAPE_EVENTS:
            raise PermissionError(f"sandbox: {event} is disabled")

    return hook


def main(cfg: dict) -> None:
    """Run ``main.py`` from ``cfg["workdir"]`` as ``__main__``, as ``python main.py`` would."""
    workdir = cfg["workdir"]
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it: a file past the limit
    # then ends the program ("file_size") instead of an EFBIG error it could swallow
    if "random" in sys.modules:  # a forked interpreter: not the zygote's (or a sibling's) stream
        sys.modules["random"].seed()
    if cfg["hook_net"] or cfg["hook_fs"]:
        sys.addaudithook(_make_hook(workdir, cfg["hook_net"], cfg["hook_fs"]))
    sys.argv = ["main.py"]
    sys.path.insert(0, workdir)
    module = types.ModuleType("__main__")
    module.__file__ = "main.py"
    sys.modules["__main__"] = module  # the program's own (pickle finds its classes there)
    try:
        with open(os.path.join(workdir, "main.py"), "rb") as f:
            code = compile(f.read(), "main.py", "exec")
        exec(code, module.__dict__)
    except SystemExit:
        raise
    except BaseException as err:  # noqa: BLE001 - shown like an uncaught exception
        tb = err.__traceback__.tb_next if err.__traceback__ is not None else None
        traceback.print_exception(type(err), err, tb)
        sys.exit(1)


def exit_status(stop: SystemExit) -> int:
    """The exit status of a ``SystemExit``, as the interpreter computes it: None is 0, an int
    is itself, anything else is printed to stderr and is 1."""
    code = stop.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def finish(status: int) -> None:
    """End a forked interpreter as a script's end would, without the interpreter's
    finalization (tearing down every module of a forked process writes to every page it
    shares with the zygote: ten milliseconds and more): wait for non-daemon threads, run the
    ``atexit`` handlers, flush ``sys.stdout`` and ``sys.stderr``, then ``_exit``. Other file
    objects the program left open and unflushed are not flushed: their data could only go to
    the run's own tmpfs, discarded with it, or to a descriptor the program reopened itself."""
    if "threading" in sys.modules:
        sys.modules["threading"]._shutdown()
    atexit._run_exitfuncs()
    for stream in {
        id(s): s for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    }.values():
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - closed, replaced, broken pipe: as at finalization
            pass
    os._exit(status)


def run(cfg: dict) -> None:
    """Run the program in this (forked) interpreter and end the process with its status."""
    try:
        main(cfg)
        status = 0
    except SystemExit as stop:
        status = exit_status(stop)
    finish(status)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
