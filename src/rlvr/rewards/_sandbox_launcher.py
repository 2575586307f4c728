"""The sandbox's supervisor: run by :func:`rlvr.rewards.sandbox.run_python` as
``python -I -S -B -c <this source> <config json>``; never imported for its side effects.

It is trusted code running in a fresh, single-threaded process (so no ``preexec_fn`` is needed
in the trainer). Steps:

1. launcher: tie its life to the trainer (``PR_SET_PDEATHSIG``), become a child subreaper;
   enter new namespaces where the kernel allows (network, IPC, mount with a read-only root and
   a writable workdir, PID; a user namespace first when not root); report the layers on the
   info pipe; after init ends, kill and reap every process the program left behind;
2. init (forked; PID 1 of the new PID namespace when there is one; leader of its own process
   group, which the parent kills at a timeout): mount a fresh ``/proc``, fork the worker, wait
   for it and report its wait status on the info pipe. When init exits, the kernel kills every
   process left in its PID namespace;
3. worker: set the rlimits, chdir to the workdir, drop to the sandbox uid/gid (when root), set
   ``PR_SET_NO_NEW_PRIVS`` and ``PR_SET_PDEATHSIG``, then exec ``python -I -S -B`` on the boot
   code. Any failure before exec is reported as ``setup_error`` on the info pipe, which the
   untrusted program never holds, so it cannot forge one.
"""

import ctypes
import json
import os
import resource
import signal
import sys
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x2, 0x4, 0x8
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 0x1, 0x2
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
SYS_MOUNT_SETATTR = 442  # the same number on every Linux architecture (since 5.12)
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38
SETUP_FAILED = 125

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _report(fd: int, message: dict) -> None:
    os.write(fd, (json.dumps(message) + "\n").encode())


def _prctl(option: int, value: int) -> bool:
    return _libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) == 0


def _unshare(flags: int) -> bool:
    return _libc.unshare(ctypes.c_int(flags)) == 0


def _mount(
    source: bytes | None, target: bytes, fstype: bytes | None, flags: int, data: bytes | None = None
) -> bool:
    return _libc.mount(source, target, fstype, ctypes.c_ulong(flags), data) == 0


def _mount_setattr(path: bytes, flags: int, attr_set: int, attr_clr: int) -> bool:
    attr = _MountAttr(attr_set, attr_clr, 0, 0)
    result = _libc.syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        ctypes.c_char_p(path),
        ctypes.c_uint(flags),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    return result == 0


def _write(path: str, text: str) -> bool:
    try:
        with open(path, "w") as f:
            f.write(text)
        return True
    except OSError:
        return False


def _expose(cover: str, paths: list[str]) -> bool:
    """Hide directory ``cover`` (e.g. a mode-0700 /root) under an empty tmpfs, then bind the
    ``paths`` below it (the interpreter's prefix) back at their own paths, so an unprivileged
    uid can run the interpreter while the rest of ``cover`` is gone from its view."""
    fds = [os.open(p, os.O_PATH | os.O_DIRECTORY) for p in paths]
    if not _mount(b"tmpfs", cover.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755"):
        return False
    for path, fd in zip(paths, fds, strict=True):
        os.makedirs(path, exist_ok=True)
        if not _mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, MS_BIND | MS_REC):
            return False
        os.close(fd)
    return True


def _read_only_root(workdir: str, expose: dict | None) -> bool:
    """In a new mount namespace: every mount read-only and nosuid, the workdir writable (and
    the interpreter exposed when ``expose`` says where)."""
    wd = workdir.encode()
    return (
        _mount(None, b"/", None, MS_REC | MS_PRIVATE)
        and _mount(wd, wd, None, MS_BIND | MS_REC)
        and (expose is None or expose["cover"] is None or _expose(expose["cover"], expose["paths"]))
        and _mount_setattr(b"/", AT_RECURSIVE, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0)
        and _mount_setattr(wd, 0, 0, MOUNT_ATTR_RDONLY)
    )


def _enter_namespaces(workdir: str, expose: dict | None) -> list[str]:
    layers = []
    if os.geteuid() != 0:
        uid, gid = os.getuid(), os.getgid()
        if not _unshare(CLONE_NEWUSER):
            return layers
        mapped = (
            _write("/proc/self/setgroups", "deny")
            and _write("/proc/self/uid_map", f"{uid} {uid} 1")
            and _write("/proc/self/gid_map", f"{gid} {gid} 1")
        )
        layers.append("userns" if mapped else "userns-unmapped")
    if _unshare(CLONE_NEWNET):
        layers.append("netns")
    if _unshare(CLONE_NEWIPC):
        layers.append("ipcns")
    if _unshare(CLONE_NEWNS) and _read_only_root(workdir, expose):
        layers.append("mountns")
    if _unshare(CLONE_NEWPID):
        layers.append("pidns")
    return layers


def _run_worker(cfg: dict, layers: list[str], info: int, parent: int) -> None:
    try:
        os.set_inheritable(info, False)  # closed by exec: the program never holds it
        for name, (soft, hard) in cfg["rlimits"].items():
            resource.setrlimit(getattr(resource, name), (soft, hard))
        os.chdir(cfg["workdir"])
        if cfg["uid"] is not None:
            uid, gid = cfg["uid"], cfg["gid"]
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
                raise PermissionError("could not drop privileges")
        if not _prctl(PR_SET_NO_NEW_PRIVS, 1):
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            raise RuntimeError("supervisor died")
        boot = {
            "workdir": cfg["workdir"],
            "hook_net": "netns" not in layers,
            "hook_fs": "mountns" not in layers,
        }
        python = cfg["python"]
        expose = cfg["expose"]
        if expose is not None and (expose["cover"] is None or "mountns" not in layers):
            python = cfg["fallback_python"]  # the interpreter is out of the sandbox uid's reach
            if python is None:
                raise PermissionError(
                    f"the sandbox uid cannot reach {cfg['python']} (no mount namespace to "
                    "expose it, and no python3 on PATH that it can run)"
                )
        argv = [python, "-I", "-S", "-B", "-c", cfg["boot"], json.dumps(boot)]
        os.execve(python, argv, cfg["env"])
    except BaseException as err:  # noqa: BLE001 - reported, then exit
        _report(info, {"setup_error": f"{type(err).__name__}: {err}"})
    os._exit(SETUP_FAILED)


def _run_init(cfg: dict, layers: list[str], info: int) -> None:
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        os.setpgid(0, 0)  # the parent kills this group (init, worker and what stays in it)
        if "pidns" in layers and "mountns" in layers:
            if _mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC):
                _report(info, {"layers": ["procfs"]})
        me = os.getpid()
        worker = os.fork()
        if worker == 0:
            _run_worker(cfg, layers, info, me)
        while True:  # as PID 1, init also reaps orphans; stop at the worker's status
            pid, status = os.wait()
            if pid == worker:
                break
        _report(info, {"status": status})
    except BaseException as err:  # noqa: BLE001 - reported, then exit
        _report(info, {"setup_error": f"init: {type(err).__name__}: {err}"})
    os._exit(0)


def _children(me: int) -> list[int]:
    """PIDs whose parent is ``me`` (from /proc/PID/stat)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == me:
                found.append(int(entry))
    return found


def _reap_descendants(kill: bool) -> None:
    """As a child subreaper, every process the program left behind becomes our child once its
    parent dies: kill (unless a PID namespace already did) and reap them all, so none is left
    running or as a zombie that would keep counting against the uid's RLIMIT_NPROC."""
    me = os.getpid()
    while True:
        if kill:
            for pid in _children(me):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.002)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    info = cfg["info_fd"]
    os.umask(0o022)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != cfg["parent_pid"]:
        os._exit(SETUP_FAILED)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    layers = _enter_namespaces(cfg["workdir"], cfg["expose"]) if cfg["namespaces"] else []
    _report(info, {"ready": True, "layers": layers})
    init = os.fork()
    if init == 0:
        _run_init(cfg, layers, info)
    _report(info, {"init": init})
    os.close(info)
    os.waitpid(init, 0)
    _reap_descendants(kill="pidns" not in layers)
    os._exit(0)


if __name__ == "__main__":
    main()
