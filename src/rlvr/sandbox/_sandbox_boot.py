"""First code of the sandboxed interpreter: run by the sandbox worker as
``python -I -S -B -c <this source> <config json>``; never imported for its side effects.

It restores the default action of ``SIGXFSZ`` (see ``main``), installs a best-effort audit
hook (PEP 578) for the protections the kernel could not give this run (``hook_net`` when there
is no network namespace, ``hook_fs`` when there is no read-only mount namespace), then runs
``main.py`` from the working directory as ``__main__``.
An audit hook is not a security boundary: native code (ctypes, extension modules) bypasses it.
"""

import builtins
import json
import os
import signal
import sys
import traceback

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


def main() -> None:
    cfg = json.loads(sys.argv[1])
    workdir = cfg["workdir"]
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it: a file past the limit
    # then ends the program ("file_size") instead of an EFBIG error it could swallow
    if cfg["hook_net"] or cfg["hook_fs"]:
        sys.addaudithook(_make_hook(workdir, cfg["hook_net"], cfg["hook_fs"]))
    sys.argv = ["main.py"]
    sys.path.insert(0, workdir)
    namespace = {"__name__": "__main__", "__file__": "main.py", "__builtins__": builtins}
    try:
        with open(os.path.join(workdir, "main.py"), "rb") as f:
            code = compile(f.read(), "main.py", "exec")
        exec(code, namespace)
    except SystemExit:
        raise
    except BaseException as err:  # noqa: BLE001 - shown like an uncaught exception
        tb = err.__traceback__.tb_next if err.__traceback__ is not None else None
        traceback.print_exception(type(err), err, tb)
        sys.exit(1)


if __name__ == "__main__":
    main()
