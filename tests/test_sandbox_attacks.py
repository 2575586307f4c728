"""Attacks on the code sandbox's isolation layers, one test per class: what the program can see
(mount namespace), host Unix sockets, namespaces/mounts/ptrace from inside (seccomp), network
interfaces, whole-tree budgets (control group: memory, processes, CPU time), the work tmpfs
(bytes and inodes), output floods, and a whole batch of attacks through the trainer's reward.

Each attack scores 0 (never 1) with a reason, or fails its run with the expected
``killed_reason``; afterwards nothing of the runs is left: no process (descendant of this one,
or of a sandbox uid nobody holds), no work directory in the host's temp dirs, no control group.
A test whose layer this host does not give (``SandboxResult.isolation``) is skipped.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from rlvr.data.arithmetic import ArithmeticTask
from rlvr.data.base import Problem
from rlvr.rewards import build_reward
from rlvr.rewards.code import python_unit_tests
from rlvr.sandbox import cgroups, sandbox
from rlvr.sandbox.sandbox import (
    ETC_FILES,
    RUNTIME_DIRS,
    SANDBOX_UID_BASE,
    SANDBOX_UID_COUNT,
    SandboxLimits,
    run_python,
)

# wall 4 s and the budgets the attack classes name (the CPU test lowers cpu_seconds to 1)
LIMITS = {
    "wall_seconds": 4.0,
    "cpu_seconds": 2.0,
    "memory_bytes": 512 << 20,
    "max_processes": 16,
    "max_disk_bytes": 64 << 20,
    "max_files": 256,
    "max_output_bytes": 64 << 10,
}
SUM_IO = "a, b = map(int, input().split())\nprint(a + b)\n"
ADD_FN = "def add(a, b):\n    return a + b\n"
SUM = Problem(
    "sum", "Read a and b, print a + b.", json.dumps([{"input": "1 2\n", "output": "3\n"}])
)
LOCK_DIR = Path(tempfile.gettempdir()) / "rlvr-sandbox-locks"  # kept: one lock file per uid
CGROUP_ROOT = Path("/sys/fs/cgroup")
CLEANUP_GRACE_S = 5.0


def _completion(code: str) -> str:
    return f"```python\n{code}```"


def _io_problem(stdin: str, stdout: str) -> Problem:
    return Problem("io", "Print the answer.", json.dumps([{"input": stdin, "output": stdout}]))


def _limits(**overrides: float) -> SandboxLimits:
    return SandboxLimits(**{**LIMITS, **overrides})


# --- health of the test process -----------------------------------------------------------


def proc_status(pid: int | str) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {k: v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def sandbox_uid_processes() -> list[tuple[int, int]]:
    """(pid, uid) of every process of a sandbox uid, zombies included."""
    found = []
    for entry in os.listdir("/proc"):
        uid = int(proc_status(entry).get("Uid", "-1").split()[0]) if entry.isdigit() else -1
        if SANDBOX_UID_BASE <= uid < SANDBOX_UID_BASE + SANDBOX_UID_COUNT:
            found.append((int(entry), uid))
    return found


def leaked_sandbox_processes() -> list[tuple[int, int]]:
    """Processes of a sandbox uid that no run holds: the sandbox keeps a uid's lock file
    (``flock``) for the whole run and kills all of the uid's processes before releasing it, so
    a process whose uid's lock is free is a leftover. Runs of other processes on this machine
    hold their uids' locks and are not counted."""
    leaked = []
    for pid, uid in sandbox_uid_processes():
        try:
            fd = os.open(LOCK_DIR / str(uid), os.O_RDWR)
        except FileNotFoundError:
            leaked.append((pid, uid))
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if proc_status(pid).get("Uid", "").split()[:1] == [str(uid)]:  # alive while unheld
                leaked.append((pid, uid))
        except BlockingIOError:
            pass  # a run in progress holds this uid
        finally:
            os.close(fd)  # releases the lock
    return leaked


def descendants(pid: int) -> list[int]:
    """All processes below ``pid``, zombies included."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ppid = proc_status(entry).get("PPid")
            if ppid is not None:
                children.setdefault(int(ppid), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def is_pool_helper(pid: int) -> bool:
    """multiprocessing helpers (forkserver, resource tracker) other tests may have started, and
    this process's sandbox zygote (it outlives runs by design; the launchers it forks, which
    share its command line, do not)."""
    zygote = sandbox._ZYGOTE.proc
    if zygote is not None and pid == zygote.pid:
        return True
    try:
        return "multiprocessing" in Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return True  # already gone


@contextlib.contextmanager
def recorded_workdirs() -> Iterator[list[str]]:
    """The work directories that runs in this process (any thread) make while inside:
    ``run_python`` makes each with ``tempfile.mkdtemp(prefix="rlvr-sandbox-")``. Only these
    are this process's to check; the host's temp dirs also hold other processes' runs (the
    other pytest-xdist worker's, another user's), which come and go on their own."""
    made: list[str] = []
    mkdtemp = tempfile.mkdtemp

    def record(*args: Any, **kwargs: Any) -> str:
        path = mkdtemp(*args, **kwargs)
        if os.path.basename(path).startswith("rlvr-sandbox-"):
            made.append(path)
        return path

    with mock.patch.object(tempfile, "mkdtemp", record):
        yield made


def own_cgroups(depth: int = 6) -> list[str]:
    """Control groups of this process's runs (``cgroups.create`` names them
    ``rlvr-sandbox-<pid>-<n>``) anywhere under /sys/fs/cgroup, ``depth`` levels down."""
    prefix, found, level = f"rlvr-sandbox-{os.getpid()}-", [], [CGROUP_ROOT]
    for _ in range(depth):
        below = []
        for directory in level:
            with contextlib.suppress(OSError), os.scandir(directory) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        (found if entry.name.startswith(prefix) else below).append(entry.path)
        level = below
    return found


@contextlib.contextmanager
def nothing_left_behind() -> Iterator[None]:
    """Around some runs: no leaked sandbox process, no new descendant of this process, no work
    directory of its runs left (given a few seconds), no control group of this process but the
    empty ones kept for reuse, no new thread. Only this process's runs are checked: others may
    run on the machine meanwhile."""
    children, threads = set(descendants(os.getpid())), set(threading.enumerate())
    with recorded_workdirs() as workdirs:
        yield
    assert leaked_sandbox_processes() == []
    left = [p for p in descendants(os.getpid()) if p not in children and not is_pool_helper(p)]
    assert left == [], "processes of a run outlived it"
    deadline = time.monotonic() + CLEANUP_GRACE_S
    while (kept := [p for p in workdirs if os.path.lexists(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert kept == [], "work directories left in the host's temp dirs"
    idle = {str(d) for g in cgroups.idle_groups() for d in g.dirs.values()}
    assert [g for g in own_cgroups() if g not in idle] == [], "control groups of runs left"
    assert all(not g._pids() for g in cgroups.idle_groups()), "a process in an idle group"
    assert [t.name for t in threading.enumerate() if t not in threads] == []


@pytest.fixture(autouse=True)
def healthy():
    with nothing_left_behind():
        yield


@pytest.fixture(scope="module")
def layers() -> tuple[str, ...]:
    """The isolation layers this host gives a run (probed once)."""
    return run_python("pass").isolation


def require(layers: tuple[str, ...], *wanted: str) -> None:
    missing = [w for w in wanted if w not in layers]
    if missing:
        pytest.skip(
            f"isolation layer(s) {missing} not in force on this host (needs root or user "
            f"namespaces, a writable cgroup hierarchy, seccomp); in force: {list(layers)}"
        )


# --- visibility: the file system the program sees -----------------------------------------

WALKER = """
import base64, os, zlib
paths = []
for top, dirs, files in os.walk("/"):
    if top == "/" and "proc" in dirs:
        dirs.remove("proc")  # the run's own processes
    paths += [os.path.join(top, name) + "/" for name in dirs]
    paths += [os.path.join(top, name) for name in files]
print(base64.b64encode(zlib.compress("\\n".join(paths).encode())).decode())
"""
WALK_LIMITS = _limits(wall_seconds=30.0, cpu_seconds=15.0, max_output_bytes=16 << 20)
DEVICES = ("null", "zero", "full", "random", "urandom", "fd", "shm")
RUN_FILES = ("config.yaml", "metrics.jsonl")
WEIGHT_SUFFIXES = (".gguf", ".safetensors")


def _interpreter_dirs() -> list[str]:
    python = os.path.realpath(sys.executable)
    return [os.path.realpath(sys.base_prefix), os.path.dirname(python)]


def _view_roots() -> list[str]:
    """What the view shows (see ``_sandbox_launcher.py``): the runtime, the interpreter's
    prefix, a few /etc files, five devices (+ fd, shm links), the work tmpfs and /proc."""
    roots = [*RUNTIME_DIRS, *_interpreter_dirs(), *(f"/etc/{name}" for name in ETC_FILES)]
    return roots + [f"/dev/{name}" for name in DEVICES] + ["/tmp", "/proc"]


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def _inside_view(path: str, roots: list[str]) -> bool:
    """``path`` is under a root, or a directory on the way to one."""
    path = path.rstrip("/")
    return _under(path, roots) or any(r.startswith(path + "/") for r in roots)


def _looks_like_run_file(path: str) -> bool:
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name in RUN_FILES or name.endswith(WEIGHT_SUFFIXES)


@pytest.fixture(scope="module")
def visible_paths(layers) -> list[str]:
    """Every path the program finds walking its whole file system (dirs end with ``/``)."""
    require(layers, "mountns", "tmpfs")
    with nothing_left_behind():
        result = run_python(WALKER, limits=WALK_LIMITS)
    assert result.ok, (result.killed_reason, result.stderr[-2000:])
    return zlib.decompress(base64.b64decode(result.stdout)).decode().split("\n")


def test_the_program_sees_only_the_runtime(visible_paths):
    roots = _view_roots()
    assert len(visible_paths) > 1000  # the runtime itself is there
    assert [p for p in visible_paths if not _inside_view(p, roots)] == []
    tops = {p.strip("/").split("/")[0] for p in visible_paths}
    assert not tops & {"work", "home", "run", "var", "sys", "mnt"}
    interpreter = _interpreter_dirs()
    assert [p for p in visible_paths if p.startswith("/root/")] == [
        p for p in visible_paths if p.startswith("/root/") and _inside_view(p, interpreter)
    ]
    assert [p for p in visible_paths if _looks_like_run_file(p)] == []


def test_no_installed_package_is_visible(visible_paths):
    """Every package directory of the runtime (the standard places, and any Python bundled
    elsewhere, e.g. with an SDK under /usr/lib) is hidden under an empty tmpfs: none has
    contents."""
    package_dirs = [
        p.rstrip("/")
        for p in visible_paths
        if p.rstrip("/").rsplit("/", 1)[-1] in ("site-packages", "dist-packages")
    ]
    assert any(d.startswith(os.path.realpath(sys.base_prefix)) for d in package_dirs)
    inside = [p.rstrip("/") for p in visible_paths]
    contents = [p for p in inside if any(p.startswith(d + "/") for d in package_dirs)]
    assert contents[:20] == []


READER = """
for path in {paths!r}:
    try:
        with open(path) as f:
            print(f.read(), end="")
    except OSError:
        pass
"""
SNOOPER = """
import os
def wanted(name):
    answers = name.startswith("expected") and name.endswith(".txt")
    return answers or name in {run_files!r} or name.endswith({weights!r})
paths = list({paths!r})
for top, dirs, files in os.walk("/"):
    if top == "/" and "proc" in dirs:
        dirs.remove("proc")
    paths += [os.path.join(top, name) for name in files if wanted(name)]
""" + READER.replace("{paths!r}", "paths")


@pytest.fixture
def planted_answer() -> Iterator[tuple[str, list[str]]]:
    """(answer, paths): world-readable files holding the answer in the host's temp dirs and a
    fake run directory (config, metrics, weights), where only the file view keeps them away."""
    answer, name = secrets.token_hex(16), secrets.token_hex(8)
    run_dir = Path(tempfile.mkdtemp(prefix="rlvr-test-run-"))
    run_dir.chmod(0o755)
    paths = [run_dir / f for f in (*RUN_FILES, "model.safetensors", "model.gguf", "expected.txt")]
    temp_dirs = [d for d in ("/tmp", "/var/tmp", "/dev/shm") if os.path.isdir(d)]
    paths += [Path(d) / f"expected-{name}.txt" for d in temp_dirs]
    try:
        for path in paths:
            path.write_text(answer + "\n")
            path.chmod(0o644)
        yield answer, [str(p) for p in paths]
    finally:
        shutil.rmtree(run_dir)
        for path in paths[5:]:
            path.unlink(missing_ok=True)


def test_an_answer_stored_in_host_files_is_out_of_reach(layers, planted_answer):
    require(layers, "mountns", "tmpfs")
    answer, paths = planted_answer
    code = SNOOPER.format(paths=paths, run_files=RUN_FILES, weights=WEIGHT_SUFFIXES)
    assert answer not in code
    score = python_unit_tests(_completion(code), _io_problem("", answer + "\n"), limits=WALK_LIMITS)
    assert score == 0.0
    assert score.reason == f"0/1 tests passed; case 0: expected {answer!r}, got ''"
    assert all(Path(p).read_text() == answer + "\n" for p in paths)
    # control: without the file view (the fallback) the same files are readable
    unconfined = run_python(READER.format(paths=paths), limits=_limits(), namespaces=False)
    assert unconfined.stdout == (answer + "\n") * len(paths)


# --- host Unix sockets --------------------------------------------------------------------


class _AnswerServer:
    """A listening AF_UNIX socket that sends ``answer`` to whoever connects (and counts them)."""

    def __init__(self, address: str, answer: str) -> None:
        self.address, self.accepted = address, 0
        self._answer = answer.encode()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(address)
        self._sock.listen()
        self._sock.settimeout(0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="answer-server")
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            with conn:
                conn.sendall(self._answer)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


SOCKET_CLIENT = """
import socket, sys
for address in {addresses!r}:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1)
    try:
        s.connect(address)
        print(s.recv(100).decode().strip())
    except OSError as err:
        print(repr(address), type(err).__name__, file=sys.stderr)
"""


@pytest.fixture
def answer_sockets(planted_answer) -> Iterator[list[_AnswerServer]]:
    """Two host sockets that give the planted answer to whoever connects: a world-writable one
    in the host's /tmp and one in the abstract namespace."""
    answer, _ = planted_answer
    name = secrets.token_hex(8)
    path = f"/tmp/rlvr-test-{name}.sock"
    servers = [_AnswerServer(path, answer)]
    try:
        os.chmod(path, 0o777)  # anyone on the host may connect
        servers.append(_AnswerServer(f"\0rlvr-test-{name}", answer))
        yield servers
    finally:
        for server in servers:
            server.close()
        os.unlink(path)


def test_host_unix_sockets_are_unreachable(layers, planted_answer, answer_sockets):
    require(layers, "mountns", "netns")
    answer, _ = planted_answer
    addresses = [server.address for server in answer_sockets]
    code = SOCKET_CLIENT.format(addresses=addresses)
    score = python_unit_tests(_completion(code), _io_problem("", answer), limits=LIMITS)
    result = run_python(code, limits=_limits())
    assert [server.accepted for server in answer_sockets] == [0, 0]
    assert score == 0.0 and score.reason == f"0/1 tests passed; case 0: expected {answer!r}, got ''"
    assert result.ok and result.stdout == ""
    # the path is not in the program's view; abstract names belong to its network namespace
    assert result.stderr.splitlines() == [
        f"{addresses[0]!r} FileNotFoundError",
        f"{addresses[1]!r} ConnectionRefusedError",
    ]
    for address in addresses:  # control: from the host, both give the answer
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(2)
            client.connect(address)
            assert client.recv(100).decode() == answer


# --- namespaces, mounts, ptrace from inside -------------------------------------------------

FORBIDDEN = {
    "unshare a user namespace": "import ctypes\nctypes.CDLL(None).unshare(0x10000000)\n",
    "unshare from a thread": (
        "import ctypes, threading\n"
        "t = threading.Thread(target=ctypes.CDLL(None).unshare, args=(0x10000000,))\n"
        "t.start()\nt.join()\n"
    ),
    "mount a tmpfs": "import ctypes\nctypes.CDLL(None).mount(b'none', b'/tmp', b'tmpfs', 0, None)\n",
    "ptrace the parent": (
        "import ctypes, os\nctypes.CDLL(None).ptrace(16, os.getppid(), None, None)  # ATTACH\n"
    ),
}


@pytest.mark.parametrize("attack", sorted(FORBIDDEN))
def test_namespaces_mounts_and_ptrace_kill_the_program(attack, layers):
    require(layers, "seccomp")
    result = run_python(FORBIDDEN[attack] + "print('survived')", limits=_limits())
    assert result.killed_reason == "forbidden_syscall" and not result.ok
    assert result.returncode == -signal.SIGSYS and "survived" not in result.stdout
    score = python_unit_tests(_completion(FORBIDDEN[attack] + SUM_IO), SUM, limits=LIMITS)
    assert score == 0.0 and score.reason == "0/1 tests passed; case 0: killed (forbidden_syscall)"


# --- network interfaces ---------------------------------------------------------------------

INTERFACES = """
import json, os, socket
try:
    with open("/proc/net/dev") as f:
        proc = sorted(line.split(":")[0].strip() for line in f.readlines()[2:])
except OSError:
    proc = []
names = sorted(name for _, name in socket.if_nameindex())
print(json.dumps({"sys": os.path.exists("/sys/class/net"), "names": names, "proc": proc}))
"""
HOST_INTERFACES = """
import socket
print(" ".join(sorted(name for _, name in socket.if_nameindex() if name != "lo")))
"""


def test_network_interfaces_are_invisible(layers):
    require(layers, "netns", "mountns")
    result = run_python(INTERFACES, limits=_limits())
    assert result.ok, result.stderr
    seen = json.loads(result.stdout)
    assert seen["sys"] is False
    assert set(seen["names"]) <= {"lo"} and set(seen["proc"]) <= {"lo"}
    host = " ".join(sorted(name for _, name in socket.if_nameindex() if name != "lo"))
    if host:  # a program that must print the host's interfaces cannot
        problem = _io_problem("", host + "\n")
        score = python_unit_tests(_completion(HOST_INTERFACES), problem, limits=LIMITS)
        assert (
            score == 0.0 and score.reason == f"0/1 tests passed; case 0: expected {host!r}, got ''"
        )


# --- budgets of the whole process tree (control group) and of the work tmpfs ---------------

MEMORY_HOG = """
import os
r, w = os.pipe()
for _ in range(4):
    if os.fork() == 0:
        os.close(w)
        block = b"x" * (300 << 20)  # written, so resident
        os.read(r, 1)  # held until the parent lets go: all four at once
        os._exit(0)
os.close(r)
os.wait()  # the first child to end is the one the OOM killer chose
os.close(w)
for _ in range(3):
    os.wait()
"""
DISK_FILLER = """
for i in range(100):
    try:
        with open(f"fill-{tag}-{{i}}", "wb") as f:
            f.write(b"x" * (8 << 20))
    except OSError:
        break
"""
INODE_SPAM = """
for i in range(100_000):
    try:
        open(f"empty-{i}", "w").close()
    except OSError:
        break
"""
WIDE_FORK = """
import os, time
while True:
    try:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
    except OSError:
        break
"""
BUSY_CHILDREN = """
import os
for _ in range(4):
    if os.fork() == 0:
        while True:
            pass
for _ in range(4):
    os.wait()
"""
FLOOD = """
import os
if os.fork() == 0:
    for _ in range(64):
        os.write({fd}, b"y" * (1 << 16))
    os._exit(0)
os.wait()
"""


def test_memory_of_all_processes_together_is_limited(layers):
    require(layers, "cgroup")
    result = run_python(MEMORY_HOG, limits=_limits())
    assert result.killed_reason == "memory" and not result.ok
    score = python_unit_tests(_completion(MEMORY_HOG + SUM_IO), SUM, limits=LIMITS)
    assert score == 0.0 and score.reason == "0/1 tests passed; case 0: killed (memory)"


@pytest.mark.parametrize("kind", ["bytes", "inodes"])
def test_the_work_tmpfs_is_limited_and_off_the_host_disk(kind, layers):
    require(layers, "mountns", "tmpfs")
    tag = secrets.token_hex(8)
    code = DISK_FILLER.format(tag=tag) if kind == "bytes" else INODE_SPAM
    where = "import os\nprint(os.stat('.').st_dev, flush=True)\n"  # the files' file system
    result = run_python(where + code, limits=_limits())
    assert result.killed_reason == "disk" and not result.ok
    assert list(Path("/tmp").glob(f"fill-{tag}-*")) == []  # the program's /tmp is its own
    # it tried to write 800 MiB, into a memory file system of its own (device major 0, none of
    # the host's temp dirs). Not measured as the host disk's free space: other processes (a
    # parallel test worker saving a checkpoint) write there meanwhile.
    device = int(result.stdout.split()[0])
    assert os.major(device) == 0
    host = ("/tmp", "/var/tmp", "/dev/shm", tempfile.gettempdir())
    assert device not in {os.stat(d).st_dev for d in host if os.path.isdir(d)}
    score = python_unit_tests(_completion(code + SUM_IO), SUM, limits=LIMITS)
    assert score == 0.0 and score.reason == "0/1 tests passed; case 0: killed (disk)"


EXPONENTIAL_FORK = """
import os
for _ in range(200):
    try:
        os.fork()
    except OSError:
        break
"""


def test_processes_of_the_tree_are_limited(layers):
    require(layers, "cgroup")
    result = run_python(EXPONENTIAL_FORK, limits=_limits())
    assert result.killed_reason in ("processes", "wall_time") and not result.ok
    score = python_unit_tests(_completion(WIDE_FORK + SUM_IO), SUM, limits=LIMITS)
    assert score == 0.0 and score.reason == "0/1 tests passed; case 0: killed (processes)"


def test_cpu_time_of_all_processes_together_is_limited(layers):
    require(layers, "cgroup")
    limits = _limits(cpu_seconds=1.0, wall_seconds=5.0)
    result = run_python(BUSY_CHILDREN, limits=limits)
    assert result.killed_reason == "cpu_time" and not result.ok
    assert result.seconds < 4.9  # before the wall limit: 1 s of CPU on 4 busy processes
    score = python_unit_tests(_completion(BUSY_CHILDREN + SUM_IO), SUM, limits=limits)
    assert score == 0.0 and score.reason == "0/1 tests passed; case 0: killed (cpu_time)"


@pytest.mark.parametrize("fd", [1, 2], ids=["stdout", "stderr"])
def test_an_output_flood_from_a_child_is_cut(fd):
    code = FLOOD.format(fd=fd)
    result = run_python(code, limits=_limits())
    assert result.killed_reason == "output_limit" and not result.ok
    assert max(len(result.stdout), len(result.stderr)) <= LIMITS["max_output_bytes"]
    score = python_unit_tests(_completion(code + SUM_IO), SUM, limits=LIMITS)
    assert score == 0.0 and score.reason == "0/1 tests passed; case 0: killed (output_limit)"


BUDGET_ATTACKS = {
    "memory": (MEMORY_HOG, "memory"),
    "disk": (DISK_FILLER.format(tag="x"), "disk"),
    "inodes": (INODE_SPAM, "disk"),
    "processes": (WIDE_FORK, "processes"),
}
FORMS = {
    "assert": (ADD_FN, json.dumps(["assert add(1, 2) == 3"])),
    "call": (ADD_FN, json.dumps({"fn_name": "add", "inputs": [[1, 2]], "outputs": [3]})),
}


@pytest.mark.parametrize("form", ["assert", "call"])
@pytest.mark.parametrize("attack", sorted(BUDGET_ATTACKS))
def test_a_budget_exceeded_before_a_correct_answer_scores_zero(attack, form, layers):
    """The stdin/stdout form of each attack scores 0 in the tests of its class above."""
    require(layers, "cgroup", "tmpfs")
    code, killed = BUDGET_ATTACKS[attack]
    solution, tests = FORMS[form]
    score = python_unit_tests(
        _completion(code + solution), Problem(form, "Add.", tests), limits=LIMITS
    )
    assert score == 0.0, score.reason
    assert killed in score.reason


# --- every attack at once, through the trainer's reward -------------------------------------


def test_the_trainers_reward_scores_a_batch_of_attacks_zero(layers, planted_answer, answer_sockets):
    require(layers, "mountns", "tmpfs", "netns", "cgroup", "seccomp")
    answer, paths = planted_answer
    snoop = SNOOPER.format(paths=paths, run_files=RUN_FILES, weights=WEIGHT_SUFFIXES)
    attacks = [code + SUM_IO for code, _ in BUDGET_ATTACKS.values()]
    attacks += [BUSY_CHILDREN + SUM_IO, FLOOD.format(fd=1) + SUM_IO, FLOOD.format(fd=2) + SUM_IO]
    attacks += [code + SUM_IO for code in FORBIDDEN.values()]
    completions = [_completion(code) for code in [SUM_IO, *attacks]]
    problems = [SUM] * len(completions)
    addresses = [server.address for server in answer_sockets]
    for code in (snoop, SOCKET_CLIENT.format(addresses=addresses)):  # the answer is out of reach
        completions.append(_completion(code))
        problems.append(_io_problem("", answer + "\n"))
    # as the trainer builds it (configs/code.yaml): the task's verifier is not a term here
    term = {"name": "python_unit_tests", "params": {"limits": LIMITS}}
    with build_reward(ArithmeticTask(), terms=[term], on_error="raise", timeout_s=60.0) as reward:
        out = reward(completions, problems)
    reasons = out.reasons["python_unit_tests"]
    assert out.total[0] == 1.0, reasons[0]
    assert out.total[1:] == [0.0] * (len(completions) - 1), "\n".join(reasons)
    assert out.num_errors == 0
    assert [server.accepted for server in answer_sockets] == [0, 0]
