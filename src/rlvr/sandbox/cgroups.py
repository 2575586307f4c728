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

Where no writable hierarchy exists (not root, no delegated subtree), :func:`create` returns
None and the sandbox keeps its per-process rlimits only; ``SandboxResult.isolation`` tells
which (``cgroup`` present or not).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
_log = logging.getLogger(__name__)
_counter = itertools.count()
_REMOVE_TRIES = 200


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
    """One run's control group (v2: one directory; v1: one per controller)."""

    dirs: dict[str, Path]
    version: int
    cpu_budget_s: float

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files the worker joins (one per hierarchy)."""
        return [str(d / "cgroup.procs") for d in dict.fromkeys(self.dirs.values())]

    def cpu_seconds(self) -> float:
        """CPU time used by the whole tree so far."""
        if self.version == 2:
            return _read_int(self.dirs["cpu"] / "cpu.stat", "usage_usec") / 1e6
        return _read_int(self.dirs["cpu"] / "cpuacct.usage") / 1e9

    def over_cpu(self) -> bool:
        return self.cpu_seconds() > self.cpu_budget_s

    def exceeded(self) -> str | None:
        """``"memory"`` when the OOM killer acted in the group, ``"processes"`` when a fork was
        refused at ``pids.max``, ``"cpu_time"`` past the CPU budget, else None."""
        memory, pids = self.dirs["memory"], self.dirs["pids"]
        if self.version == 2:
            oom = _read_int(memory / "memory.events", "oom_kill")
        else:
            oom = _read_int(memory / "memory.oom_control", "oom_kill")
        if oom > 0:
            return "memory"
        if _read_int(pids / "pids.events", "max") > 0:
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


def create(memory_bytes: int, max_processes: int, cpu_seconds: float) -> SampleCgroup | None:
    """A new control group for one run with these budgets for its whole tree, or None when
    this host gives no writable hierarchy with the memory and pids controllers."""
    name = f"rlvr-sandbox-{os.getpid()}-{next(_counter)}"
    memory, pids = str(int(memory_bytes)), str(int(max_processes))
    base = _v2_base()
    if base is not None:
        path = base / name
        group = SampleCgroup({"memory": path, "pids": path, "cpu": path}, 2, cpu_seconds)
        settings = [(path / "memory.max", memory), (path / "memory.swap.max", "0")]
        settings.append((path / "pids.max", pids))
    else:
        bases = _v1_bases()
        if bases is None:
            return None
        dirs = {"memory": bases["memory"] / name, "pids": bases["pids"] / name}
        dirs["cpu"] = bases["cpuacct"] / name
        group = SampleCgroup(dirs, 1, cpu_seconds)
        settings = [(dirs["memory"] / "memory.limit_in_bytes", memory)]
        settings.append((dirs["memory"] / "memory.memsw.limit_in_bytes", memory))
        settings.append((dirs["pids"] / "pids.max", pids))
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
