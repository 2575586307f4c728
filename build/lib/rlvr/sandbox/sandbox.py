"""Run model-written Python in a separate, confined process: :func:`run_python`.

Model output is never executed in the trainer's process. Each run gets a fresh temporary
working directory (``/tmp`` of its own file view, see ``mountns``), a scrubbed environment
(only ``PATH``, ``LANG``, and ``HOME`` = ``TMPDIR`` = the workdir), and ``python -I -S -B``
(no site-packages, no ``PYTHON*`` variables, no user site, no bytecode files), in its own
session, killed with its whole process group. The interpreter is started once per trainer
process (the zygote, :class:`_Zygote`) and forked for each run: a run's set-up and its
program's start are forks, not interpreter start-ups (``_sandbox_zygote.py``).

What confines it (``SandboxResult.isolation`` lists the layers actually in force for a run):

Enforced by the kernel
    - rlimits (``rlimits``): CPU time (SIGXCPU, then SIGKILL one second later), address space
      (``RLIMIT_AS``: allocations fail with MemoryError), file size (``RLIMIT_FSIZE``: writes
      fail with EFBIG), open files, no core dumps; process count (``RLIMIT_NPROC``) is only
      meaningful with a dedicated uid or a user namespace;
    - when the trainer runs as root (``uid``): the program runs as a dedicated unprivileged uid
      (one of ``SANDBOX_UID_BASE + 0..SANDBOX_UID_COUNT-1``, locked per run, so concurrent runs
      do not share a process budget), no supplementary groups, ``PR_SET_NO_NEW_PRIVS``. File
      permissions then apply: it cannot read ``/root`` or other users' processes'
      environments, nor write or delete root's files;
    - ``netns``: a new network namespace with no interface up: no TCP/UDP to anywhere,
      127.0.0.1 included (path-based Unix sockets stay reachable, subject to permissions);
    - ``mountns`` (+ ``tmpfs``): a new mount namespace whose whole file system is built for the
      run and ``pivot_root``-ed into: the runtime read-only (:data:`RUNTIME_DIRS`, the
      interpreter's prefix, :data:`ETC_FILES`), package directories hidden, five device nodes,
      and a tmpfs of ``max_disk_bytes`` and ``max_files`` at ``/tmp`` (the cwd and HOME) as the
      only writable place. The trainer's files, the run directory, datasets, model weights,
      ``/home``, ``/root``, ``/run``, the host's ``/tmp`` and its Unix sockets are not in it;
    - ``cgroup``: a control group per run (:mod:`rlvr.sandbox.cgroups`): memory and processes
      for the whole tree together, and its total CPU time watched by the parent;
    - ``seccomp``: a filter that kills the program (``"forbidden_syscall"``) at system calls a
      test has no business making: namespaces and mounts, ptrace, bpf, io_uring, kernel
      modules, ... (:mod:`rlvr.sandbox.seccomp`);
    - ``pidns`` (+ ``procfs``): a new PID namespace with its own ``/proc``: other processes
      are invisible, and when the program's main process ends, the kernel kills everything it
      left behind (daemons that called ``setsid`` included);
    - ``ipcns``: a private System V IPC namespace;
    - wall time: the parent kills the program's process group at the deadline; with ``pidns``
      that ends the namespace. In every mode the supervisor is a child subreaper that kills
      and reaps whatever the program left behind (no process or zombie survives a run), and as
      root every process of the run's uid is killed afterwards too;
    - output: stdout and stderr are pipes read by the parent up to ``max_output_bytes`` each;
      a program that writes more is killed, so the parent's memory stays bounded.

    Namespaces need ``unshare(2)`` (root, or unprivileged user namespaces when not root);
    seccomp-filtered containers often refuse it. Control groups need a writable hierarchy
    (root, or a delegated subtree). When the interpreter lives where the dedicated uid cannot
    reach it on the host (e.g. pyenv under a mode-0700 ``/root``), the file view shows it
    anyway; without a mount namespace a ``python3`` on :data:`SAFE_PATH` is used.

Every budget exceeded ends the run as not ``ok`` with its ``killed_reason``: ``"wall_time"``,
``"cpu_time"``, ``"memory"`` (the OOM killer acted in the group), ``"processes"`` (a fork was
refused, even if the program carried on), ``"disk"`` (the tmpfs filled up), ``"output_limit"``,
``"file_size"``.

Best effort (Python audit hook, PEP 578; bypassable by native code)
    - ``audit_hook_net``: when there is no ``netns``, socket connect/bind/send and name
      resolution raise PermissionError;
    - ``audit_hook_fs``: when there is no ``mountns``, opening files for writing, deleting,
      renaming, chmod/chown outside the workdir, starting subprocesses and loading native
      libraries with ctypes raise PermissionError.

Not confined: CPU caches and other side channels; the runtime's files (read-only); without
the file view, every world-readable file; when not root and without user namespaces, the
program runs as the trainer's user (rlimits, scrubbed environment and the audit hook only).

What a program does never makes :func:`run_python` raise: every ending is a
:class:`SandboxResult` with a ``killed_reason``. A death by a signal without a name
(real-time signals ``SIGRTMIN+n``, any other number) is ``"signal:<number>"``; output is
bytes decoded with replacement, whatever it holds. Clean-up cannot fail either: the run's
processes are killed before the workdir is removed, and :func:`remove_tree` walks it
iteratively with one directory fd at a time (any depth or width, permissions the program
removed restored first), falls back to ``rm -rf``, and logs a warning instead of raising if
something is still left. Only a sandbox that cannot start (or set up the program's process)
raises :class:`SandboxError`.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import math
import os
import pwd
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from rlvr.sandbox import cgroups
from rlvr.sandbox.seccomp import build_filter

SANDBOX_UID_BASE = 64000
SANDBOX_UID_COUNT = 1000
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_INFO_CAP = 1 << 16
_EXIT_GRACE_S = 0.5
_CLEANUP_S = 2.0
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_RM_FALLBACK_S = 30.0
_log = logging.getLogger(__name__)
_KILLED_BY = {
    signal.SIGXCPU: "cpu_time",
    signal.SIGXFSZ: "file_size",
    signal.SIGKILL: "sigkill",
    signal.SIGSYS: "forbidden_syscall",
}
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}
"""``pivot_root(2)``'s number per machine (glibc has no wrapper); elsewhere no file view."""
RUNTIME_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin")
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "passwd", "group")
ETC_FILES += ("nsswitch.conf", "mime.types")
_PACKAGE_DIRS = frozenset({"site-packages", "dist-packages"})


class SandboxError(RuntimeError):
    """The sandbox itself could not run the program (not the program's fault)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one :func:`run_python` call.

    Attributes:
        wall_seconds: wall-clock limit; the process group is killed at the deadline. The
            code rewards spend it once per sample, across all of the sample's runs.
        cpu_seconds: CPU-time limit (``RLIMIT_CPU``, rounded up to whole seconds).
        memory_bytes: address-space limit (``RLIMIT_AS``).
        max_processes: processes and threads of the run's uid (``RLIMIT_NPROC``).
        max_file_bytes: largest file the program may write (``RLIMIT_FSIZE``).
        max_open_files: file descriptors (``RLIMIT_NOFILE``).
        max_output_bytes: stdout and stderr kept, each; writing more kills the program.
        max_disk_bytes: size of the run's tmpfs work directory (all its files together).
        max_files: files and directories the program may create there (tmpfs inodes).

    With a control group (:mod:`rlvr.sandbox.cgroups`), ``memory_bytes``, ``max_processes``
    and ``cpu_seconds`` also hold for the whole process tree together.
    """

    wall_seconds: float = 10.0
    cpu_seconds: float = 5.0
    memory_bytes: int = 1 << 30
    max_processes: int = 32
    max_file_bytes: int = 64 << 20
    max_open_files: int = 64
    max_output_bytes: int = 1 << 20
    max_disk_bytes: int = 64 << 20
    max_files: int = 4096

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive number, got {value!r}")

    def rlimits(self, tree: bool = False) -> dict[str, tuple[int, int]]:
        """The rlimits set in the child, as ``{name: (soft, hard)}``. With ``tree`` (a control
        group counts memory and processes), ``RLIMIT_AS`` and ``RLIMIT_NPROC`` are looser
        backstops (twice the budget: address space is not memory in use), so a program meets
        the group's limits first and the run reports them (``"memory"``, ``"processes"``)."""
        cpu = max(1, math.ceil(self.cpu_seconds))
        backstop = 2 if tree else 1
        memory, nproc = int(self.memory_bytes) * backstop, int(self.max_processes) * backstop
        return {
            "RLIMIT_CPU": (cpu, cpu + 1),
            "RLIMIT_AS": (memory, memory),
            "RLIMIT_NPROC": (nproc, nproc),
            "RLIMIT_FSIZE": (int(self.max_file_bytes),) * 2,
            "RLIMIT_NOFILE": (int(self.max_open_files),) * 2,
            "RLIMIT_CORE": (0, 0),
        }


@dataclass(frozen=True)
class SandboxResult:
    """What a sandboxed run did.

    Attributes:
        returncode: the program's exit code, ``-N`` if it died of signal N, None if the sandbox
            killed it (wall time, output limit).
        stdout, stderr: captured output (UTF-8, undecodable bytes replaced), at most
            ``max_output_bytes`` each.
        timed_out: it ran out of wall or CPU time.
        killed_reason: None for a normal exit, else a budget (``"wall_time"``,
            ``"cpu_time"``, ``"memory"``, ``"processes"``, ``"disk"``, ``"output_limit"``,
            ``"file_size"``), ``"forbidden_syscall"`` (the seccomp filter), ``"sigkill"`` (CPU
            hard limit, or the OOM killer without a control group), ``"signal:NAME"``
            (``"signal:37"`` for a signal without a name, see
            :func:`signal_name`), or ``"supervisor_died"``.
        seconds: wall-clock duration of the whole run.
        isolation: the layers in force (see the module docstring).
    """

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    killed_reason: str | None
    seconds: float
    isolation: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Exited with status 0 on its own."""
        return self.returncode == 0 and self.killed_reason is None


@functools.cache
def _source(name: str) -> str:
    return (Path(__file__).with_name(name)).read_text()


def _others_may(path: str, bits: int) -> bool:
    try:
        return os.stat(path).st_mode & bits == bits
    except OSError:
        return False


def _blocking_ancestor(path: str) -> str | None:
    """The topmost directory above ``path`` that other users cannot traverse, or None."""
    current = Path("/")
    for part in Path(path).parts[1:]:
        if not _others_may(str(current), 0o001):
            return str(current)
        current = current / part
    return None


_OWN_INTERPRETER = {"python": sys.executable, "python_blocked": False, "fallback_python": None}
"""Without a dedicated uid the program runs with this very interpreter."""


@functools.cache
def _interpreter() -> dict:
    """The interpreter the program runs with (``-I -S``, so only its prefix matters):
    ``python`` (this one), ``python_blocked`` (a dedicated uid cannot reach it on the host,
    e.g. pyenv under a mode-0700 ``/root``; the file view shows it anyway) and
    ``fallback_python``, a python3 on :data:`SAFE_PATH` other users can run, for runs without
    the file view (None if there is none)."""
    python = os.path.realpath(sys.executable)
    paths = [python, os.path.realpath(sys.base_prefix), os.path.dirname(python)]
    blocked = any(_blocking_ancestor(p) is not None for p in paths)
    fallback = shutil.which("python3", path=SAFE_PATH) if blocked else None
    if fallback is not None:
        fallback = os.path.realpath(fallback)
        if _blocking_ancestor(fallback) is not None or not _others_may(fallback, 0o005):
            fallback = None
    return {"python": python, "python_blocked": blocked, "fallback_python": fallback}


def _package_dirs(root: str) -> Iterator[str]:
    """Every ``site-packages``/``dist-packages`` directory under ``root`` (any Python's, e.g.
    one bundled with an SDK under ``/usr/lib``), not following symlinks."""
    for parent, dirs, _ in os.walk(root):
        for name in [d for d in dirs if d in _PACKAGE_DIRS]:
            dirs.remove(name)
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                yield path


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


@functools.cache
def _view_paths() -> dict | None:
    """What the program's file view shows read-only (see ``_sandbox_launcher.py``): the
    :data:`RUNTIME_DIRS` that exist (symlinks kept as symlinks), the interpreter's prefix, the
    :data:`ETC_FILES` that exist; and every package directory below them hidden under an empty
    tmpfs (the program runs with ``-S``: installed packages, and whatever they ship, are not
    its business). Found once per process (a walk of ``/usr``: about half a second). None
    where ``pivot_root`` is unknown (see :data:`PIVOT_ROOT`)."""
    nr = PIVOT_ROOT.get(os.uname().machine)
    if nr is None:
        return None
    binds = [p for p in RUNTIME_DIRS if os.path.lexists(p)]
    real_dirs = [os.path.realpath(p) for p in binds]
    python = os.path.realpath(sys.executable)
    for prefix in (os.path.realpath(sys.base_prefix), os.path.dirname(python)):
        if not _under(prefix, real_dirs + binds):
            binds.append(prefix)
            real_dirs.append(prefix)
    binds += [f"/etc/{name}" for name in ETC_FILES if os.path.exists(f"/etc/{name}")]
    roots = [p for p in binds if not os.path.islink(p) and os.path.isdir(p)]
    hide = sorted({found for root in roots for found in _package_dirs(root)})
    return {"binds": binds, "hide": hide, "pivot_root": nr}


def _workdir_parent(dedicated_uid: bool) -> str:
    """Where workdirs are made: the temp dir, or, when a dedicated uid could not traverse it
    (e.g. ``TMPDIR`` is a private directory), the first of /tmp, /var/tmp, /dev/shm it can."""
    base = tempfile.gettempdir()
    if not dedicated_uid:
        return base
    for candidate in (base, "/tmp", "/var/tmp", "/dev/shm"):
        path = os.path.realpath(candidate)
        if _blocking_ancestor(path + "/x") is None and os.path.isdir(path):
            return path
    raise SandboxError(f"no temporary directory that the sandbox uid can traverse ({base})")


def _uid_in_use(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


_CLEAN = b"clean"
"""A uid's lock file holds this while no process of the uid can be alive (its last run ended
in a PID namespace, or every process of the uid was killed after it); a run that crashed
leaves anything else, and the next run of the uid kills what is left first."""


@contextlib.contextmanager
def _sandbox_ids() -> Iterator[tuple[int, int] | None]:
    """As root: a dedicated (uid, gid), held by an ``flock`` for the duration of the run
    (threads and processes of this machine never share one); otherwise None. The caller
    leaves no process of the uid alive (:func:`run_python`)."""
    if os.geteuid() != 0:
        yield None
        return
    lock_dir = Path(tempfile.gettempdir()) / "rlvr-sandbox-locks"
    lock_dir.mkdir(mode=0o700, exist_ok=True)
    for k in range(SANDBOX_UID_COUNT):  # the lowest free: a few uids, each left clean, serve
        uid = SANDBOX_UID_BASE + k
        if _uid_in_use(uid):
            continue
        fd = os.open(lock_dir / str(uid), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            if os.pread(fd, len(_CLEAN), 0) != _CLEAN:
                _kill_uid(uid)  # leftovers of a crashed earlier run, if any
            os.ftruncate(fd, 0)  # busy until the run ends well
            yield uid, uid
            os.pwrite(fd, _CLEAN, 0)
        finally:
            os.close(fd)
        return
    raise SandboxError(f"all {SANDBOX_UID_COUNT} sandbox uids are busy")


def _processes_of(uid: int) -> list[int]:
    """Live (not zombie) PIDs whose real uid is ``uid``, from /proc/PID/status (which, unlike
    the ownership of /proc/PID, a process cannot change with PR_SET_DUMPABLE)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", "rb") as f:
                status = f.read(2048)  # State and Uid are in the first lines
            state = status[status.index(b"\nState:") + 7 :].split(None, 1)[0]
            real = int(status[status.index(b"\nUid:") + 5 :].split(None, 1)[0])
        except (OSError, ValueError, IndexError):
            continue
        if real == uid and state not in (b"Z", b"X"):
            pids.append(int(entry))
    return pids


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid`` until none is left (a fork bomb cannot outrun it: its
    processes are capped by RLIMIT_NPROC and every round kills all of them)."""
    for _ in range(200):
        pids = _processes_of(uid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)
    raise SandboxError(f"processes of sandbox uid {uid} survive SIGKILL")


def _populate(
    workdir: Path, code: str, files: Mapping[str, str | bytes], ids: tuple[int, int] | None
) -> None:
    os.chmod(workdir, 0o700)
    for name, content in {**files, "main.py": code}.items():
        if not name or name != os.path.basename(name) or name in (".", ".."):
            raise ValueError(f"sandbox file names must be plain file names, got {name!r}")
        data = content.encode() if isinstance(content, str) else content
        (workdir / name).write_bytes(data)
    if ids is not None:
        for path in [workdir, *workdir.iterdir()]:
            os.chown(path, *ids)


def _open_dir(name: str, dir_fd: int | None = None) -> int:
    """An fd of directory ``name`` (relative to ``dir_fd``), made traversable first: the
    program may have removed its own permissions (only the owner or root can restore them)."""
    with contextlib.suppress(OSError):
        os.chmod(name, 0o700, dir_fd=dir_fd)
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _clear_files(dir_fd: int) -> list[str]:
    """Unlink every non-directory entry of ``dir_fd``; returns the names of its directories."""
    subdirs = []
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
                else:
                    os.unlink(entry.name, dir_fd=dir_fd)
            except OSError:
                continue  # left for the fallback
    return subdirs


def _remove_iteratively(path: Path) -> None:
    """Remove the tree at ``path`` without recursion and with names relative to one open
    directory fd at a time, so neither depth (Python's recursion limit, ``PATH_MAX``,
    ``RLIMIT_NOFILE``) nor width can make it fail. Going up uses ``..``: safe because every
    process of the run is dead, so nothing can move directories meanwhile."""
    fd = _open_dir(str(path))
    try:
        stack: list[tuple[str | None, list[str]]] = [(None, _clear_files(fd))]
        while stack:
            name, pending = stack[-1]
            if pending:
                child_name = pending.pop()
                child = _open_dir(child_name, dir_fd=fd)
                os.close(fd)
                fd = child
                stack.append((child_name, _clear_files(fd)))
                continue
            stack.pop()
            if name is None:
                break
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(path)


def remove_tree(path: Path) -> None:
    """Remove a run's workdir, whatever the program left in it; never raises. Falls back to
    ``rm -rf`` (bounded by a timeout) when the iterative walk fails, and logs a warning when
    something still cannot be removed (e.g. an unkillable process holds it)."""
    try:
        _remove_iteratively(path)
    except (OSError, RecursionError) as err:
        _log.debug("iterative removal of %s failed (%s); trying rm -rf", path, err)
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                ["rm", "-rf", "--one-file-system", "--", str(path)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=_RM_FALLBACK_S,
                check=False,
            )
    if os.path.lexists(path):
        _log.warning("sandbox: could not remove the workdir %s; it is left behind", path)


def signal_name(signum: int) -> str:
    """``"SIGTERM"`` for a named signal, the number as text (``"37"``) for one without a name
    (real-time signals between ``SIGRTMIN`` and ``SIGRTMAX``, or any other number)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _capture(
    pipes: tuple[int, int, int],
    pidfd: int,
    limits: SandboxLimits,
    deadline: float,
    group: cgroups.SampleCgroup | None,
) -> tuple[bytes, bytes, bytes, str | None]:
    """Read stdout, stderr and the info pipe (``pipes``) until they close, the deadline
    passes, an output cap is exceeded, or the process tree's CPU time passes its budget
    (``group``); ``pidfd`` (the launcher's) tells when the launcher exited. Returns (stdout,
    stderr, info, kill reason or None)."""
    out_fd, err_fd, info_fd = pipes
    buffers = {out_fd: bytearray(), err_fd: bytearray(), info_fd: bytearray()}
    caps = {out_fd: limits.max_output_bytes, err_fd: limits.max_output_bytes, info_fd: _INFO_CAP}
    reason: str | None = None
    exited_at: float | None = None
    with selectors.DefaultSelector() as selector:
        for fd in buffers:
            selector.register(fd, selectors.EVENT_READ)
        selector.register(pidfd, selectors.EVENT_READ)
        while len(selector.get_map()) > (exited_at is None) and reason is None:
            now = time.monotonic()
            if now >= deadline:
                reason = "wall_time"
                break
            if group is not None and group.over_cpu():
                reason = "cpu_time"
                break
            if exited_at is not None and now - exited_at > _EXIT_GRACE_S:
                break  # the supervisor is gone but a leftover process holds a pipe open
            for key, _ in selector.select(timeout=min(deadline - now, 0.05)):
                if key.fd == pidfd:  # the launcher exited
                    selector.unregister(pidfd)
                    exited_at = time.monotonic()
                    continue
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                buffer = buffers[key.fd]
                room = caps[key.fd] - len(buffer)
                buffer += chunk[: max(room, 0)]
                if len(chunk) > room and key.fd != info_fd:
                    reason = "output_limit"
                    break
    return bytes(buffers[out_fd]), bytes(buffers[err_fd]), bytes(buffers[info_fd]), reason


def _parse_info(info: bytes) -> dict:
    merged: dict = {"layers": []}
    for line in info.decode(errors="replace").splitlines():
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(message, dict):
            continue
        merged["layers"] += message.pop("layers", [])
        merged.update(message)
    return merged


def run_python(
    code: str,
    stdin: str | bytes = "",
    limits: SandboxLimits | None = None,
    *,
    files: Mapping[str, str | bytes] | None = None,
    namespaces: bool = True,
    channel: tuple[int, ...] = (),
) -> SandboxResult:
    """Run ``code`` as ``main.py`` in a confined child process and return what happened.

    Args:
        code: Python source, run as ``__main__`` from the fresh workdir.
        stdin: the program's standard input.
        limits: resource limits (default :class:`SandboxLimits`).
        files: extra files written next to ``main.py`` (plain names, e.g. ``"tests.json"``).
        namespaces: use Linux namespaces where the kernel allows; False keeps only the uid,
            rlimits and audit-hook layers (for hosts where ``unshare`` is refused, and to test
            the fallback).
        channel: file descriptors (e.g. pipe ends) the program inherits at the same numbers,
            to talk to another sandboxed program while it runs (see
            :mod:`rlvr.rewards.remote`). ``run_python`` owns them: it closes its copies as soon
            as the program has started (or when it could not start), so the other side sees
            end-of-file when the program ends.

    Raises:
        SandboxError: the sandbox could not be set up (the program did not run).
    """
    limits = limits or SandboxLimits()
    start = time.monotonic()
    owned = list(channel)
    try:
        with _sandbox_ids() as ids:
            parent = _workdir_parent(bool(ids))
            workdir = Path(tempfile.mkdtemp(prefix="rlvr-sandbox-", dir=parent))
            result = None
            try:
                _populate(workdir, code, files or {}, ids)
                result = _run(workdir, stdin, limits, ids, namespaces, start, owned)
                return result
            finally:
                # Nothing of the run may still write while it is removed. A PID namespace
                # ended with its init, whom the launcher waited for: no process is left then.
                if ids is not None and (result is None or "pidns" not in result.isolation):
                    _kill_uid(ids[0])
                remove_tree(workdir)
    finally:
        _close_all(owned)


def _close_all(fds: list[int]) -> None:
    """Close and forget each fd of ``fds`` (each exactly once, whoever calls first)."""
    while fds:
        with contextlib.suppress(OSError):
            os.close(fds.pop())


def _config(
    workdir: Path,
    limits: SandboxLimits,
    ids: tuple[int, int] | None,
    namespaces: bool,
    group: cgroups.SampleCgroup | None,
    channel: list[int],
) -> dict:
    """The launcher's configuration (see ``_sandbox_launcher.py``), but its fds."""
    view = _view_paths() if namespaces else None
    if view is not None:
        view = {**view, "disk_bytes": int(limits.max_disk_bytes), "inodes": int(limits.max_files)}
    interpreter = _interpreter() if ids else _OWN_INTERPRETER
    program = build_filter()
    return {
        "workdir": str(workdir),
        "uid": ids[0] if ids else None,
        "gid": ids[1] if ids else None,
        "namespaces": namespaces,
        "view": view,
        "rlimits": limits.rlimits(tree=group is not None),
        "cgroup_procs": group.procs_files if group is not None else [],
        "channel": list(channel),
        **interpreter,
        "seccomp": program.hex() if program is not None else None,
        "env": {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "HOME": str(workdir), "TMPDIR": str(workdir)},
    }


def _run(
    workdir: Path,
    stdin: str | bytes,
    limits: SandboxLimits,
    ids: tuple[int, int] | None,
    namespaces: bool,
    start: float,
    channel: list[int],
) -> SandboxResult:
    group = cgroups.create(limits.memory_bytes, limits.max_processes, limits.cpu_seconds)
    try:
        config = _config(workdir, limits, ids, namespaces, group, channel)
        return _launch(config, stdin, limits, ids, start, group, channel)
    finally:
        if group is not None:
            cgroups.release(group)


def _launch(
    config: dict,
    stdin: str | bytes,
    limits: SandboxLimits,
    ids: tuple[int, int] | None,
    start: float,
    group: cgroups.SampleCgroup | None,
    channel: list[int],
) -> SandboxResult:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    info_r, info_w = os.pipe()
    mine = [out_r, err_r, info_r]
    try:
        with tempfile.TemporaryFile() as stdin_file:
            stdin_file.write(stdin.encode() if isinstance(stdin, str) else stdin)
            stdin_file.seek(0)
            fds = [stdin_file.fileno(), out_w, err_w, info_w, *channel]
            pid, pidfd = _ZYGOTE.spawn(config, fds)
    except BaseException:
        _close_all(mine)
        raise
    finally:
        _close_all([out_w, err_w, info_w])
        _close_all(channel)
    mine.append(pidfd)
    try:
        deadline = start + limits.wall_seconds
        stdout, stderr, raw_info, reason = _capture(
            (out_r, err_r, info_r), pidfd, limits, deadline, group
        )
        info = _parse_info(raw_info)
        if reason is not None and "status" not in info:
            # Kill init's group; the launcher then kills and reaps whatever is left and exits.
            _kill_group(info.get("init", pid))
            if group is not None:
                group.kill()
    finally:
        if not _exited(pidfd, _CLEANUP_S):
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        _kill_group(pid)  # what is left of the launcher's session (a pid it still leads)
        _exited(pidfd, None)
        _close_all(mine)
    if reason is None and group is not None:
        reason = group.exceeded()
    return _result(ids, stdout, stderr, info, reason, start)


def _exited(pidfd: int, timeout: float | None) -> bool:
    """Wait up to ``timeout`` seconds (None: as long as it takes) for the process of ``pidfd``
    to exit; whether it did."""
    with selectors.DefaultSelector() as selector:
        selector.register(pidfd, selectors.EVENT_READ)
        return bool(selector.select(timeout))


class _Zygote:
    """This process's sandbox zygote (``_sandbox_zygote.py``): started on first use, again
    after it died (or in a forked child of the process that started it); one request at a
    time (a fork and a reply: microseconds), from any thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.errors = tempfile.TemporaryFile()  # the zygote's stderr, shown if it dies
        self.channel: socket.socket | None = None
        self.owner = 0

    def spawn(self, config: dict, fds: list[int]) -> tuple[int, int]:
        """Fork a launcher for ``config`` holding ``fds`` ([stdin, stdout, stderr, info,
        *channel]); returns its pid and a pidfd of it. Raises :class:`SandboxError` when no
        zygote can be started or it refuses."""
        message = json.dumps(config).encode()
        with self.lock:
            for _ in range(2):  # a zygote that died is replaced once
                channel = self._running()
                try:
                    socket.send_fds(channel, [message], fds)
                    reply, got, _, _ = socket.recv_fds(channel, 1 << 16, 1)
                except OSError:
                    reply, got = b"", []
                if not reply:
                    self._stop()
                    continue
                answer = json.loads(reply)
                if "error" in answer:
                    raise SandboxError(f"the sandbox zygote could not fork: {answer['error']}")
                return answer["pid"], got[0]
        raise SandboxError(f"the sandbox zygote died twice in a row: {self._stderr()}")

    def _running(self) -> socket.socket:
        if self.owner != os.getpid():  # a forked child: the parent's zygote is not ours
            self.proc, self.channel = None, None
        if self.channel is None or self.proc is None or self.proc.poll() is not None:
            self._stop()
            self._start()
        assert self.channel is not None
        return self.channel

    def _start(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        config = {
            "socket_fd": theirs.fileno(),
            "launcher": _source("_sandbox_launcher.py"),
            "boot": _source("_sandbox_boot.py"),
        }
        argv = [sys.executable, "-I", "-S", "-B", "-c", _source("_sandbox_zygote.py")]
        try:
            self.proc = subprocess.Popen(
                [*argv, json.dumps(config)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self.errors,
                pass_fds=(theirs.fileno(),),
                cwd="/",
                env={"PATH": SAFE_PATH, "LANG": "C.UTF-8"},
                start_new_session=True,  # not in the trainer's group: Ctrl-C is the trainer's
            )
        except OSError as err:
            mine.close()
            raise SandboxError(f"could not start the sandbox zygote: {err}") from err
        finally:
            theirs.close()
        self.channel, self.owner = mine, os.getpid()

    def _stderr(self) -> str:
        self.errors.seek(0)
        return self.errors.read().decode(errors="replace")[-500:]

    def _stop(self) -> None:
        if self.channel is not None:
            self.channel.close()  # the zygote exits at end-of-file
        if self.proc is not None and self.owner == os.getpid():
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=_CLEANUP_S)
        self.proc, self.channel = None, None


_ZYGOTE = _Zygote()


def _result(
    ids: tuple[int, int] | None,
    stdout: bytes,
    stderr: bytes,
    info: dict,
    reason: str | None,
    start: float,
) -> SandboxResult:
    if not info.get("ready") and reason is None:  # it ended before setting up, on its own
        raise SandboxError(
            f"the sandbox supervisor failed to start: {stderr.decode(errors='replace')[-500:]}"
        )
    if "setup_error" in info:
        raise SandboxError(f"sandbox setup failed: {info['setup_error']}")
    layers = ["rlimits", *(["uid"] if ids else []), *info["layers"]]
    if "netns" not in layers:
        layers.append("audit_hook_net")
    if "mountns" not in layers:
        layers.append("audit_hook_fs")
    returncode = os.waitstatus_to_exitcode(info["status"]) if "status" in info else None
    reason = reason or info.get("exceeded")
    if reason is None and returncode is None:
        reason = "supervisor_died"
    elif reason is None and returncode < 0:
        reason = _KILLED_BY.get(-returncode, f"signal:{signal_name(-returncode)}")
    return SandboxResult(
        returncode=returncode,
        stdout=stdout.decode(errors="replace"),
        stderr=stderr.decode(errors="replace"),
        timed_out=reason in ("wall_time", "cpu_time"),
        killed_reason=reason,
        seconds=time.monotonic() - start,
        isolation=tuple(layers),
    )
