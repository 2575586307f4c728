"""Soak test of the code sandbox: 400 samples (``RLVR_SOAK_SAMPLES`` for more) in a row
through the code reward, two at a time, cycling through cheap hostile programs (and correct
solutions), then the test process is checked to be as it was: no process, work directory or
control group of a run left, the same mounts, the same file descriptors (give or take a few).

The programs end in about 0.1 s each; the infinite loops (2% of the samples) spend their
one-second CPU budget.
"""

from __future__ import annotations

import json
import os
import signal
from concurrent.futures import ThreadPoolExecutor

from test_sandbox_attacks import nothing_left_behind, require

from rlvr.data.base import Problem
from rlvr.rewards.code import python_unit_tests
from rlvr.rewards.protocol import Score
from rlvr.sandbox.sandbox import run_python

SAMPLES = int(os.environ.get("RLVR_SOAK_SAMPLES", "400"))  # 400 take ~25 s; make test's budget
LOOP_EVERY = 50  # one sample in 50 is an infinite loop
LIMITS = {
    "wall_seconds": 5.0,  # the cheap programs end long before; the loop has its own
    "cpu_seconds": 1.0,
    "memory_bytes": 128 << 20,
    "max_processes": 16,
    "max_disk_bytes": 4 << 20,
    "max_files": 128,
    "max_output_bytes": 16 << 10,
}
LOOP_LIMITS = {**LIMITS, "wall_seconds": 1.5}
SUM_IO = "a, b = map(int, input().split())\nprint(a + b)\n"
SUM = Problem(
    "sum", "Read a and b, print a + b.", json.dumps([{"input": "1 2\n", "output": "3\n"}])
)
ADD = Problem("add", "Write add(a, b).", json.dumps(["assert add(1, 2) == 3"]))
KILLED = "0/1 tests passed; case 0: killed ({})"
RT_SIGNAL = int(signal.SIGRTMIN) + 2

# name: (program, problem, the reasons it may score with); the correct solution scores 1
PROGRAMS: dict[str, tuple[str, Problem, tuple[str, ...]]] = {
    "correct": (SUM_IO, SUM, ("1/1 tests passed",)),
    "always-equal object": (
        "class Any:\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = object.__hash__\n"
        "def add(a, b):\n    return Any()\n",
        ADD,
        ("0/1 tests passed; test 0: ",),
    ),
    "fork and exit, the child answers later": (
        "import os, time\nif os.fork() == 0:\n    time.sleep(0.3)\n    print(3)\nos._exit(0)\n",
        SUM,
        ("0/1 tests passed; case 0: expected '3', got ''",),
    ),
    "memory hog in children": (
        "import os\nr, w = os.pipe()\nfor _ in range(3):\n    if os.fork() == 0:\n"
        "        os.close(w)\n        block = b'x' * (64 << 20)\n        os.read(r, 1)\n"
        "        os._exit(0)\n"
        "os.close(r)\nos.wait()\nos.close(w)\nos.wait()\nos.wait()\n" + SUM_IO,
        SUM,
        (KILLED.format("memory"),),
    ),
    "disk filler": (
        "try:\n    with open('fill', 'wb') as f:\n        for _ in range(8):\n"
        "            f.write(b'x' * (1 << 20))\nexcept OSError:\n    pass\n" + SUM_IO,
        SUM,
        (KILLED.format("disk"),),
    ),
    "real-time signal to itself": (
        f"import os\nos.kill(os.getpid(), {RT_SIGNAL})\n" + SUM_IO,
        SUM,
        (KILLED.format(f"signal:{RT_SIGNAL}"),),
    ),
    "garbage bytes on stdout": (
        "import os\nos.write(1, bytes(range(256)) * 4)\n",
        SUM,
        ("0/1 tests passed; case 0: expected '3', got '",),
    ),
    "deep directory tree": (
        "import os\ntry:\n    while True:\n        os.mkdir('d')\n        os.chdir('d')\n"
        "except OSError:\n    pass\n" + SUM_IO,
        SUM,
        (KILLED.format("disk"),),
    ),
    "forbidden system call": (
        "import ctypes\nctypes.CDLL(None).unshare(0x10000000)\n" + SUM_IO,
        SUM,
        (KILLED.format("forbidden_syscall"),),
    ),
    # under a loaded machine the wall limit may come first
    "infinite loop": (
        "while True:\n    pass\n",
        SUM,
        (KILLED.format("cpu_time"), KILLED.format("wall_time")),
    ),
}


def _schedule(n: int) -> list[str]:
    """``n`` program names: the infinite loop every :data:`LOOP_EVERY`-th, the others in turn."""
    cheap = [name for name in PROGRAMS if name != "infinite loop"]
    return [
        "infinite loop" if k % LOOP_EVERY == LOOP_EVERY - 1 else cheap[k % len(cheap)]
        for k in range(n)
    ]


def _score(name: str) -> Score:
    code, problem, _ = PROGRAMS[name]
    limits = LOOP_LIMITS if name == "infinite loop" else LIMITS
    return python_unit_tests(f"```python\n{code}```", problem, limits=limits)


def _as_expected(name: str, score: Score) -> bool:
    reasons = PROGRAMS[name][2]
    value = 1.0 if name == "correct" else 0.0
    return score == value and any(score.reason.startswith(r) for r in reasons)


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def _mount_count() -> int:
    with open("/proc/self/mountinfo") as f:
        return len(f.readlines())


def test_hundreds_of_mixed_samples_leave_the_process_as_it_was():
    require(run_python("pass").isolation, "mountns", "tmpfs", "pidns", "cgroup", "seccomp")
    schedule = _schedule(SAMPLES)
    fds, mounts = _fd_count(), _mount_count()
    with nothing_left_behind(), ThreadPoolExecutor(2) as pool:
        scores = list(pool.map(_score, schedule))
    unexpected = [
        (k, name, float(score), score.reason)
        for k, (name, score) in enumerate(zip(schedule, scores, strict=True))
        if not _as_expected(name, score)
    ]
    assert unexpected[:10] == [], f"{len(unexpected)} of {SAMPLES} samples scored unexpectedly"
    assert sum(s == 1.0 for s in scores) == schedule.count("correct") >= SAMPLES // 10
    assert _mount_count() == mounts
    assert abs(_fd_count() - fds) <= 3
