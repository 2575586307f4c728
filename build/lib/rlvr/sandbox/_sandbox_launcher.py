"""The sandbox's supervisor, run in a process forked by the sandbox's zygote
(``_sandbox_zygote.py``) for each program: :func:`launch`. Trusted code; never imported by the
trainer.

Steps:

1. launcher: put the run's fds at their numbers (stdin, stdout, stderr, the channel), start a
   session, tie its life to the zygote (``PR_SET_PDEATHSIG``), become a child subreaper; open
   the run's ``cgroup.procs`` files (before any namespace hides them); enter new namespaces
   where the kernel allows (a user namespace first when not root; network; IPC; mount, where
   it builds the program's whole view of the file system and ``pivot_root``s into it: the
   runtime read-only, site-packages hidden, five device nodes, and a size-limited tmpfs at
   ``/tmp`` as the only writable place; PID); report the layers on the info pipe; after init
   ends, report whether the tmpfs filled up, then kill and reap every process the program
   left behind;
2. init (forked; PID 1 of the new PID namespace when there is one; leader of its own process
   group, which the parent kills at a timeout): mount a fresh ``/proc``, fork the worker, wait
   for it and report its wait status on the info pipe. When init exits, the kernel kills every
   process left in its PID namespace;
3. worker: join the control groups, set the rlimits, chdir to the workdir, drop to the sandbox
   uid/gid (when root), set ``PR_SET_NO_NEW_PRIVS`` and ``PR_SET_PDEATHSIG``, close every fd
   but the program's, install the seccomp filter, and return the boot configuration: the
   zygote's interpreter, already started, runs the program (``_sandbox_boot.py``) as a script
   would, with no second interpreter start-up. Only where the interpreter is out of the
   sandbox uid's reach on the host (no mount namespace to show it) does the worker exec a
   ``python3`` on the safe ``PATH`` instead. Any failure before the program starts is reported
   as ``setup_error`` on the info pipe, which the untrusted program never holds, so it cannot
   forge one.
"""

import ctypes
import fcntl
import json
import os
import resource
import signal
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
MNT_DETACH = 0x2
SYS_MOUNT_SETATTR = 442  # the same number on every Linux architecture (since 5.12)
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP = 1, 4, 22
PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 36, 38
SECCOMP_MODE_FILTER = 2
SETUP_FAILED = 125
DISK_SLACK = 1 << 16

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


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


def _check(ok: bool, what: str) -> None:
    if not ok:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _bind(root: str, path: str) -> None:
    """Show host ``path`` at the same place under ``root``: a symlink is recreated, a
    directory or file is bind-mounted (made read-only with the rest of the view)."""
    target = root + path
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    if os.path.islink(path):
        os.symlink(os.readlink(path), target)
        return
    if os.path.isdir(path):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
    _check(_mount(path.encode(), target.encode(), None, MS_BIND | MS_REC), f"bind {path}")


def _work_tmpfs(root: str, view: dict, cfg: dict, staged: dict) -> None:
    """The program's only writable place: a size- and inode-limited tmpfs at ``/tmp`` (its
    cwd and HOME), holding the files the parent staged."""
    options = f"size={view['disk_bytes']},nr_inodes={view['inodes']},mode=0700"
    if cfg["uid"] is not None:
        options += f",uid={cfg['uid']},gid={cfg['gid']}"
    work = root + "/tmp"
    os.makedirs(work, mode=0o755)
    _check(
        _mount(b"tmpfs", work.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()), "tmpfs"
    )
    for name, data in staged.items():
        fd = os.open(f"{work}/{name}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data)
        if cfg["uid"] is not None:
            os.fchown(fd, cfg["uid"], cfg["gid"])
        os.close(fd)


def _build_view(cfg: dict) -> bool:
    """Replace the root with a view of only the runtime (read-only: the ``binds``, empty
    ``hide``s over site-packages, a few device nodes, an empty ``/proc`` for init) and the
    work tmpfs, then ``pivot_root`` into it. False when mounts are refused outright; a failure
    half-way raises (the workdir is no longer what the parent staged)."""
    view, root = cfg["view"], cfg["workdir"]
    staged = {}
    for entry in os.scandir(root):
        with open(entry.path, "rb") as f:
            staged[entry.name] = f.read()
    if not _mount(None, b"/", None, MS_REC | MS_PRIVATE):
        return False
    _check(_mount(b"tmpfs", root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755"), "root")
    for path in view["binds"]:
        _bind(root, path)
    for path in view["hide"]:
        _check(_mount(b"tmpfs", (root + path).encode(), b"tmpfs", MS_NOSUID, b"size=4k"), path)
    for name in ("null", "zero", "full", "random", "urandom"):
        _bind(root, f"/dev/{name}")
    os.symlink("/proc/self/fd", f"{root}/dev/fd")
    os.symlink("/tmp", f"{root}/dev/shm")
    os.makedirs(root + "/proc", mode=0o555)
    _work_tmpfs(root, view, cfg, staged)
    readonly = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID
    _check(_mount_setattr(root.encode(), AT_RECURSIVE, readonly, 0), "read-only view")
    _check(_mount_setattr(f"{root}/tmp".encode(), 0, 0, MOUNT_ATTR_RDONLY), "writable /tmp")
    os.chdir(root)
    _check(_libc.syscall(ctypes.c_long(view["pivot_root"]), b".", b".") == 0, "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH) == 0, "detach the old root")
    os.chdir("/")
    cfg["workdir"] = "/tmp"
    cfg["env"].update(HOME="/tmp", TMPDIR="/tmp")
    return True


def _enter_namespaces(cfg: dict) -> list[str]:
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
    if cfg["view"] is not None and _unshare(CLONE_NEWNS) and _build_view(cfg):
        layers += ["mountns", "tmpfs"]
    if _unshare(CLONE_NEWPID):
        layers.append("pidns")
    return layers


def _install_seccomp(program: bytes) -> None:
    """Install the seccomp-BPF ``program`` (built by :mod:`rlvr.sandbox.seccomp`)."""
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
    _check(
        _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0, "seccomp"
    )


def _run_worker(cfg: dict, layers: list[str], info: int, parent: int, groups: list[int]) -> dict:
    """Set up the program's process; returns the boot configuration (the caller runs the
    program), or execs a fallback interpreter. Never returns on a failure."""
    try:
        for fd in groups:  # join the run's control groups: the whole tree is counted
            os.write(fd, b"0")
            os.close(fd)
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
            _prctl(PR_SET_DUMPABLE, 1)  # its own /proc/self, as after an exec
        _check(_prctl(PR_SET_NO_NEW_PRIVS, 1), "prctl(PR_SET_NO_NEW_PRIVS)")
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            raise RuntimeError("supervisor died")
        boot = {
            "workdir": cfg["workdir"],
            "hook_net": "netns" not in layers,
            "hook_fs": "mountns" not in layers,
        }
        fallback = cfg["python_blocked"] and "mountns" not in layers
        if fallback and cfg["fallback_python"] is None:
            raise PermissionError(
                f"the sandbox uid cannot reach {cfg['python']} (no mount namespace to "
                "show it, and no python3 on PATH that it can run)"
            )
        os.environ.clear()
        os.environ.update(cfg["env"])
        keep = {0, 1, 2, *cfg["channel"]}
        if cfg["seccomp"]:
            _install_seccomp(bytes.fromhex(cfg["seccomp"]))
            _report(info, {"layers": ["seccomp"]})
        _close_all_but(keep)  # the info pipe included: the program never holds it
    except BaseException as err:  # noqa: BLE001 - reported, then exit
        _report(info, {"setup_error": f"{type(err).__name__}: {err}"})
        os._exit(SETUP_FAILED)
    if fallback:  # the interpreter is out of the sandbox uid's reach: start one it can run
        python = cfg["fallback_python"]
        try:
            os.execve(
                python, [python, "-I", "-S", "-B", "-c", cfg["boot"], json.dumps(boot)], cfg["env"]
            )
        finally:
            os._exit(SETUP_FAILED)
    return boot


def _close_all_but(keep: set[int]) -> None:
    """Close every open fd of this process except ``keep``."""
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else []:
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own fd, already gone


def _run_init(cfg: dict, layers: list[str], info: int, groups: list[int]) -> dict:
    """Init's life; returns (in the worker only) the boot configuration."""
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        os.setpgid(0, 0)  # the parent kills this group (init, worker and what stays in it)
        if "pidns" in layers and "mountns" in layers:
            if _mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC):
                _report(info, {"layers": ["procfs"]})
        me = os.getpid()
        worker = os.fork()
        if worker == 0:
            return _run_worker(cfg, layers, info, me, groups)
        for fd in groups + cfg["channel"]:  # only the program keeps the channel open
            os.close(fd)
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


def _disk_full(path: str) -> bool:
    """The work tmpfs has (almost) no room or no inode left."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize < DISK_SLACK or st.f_favail == 0


def _place_fds(fds: list[int], channel: list[int]) -> int:
    """Put the run's fds where the program expects them: ``fds`` = [stdin, stdout, stderr,
    info, *channel] as received (any numbers) go to 0, 1, 2, a free number (returned: the
    info fd) and the channel's own numbers (the program was told them)."""
    targets = [0, 1, 2, -1, *channel]
    floor = max([*targets, *fds]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, floor) for fd in fds]  # out of every target's way
    for fd in fds:
        os.close(fd)
    info = moved[3]
    for fd, target in zip(moved, targets, strict=True):
        if target >= 0:
            os.dup2(fd, target)  # inheritable: a fallback interpreter's exec keeps them
            os.close(fd)
    return info


def launch(cfg: dict, fds: list[int]) -> dict:
    """The launcher's life in a process just forked by the zygote. Returns only in the worker,
    with the boot configuration of the program it then runs; every other process of the run
    ends here."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote ignores it (no zombies there)
    os.setsid()  # its own session and process group, killed as one by the parent
    info = cfg["info_fd"] = _place_fds(fds, cfg["channel"])
    os.umask(0o022)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != cfg["zygote_pid"]:
        os._exit(SETUP_FAILED)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        os.chdir(cfg["workdir"])
        groups = [os.open(p, os.O_WRONLY | os.O_CLOEXEC) for p in cfg["cgroup_procs"]]
        layers = _enter_namespaces(cfg) if cfg["namespaces"] else []
    except BaseException as err:  # noqa: BLE001 - reported, then exit
        _report(info, {"ready": True, "setup_error": f"{type(err).__name__}: {err}"})
        os._exit(SETUP_FAILED)
    _report(info, {"ready": True, "layers": layers + (["cgroup"] if groups else [])})
    init = os.fork()
    if init == 0:
        return _run_init(cfg, layers, info, groups)
    for fd in groups + cfg["channel"]:
        os.close(fd)
    _report(info, {"init": init})
    os.waitpid(init, 0)
    if "tmpfs" in layers and _disk_full("/tmp"):
        _report(info, {"exceeded": "disk"})
    os.close(info)
    _reap_descendants(kill="pidns" not in layers)
    os._exit(0)
