"""The sandbox's zygote (issue "fast by default"): programs run in forks of one pre-started
interpreter, and still behave as ``python main.py`` would (exit statuses, threads, atexit,
unflushed output, their own ``__main__``, their own random stream), no run's files ever pass
through the zygote's memory, and a zygote that dies is replaced."""

from __future__ import annotations

import os
import signal
import time

import pytest

from rlvr.sandbox import sandbox
from rlvr.sandbox.sandbox import run_python


def test_exit_statuses_are_those_of_a_script():
    assert run_python("import sys; sys.exit(3)").returncode == 3
    assert run_python("raise SystemExit").returncode == 0
    said = run_python("import sys; sys.exit('bye')")
    assert said.returncode == 1 and "bye" in said.stderr
    failed = run_python("def f():\n    raise ValueError('no')\nf()")
    assert failed.returncode == 1 and "ValueError: no" in failed.stderr
    assert "Traceback" in failed.stderr and "_sandbox" not in failed.stderr


def test_threads_atexit_and_unflushed_output_finish_as_in_a_script():
    code = (
        "import atexit, sys, threading, time\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "def late():\n    time.sleep(0.2)\n    print('thread done')\n"
        "threading.Thread(target=late).start()\n"
        "sys.stdout.write('no newline')\n"
        "sys.stderr.write('err no newline')\n"
    )
    result = run_python(code)
    assert result.ok, result.stderr
    assert result.stdout == "no newlinethread done\natexit ran\n"
    assert result.stderr == "err no newline"


def test_the_program_has_its_own_main_module_and_random_stream():
    code = (
        "import pickle, random, sys\n"
        "class Point:\n    pass\n"
        "assert sys.modules['__main__'].Point is Point\n"
        "assert pickle.loads(pickle.dumps(Point())).__class__ is Point\n"
        "print(random.random(), sys.argv, __name__)\n"
    )
    first, second = run_python(code), run_python(code)
    assert first.ok and second.ok, first.stderr + second.stderr
    assert first.stdout.split()[1:] == ["['main.py']", "__main__"]
    assert first.stdout.split()[0] != second.stdout.split()[0]


def memory_holds(pid: int, needle: bytes) -> bool:
    """Whether any readable mapping of process ``pid`` holds ``needle``."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb") as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if "r" not in perms:
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                if needle in mem.read(end - start):
                    return True
            except (OSError, OverflowError, ValueError):
                continue  # [vvar] and the like
    return False


@pytest.mark.skipif(os.geteuid() != 0, reason="reads another process's memory as root")
def test_no_runs_files_pass_through_the_zygotes_memory():
    secret = "zygote-" + os.urandom(16).hex()
    result = run_python("print(open('tests.json').read()[:7])", files={"tests.json": secret})
    assert result.stdout == "zygote-\n"
    zygote = sandbox._ZYGOTE.proc
    assert zygote is not None and zygote.poll() is None
    assert memory_holds(zygote.pid, b"def _place_fds(")  # the scan finds what it holds
    assert not memory_holds(zygote.pid, secret.encode())


def test_a_zygote_that_died_is_replaced():
    assert run_python("print(1)").stdout == "1\n"
    zygote = sandbox._ZYGOTE.proc
    assert zygote is not None
    os.kill(zygote.pid, signal.SIGKILL)
    zygote.wait()
    assert run_python("print(2)").stdout == "2\n"
    assert sandbox._ZYGOTE.proc is not None and sandbox._ZYGOTE.proc.pid != zygote.pid


def test_the_zygote_exits_when_the_trainer_lets_go():
    run_python("pass")
    zygote = sandbox._ZYGOTE.proc
    assert zygote is not None
    sandbox._ZYGOTE._stop()  # what the trainer's exit does: its end of the socket closes
    deadline = time.monotonic() + 5
    while zygote.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert zygote.poll() == 0
    assert run_python("print(3)").stdout == "3\n"  # and a new one starts on the next run
