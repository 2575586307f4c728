"""Run model-written Python in a separate, confined process: :func:`run_python`.

Model output is never executed in the trainer's process. Each run gets a fresh temporary
working directory (``/tmp`` of its own file view, see ``mountns``), a scrubbed environment
(only ``PATH``, ``LANG``, and ``HOME`` = ``TMPDIR`` = the workdir), and ``python -I -S -B``
(no site-packages, no ``PYTHON*`` variables, no user site, no bytecode files), started in its
own session and killed with its whole process group.

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
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
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


@contextlib.contextmanager
def _sandbox_ids() -> Iterator[tuple[int, int] | None]:
    """As root: a dedicated (uid, gid), held by an ``flock`` for the duration of the run
    (threads and processes of this machine never share one); otherwise None."""
    if os.geteuid() != 0:
        yield None
        return
    lock_dir = Path(tempfile.gettempdir()) / "rlvr-sandbox-locks"
    lock_dir.mkdir(mode=0o700, exist_ok=True)
    start = random.randrange(SANDBOX_UID_COUNT)
    for k in range(SANDBOX_UID_COUNT):
        uid = SANDBOX_UID_BASE + (start + k) % SANDBOX_UID_COUNT
        if _uid_in_use(uid):
            continue
        fd = os.open(lock_dir / str(uid), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            _kill_uid(uid)  # leftovers of a crashed earlier run, if any
            yield uid, uid
        finally:
            _kill_uid(uid)
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
            with open(f"/proc/{entry}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            if int(status["Uid"].split()[0]) == uid and status["State"].split()[0] not in "ZX":
                pids.append(int(entry))
        except (OSError, ValueError, KeyError, IndexError):
            continue
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
    proc: subprocess.Popen,
    info_fd: int,
    limits: SandboxLimits,
    deadline: float,
    group: cgroups.SampleCgroup | None,
) -> tuple[bytes, bytes, bytes, str | None]:
    """Read stdout, stderr and the info pipe until they close, the deadline passes, an
    output cap is exceeded, or the process tree's CPU time passes its budget (``group``);
    returns (stdout, stderr, info, kill reason or None)."""
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    buffers = {out_fd: bytearray(), err_fd: bytearray(), info_fd: bytearray()}
    caps = {out_fd: limits.max_output_bytes, err_fd: limits.max_output_bytes, info_fd: _INFO_CAP}
    reason: str | None = None
    exited_at: float | None = None
    with selectors.DefaultSelector() as selector:
        for fd in buffers:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map() and reason is None:
            now = time.monotonic()
            if now >= deadline:
                reason = "wall_time"
                break
            if group is not None and group.over_cpu():
                reason = "cpu_time"
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > _EXIT_GRACE_S:
                break  # the supervisor is gone but a leftover process holds a pipe open
            for key, _ in selector.select(timeout=min(deadline - now, 0.05)):
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
            try:
                _populate(workdir, code, files or {}, ids)
                return _run(workdir, stdin, limits, ids, namespaces, start, owned)
            finally:
                if ids is not None:
                    _kill_uid(ids[0])  # nothing of the run may still write while it is removed
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
    """The launcher's configuration (see ``_sandbox_launcher.py``), but the info fd."""
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
        "parent_pid": os.getpid(),
        "boot": _source("_sandbox_boot.py"),
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
            group.remove()


def _launch(
    config: dict,
    stdin: str | bytes,
    limits: SandboxLimits,
    ids: tuple[int, int] | None,
    start: float,
    group: cgroups.SampleCgroup | None,
    channel: list[int],
) -> SandboxResult:
    info_r, info_w = os.pipe()
    config["info_fd"] = info_w
    argv = [sys.executable, "-I", "-S", "-B", "-c", _source("_sandbox_launcher.py")]
    try:
        with tempfile.TemporaryFile() as stdin_file:
            stdin_file.write(stdin.encode() if isinstance(stdin, str) else stdin)
            stdin_file.seek(0)
            proc = subprocess.Popen(
                [*argv, json.dumps(config)],
                stdin=stdin_file,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(info_w, *channel),
                cwd=config["workdir"],
                env=config["env"],
                start_new_session=True,
            )
    finally:
        os.close(info_w)
        _close_all(channel)
    try:
        deadline = start + limits.wall_seconds
        stdout, stderr, raw_info, reason = _capture(proc, info_r, limits, deadline, group)
        info = _parse_info(raw_info)
        if reason is not None and "status" not in info:
            # Kill init's group; the launcher then kills and reaps whatever is left and exits.
            _kill_group(info.get("init", proc.pid))
            if group is not None:
                group.kill()
    finally:
        try:
            proc.wait(timeout=_CLEANUP_S)
        except subprocess.TimeoutExpired:
            pass
        _kill_group(proc.pid)
        proc.wait()
        os.close(info_r)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
    if reason is None and group is not None:
        reason = group.exceeded()
    return _result(ids, stdout, stderr, info, reason, start)


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
