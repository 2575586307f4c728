"""Per-sample control groups: budgets that hold for a sandboxed program's whole process tree.

rlimits are per process: four children of one program may each use the whole memory limit,
and ``RLIMIT_CPU`` restarts in every child. A control group counts every process the program
starts, and its threads, together. :class:`SampleCgroup` makes one group per sandbox run (a
child of the trainer's own group) with

- memory: ``memory.max`` (cgroup v2) or ``memory.limit_in_bytes`` (+ ``memory.memsw``, so swap
  is no way out) (v1). Past it the kernel's OOM killer ends a process of the group; files in
  the run's tmpfs count too. Reported as ``"memory"``;
- processes: ``pids.max``, processes and threads of the tree; ``fork`` fails past it.
  Reported as ``"processes"`` (the run fails even when the program survives the refusal);
- CPU time: the group's total (``cpu.stat`` or ``cpuacct.usage``), read by the parent while
  the program runs, which kills the group past the budget. Reported as ``"cpu_time"``.

The sandbox's worker process joins the group (it writes ``0`` to each ``cgroup.procs`` it was
handed as an open file) before it drops privileges and runs the program, so everything the
program starts is inside from its first instruction.

Groups are reused: making and removing one costs more than the rest of a run's set-up (a
directory per hierarchy, and the kernel's work to tear a memory group down), so a group whose
run ended with no process left goes back to a small idle pool and serves a later run with the
same budgets (:func:`release`). Its counters are cumulative (OOM kills, refused forks, CPU
time), so each run reads them against the values they had when it started. Idle groups are
removed when the process exits; ones left by a process that died are removed by the next
process that makes a group.

Where no writable hierarchy exists (not root, no delegated subtree), :func:`create` returns
None and the sandbox keeps its per-process rlimits only; ``SandboxResult.isolation`` tells
which (``cgroup`` present or not).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
IDLE_GROUPS = 8
"""At most this many empty groups are kept for reuse per process (the least recently used
makes room for a newer one)."""
_log = logging.getLogger(__name__)
_counter = itertools.count()
_REMOVE_TRIES = 200
_NAME = re.compile(r"rlvr-sandbox-(\d+)-\d+")


def _own_paths() -> dict[str, str]:
    """This process's cgroup per hierarchy, from /proc/self/cgroup: ``{"": path}`` for v2,
    ``{"memory": path, "pids": path, ...}`` for v1 controllers."""
    paths = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


def _v2_base() -> Path | None:
    """The unified-hierarchy directory under which this process may make child groups with
    the memory and pids controllers, or None."""
    own = _own_paths().get("")
    for mount in (ROOT, ROOT / "unified"):
        if own is None or not (mount / "cgroup.controllers").is_file():
            continue
        base = mount / own.lstrip("/")
        try:
            enabled = (base / "cgroup.subtree_control").read_text().split()
        except OSError:
            continue
        if {"memory", "pids"} <= set(enabled) and os.access(base, os.W_OK):
            return base
    return None


def _v1_bases() -> dict[str, Path] | None:
    """The v1 ``memory``, ``pids`` and ``cpuacct`` directories of this process, when all three
    are mounted and writable; else None."""
    own = _own_paths()
    bases = {}
    for controller in ("memory", "pids", "cpuacct"):
        mounts = [ROOT / controller, ROOT / "cpu,cpuacct"] if controller == "cpuacct" else []
        for mount in mounts or [ROOT / controller]:
            base = mount / own.get(controller, "/").lstrip("/")
            if (mount / "cgroup.procs").is_file() and os.access(base, os.W_OK):
                bases[controller] = base
                break
        else:
            return None
    return bases


def _read_int(path: Path, key: str | None = None) -> int:
    """An integer file, or the ``key`` line of a flat-keyed file; 0 when absent."""
    try:
        text = path.read_text()
    except OSError:
        return 0
    if key is None:
        return int(text.split()[0]) if text.split() else 0
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


@dataclass
class SampleCgroup:
    """One run's control group (v2: one directory; v1: one per controller).

    ``budgets`` are its (memory bytes, processes) limits, written once when it was made;
    ``start`` holds its cumulative counters (OOM kills, refused forks, CPU seconds) as they were
    when the current run began."""

    dirs: dict[str, Path]
    version: int
    cpu_budget_s: float
    budgets: tuple[int, int] = (0, 0)
    start: tuple[int, int, float] = field(default=(0, 0, 0.0))

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files the worker joins (one per hierarchy)."""
        return [str(d / "cgroup.procs") for d in dict.fromkeys(self.dirs.values())]

    def _cpu_total(self) -> float:
        if self.version == 2:
            return _read_int(self.dirs["cpu"] / "cpu.stat", "usage_usec") / 1e6
        return _read_int(self.dirs["cpu"] / "cpuacct.usage") / 1e9

    def _counters(self) -> tuple[int, int, float]:
        """(OOM kills, refused forks, CPU seconds) since the group was made."""
        memory, pids = self.dirs["memory"], self.dirs["pids"]
        if self.version == 2:
            oom = _read_int(memory / "memory.events", "oom_kill")
        else:
            oom = _read_int(memory / "memory.oom_control", "oom_kill")
        return oom, _read_int(pids / "pids.events", "max"), self._cpu_total()

    def begin(self, cpu_seconds: float) -> None:
        """Start counting a new run (budget ``cpu_seconds``) from the counters' present values."""
        self.cpu_budget_s = cpu_seconds
        self.start = self._counters()

    def cpu_seconds(self) -> float:
        """CPU time used by the whole tree of the current run so far."""
        return self._cpu_total() - self.start[2]

    def over_cpu(self) -> bool:
        return self.cpu_seconds() > self.cpu_budget_s

    def exceeded(self) -> str | None:
        """``"memory"`` when the OOM killer acted in the group during the current run,
        ``"processes"`` when a fork was refused at ``pids.max``, ``"cpu_time"`` past the CPU
        budget, else None."""
        oom, refused, _ = self._counters()
        if oom > self.start[0]:
            return "memory"
        if refused > self.start[1]:
            return "processes"
        return "cpu_time" if self.over_cpu() else None

    def _pids(self) -> set[int]:
        found = set()
        for procs in self.procs_files:
            with contextlib.suppress(OSError, ValueError):
                found |= {int(p) for p in Path(procs).read_text().split()}
        return found

    def kill(self) -> None:
        """SIGKILL every process of the group (``cgroup.kill`` on v2), repeatedly, until it
        is empty or a bound of rounds is reached (pids.max bounds what a fork bomb can add)."""
        if self.version == 2:
            with contextlib.suppress(OSError):
                (self.dirs["memory"] / "cgroup.kill").write_text("1")
        for _ in range(_REMOVE_TRIES):
            pids = self._pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def remove(self) -> None:
        """Kill what is left and remove the group's directories; never raises (a group that
        cannot be removed is logged and left)."""
        self.kill()
        for path in dict.fromkeys(self.dirs.values()):
            for _ in range(_REMOVE_TRIES):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)
            else:
                _log.warning("sandbox: could not remove the control group %s", path)


_idle: list[SampleCgroup] = []
_idle_lock = threading.Lock()
_idle_owner = os.getpid()
_stale_checked: set[Path] = set()


def idle_groups() -> list[SampleCgroup]:
    """The groups kept for reuse by this process (empty, between runs)."""
    with _idle_lock:
        return list(_idle) if _idle_owner == os.getpid() else []


def create(memory_bytes: int, max_processes: int, cpu_seconds: float) -> SampleCgroup | None:
    """A control group for one run with these budgets for its whole tree (an idle one made
    for the same budgets, else a new one), or None when this host gives no writable hierarchy
    with the memory and pids controllers."""
    budgets = (int(memory_bytes), int(max_processes))
    group = _reuse(budgets)
    if group is None:
        group = _make(budgets)
    if group is not None:
        group.begin(cpu_seconds)
    return group


def release(group: SampleCgroup) -> None:
    """The run of ``group`` ended: kill what is left; keep the group for reuse when it is
    empty (the least recently used idle group makes room when the pool is full), else remove
    it. Never raises."""
    group.kill()
    global _idle_owner
    evicted = None
    with _idle_lock:
        if _idle_owner != os.getpid():  # a forked child: the parent's pool is not its own
            _idle.clear()
            _idle_owner = os.getpid()
        if not group._pids():
            if len(_idle) >= IDLE_GROUPS:
                evicted = _idle.pop(0)
            _idle.append(group)
            group = None
    for gone in (group, evicted):
        if gone is not None:
            gone.remove()


def _reuse(budgets: tuple[int, int]) -> SampleCgroup | None:
    with _idle_lock:
        if _idle_owner != os.getpid():
            return None
        for i, group in enumerate(_idle):
            if group.budgets == budgets:
                return _idle.pop(i)
    return None


def _remove_idle() -> None:
    """At exit: remove this process's idle groups."""
    with _idle_lock:
        groups = list(_idle) if _idle_owner == os.getpid() else []
        _idle.clear()
    for group in groups:
        group.remove()


atexit.register(_remove_idle)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(parents: list[Path]) -> None:
    """Remove the empty groups that processes which died without cleaning up left under
    ``parents`` (once per parent directory and process)."""
    for parent in parents:
        if parent in _stale_checked:
            continue
        _stale_checked.add(parent)
        with contextlib.suppress(OSError), os.scandir(parent) as entries:
            for entry in entries:
                match = _NAME.fullmatch(entry.name)
                if match and entry.is_dir() and not _alive(int(match.group(1))):
                    with contextlib.suppress(OSError):
                        os.rmdir(entry.path)  # fails, harmlessly, if a process is still in it


def _make(budgets: tuple[int, int]) -> SampleCgroup | None:
    """A new group with these budgets, or None (see :func:`create`)."""
    name = f"rlvr-sandbox-{os.getpid()}-{next(_counter)}"
    memory, pids = (str(b) for b in budgets)
    base = _v2_base()
    if base is not None:
        path = base / name
        group = SampleCgroup({"memory": path, "pids": path, "cpu": path}, 2, 0.0, budgets)
        settings = [(path / "memory.max", memory), (path / "memory.swap.max", "0")]
        settings.append((path / "pids.max", pids))
    else:
        bases = _v1_bases()
        if bases is None:
            return None
        dirs = {"memory": bases["memory"] / name, "pids": bases["pids"] / name}
        dirs["cpu"] = bases["cpuacct"] / name
        group = SampleCgroup(dirs, 1, 0.0, budgets)
        settings = [(dirs["memory"] / "memory.limit_in_bytes", memory)]
        settings.append((dirs["memory"] / "memory.memsw.limit_in_bytes", memory))
        settings.append((dirs["pids"] / "pids.max", pids))
    _remove_stale(list(dict.fromkeys(path.parent for path in group.dirs.values())))
    try:
        for path in dict.fromkeys(group.dirs.values()):
            path.mkdir()
        for path, value in settings:
            if path.exists():
                path.write_text(value)
    except OSError as err:
        group.remove()
        _log.warning("sandbox: could not make a control group (%s); per-process limits only", err)
        return None
    return group
