"""Control groups reused between runs (issue "fast by default"): a group whose run left no
process serves the next run with the same budgets, a budget one run exceeded is not charged to
the next, and groups a dead process left behind are removed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlvr.sandbox import cgroups
from rlvr.sandbox.sandbox import SandboxLimits, run_python


@pytest.fixture(scope="module")
def with_cgroups() -> None:
    if "cgroup" not in run_python("pass").isolation:
        pytest.skip("no writable cgroup hierarchy on this host")


def test_a_group_serves_the_next_run_with_the_same_budgets(with_cgroups):
    limits = SandboxLimits(memory_bytes=300 << 20, max_processes=9)
    run_python("pass", limits=limits)
    kept = [g for g in cgroups.idle_groups() if g.budgets == (300 << 20, 9)]
    assert len(kept) == 1 and not kept[0]._pids()
    paths = dict(kept[0].dirs)
    run_python("pass", limits=limits)
    again = [g for g in cgroups.idle_groups() if g.budgets == (300 << 20, 9)]
    assert [g.dirs for g in again] == [paths]  # the same directories, not a new group
    other = SandboxLimits(memory_bytes=310 << 20, max_processes=9)
    run_python("pass", limits=other)  # other budgets: a group of their own
    assert {g.budgets for g in cgroups.idle_groups()} >= {(300 << 20, 9), (310 << 20, 9)}


def test_a_budget_exceeded_in_one_run_is_not_charged_to_the_next(with_cgroups):
    limits = SandboxLimits(memory_bytes=128 << 20, max_processes=8, wall_seconds=5)
    bomb = "chunks = []\nwhile True:\n    chunks.append(bytearray(10 ** 7))"
    assert run_python(bomb, limits=limits).killed_reason == "memory"
    assert run_python("print(1)", limits=limits).ok
    forks = (
        "import os, time\nfor _ in range(20):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(3)\n"
        "        os._exit(0)\n"
    )
    assert run_python(forks, limits=limits).killed_reason == "processes"
    after = run_python("print(2)", limits=limits)
    assert after.ok and after.killed_reason is None
    spin = "while True:\n    pass"
    cpu = SandboxLimits(memory_bytes=128 << 20, max_processes=8, cpu_seconds=1, wall_seconds=6)
    assert run_python(spin, limits=cpu).killed_reason == "cpu_time"
    assert run_python("print(3)", limits=cpu).ok


def test_groups_a_dead_process_left_are_removed(with_cgroups):
    code = (
        "import os\n"
        "from rlvr.sandbox import cgroups\n"
        "from rlvr.sandbox.sandbox import run_python\n"
        "run_python('pass')\n"
        "print([str(d) for g in cgroups.idle_groups() for d in g.dirs.values()])\n"
        "os._exit(0)  # no clean-up at exit: its idle groups stay behind\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    left = eval(done.stdout.strip())  # noqa: S307 - our own child's repr of a list of str
    assert left and all(os.path.isdir(p) for p in left)
    cgroups._stale_checked.clear()
    cgroups._make((64 << 20, 4)).remove()  # making a group sweeps its parents first
    assert not any(os.path.isdir(p) for p in left)
