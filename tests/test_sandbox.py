"""Containment of the code sandbox: each hostile program fails (or is killed) with a reason,
the test process stays healthy, and no process of the run is left behind.

Most cases run twice: with the kernel namespaces (``namespaces=True``, what the library uses)
and without them (the fallback of hosts that refuse ``unshare``: dedicated uid, rlimits and
the best-effort audit hook).
"""

from __future__ import annotations

import os
import resource
import secrets
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path

import pytest
from test_sandbox_attacks import descendants, is_pool_helper, leaked_sandbox_processes

from rlvr.sandbox.sandbox import (
    SANDBOX_UID_BASE,
    SANDBOX_UID_COUNT,
    SandboxLimits,
    SandboxResult,
    run_python,
)

IS_ROOT = os.geteuid() == 0
FAST = SandboxLimits(wall_seconds=5.0, cpu_seconds=2.0, memory_bytes=256 << 20, max_processes=16)
MODES = [pytest.param(True, id="namespaces"), pytest.param(False, id="fallback")]


@pytest.fixture(scope="module")
def kernel_layers() -> tuple[str, ...]:
    """The layers this host gives a sandboxed run (probed once)."""
    return run_python("pass").isolation


def _needs(layers: tuple[str, ...], *wanted: str) -> None:
    missing = [w for w in wanted if w not in layers]
    if missing:
        pytest.skip(f"this host refuses the kernel feature(s) {missing} (unshare/mount denied)")


@pytest.fixture
def no_leftovers():
    """After the test: no new descendant of this process and no process, zombies included, of
    a sandbox uid that no run holds (runs of other processes, such as the other pytest-xdist
    worker's, hold their uids and are not counted)."""
    before = set(descendants(os.getpid()))
    yield
    left = [p for p in descendants(os.getpid()) if p not in before]
    assert [p for p in left if not is_pool_helper(p)] == [], "sandbox processes outlived it"
    assert leaked_sandbox_processes() == []


# --- basics ---------------------------------------------------------------------------------


def test_runs_code_with_stdin_and_scrubbed_environment(no_leftovers):
    code = "import os, sys\nprint(input()[::-1])\nprint(sorted(os.environ))\nprint(os.getcwd())"
    result = run_python(code, stdin="olleh\n")
    assert result.ok, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "hello"
    assert lines[1] == "['HOME', 'LANG', 'PATH', 'TMPDIR']"
    workdir = lines[2]
    if "mountns" in result.isolation:  # the program's own tmpfs, not the host's /tmp
        assert workdir == "/tmp"
    else:
        assert workdir.startswith(tempfile.gettempdir())
        assert not os.path.exists(workdir), "the workdir is removed after the run"
    assert 0 < result.seconds < 30


def test_exceptions_and_exit_codes_are_reported():
    failed = run_python("def f():\n    raise KeyError('k')\nf()")
    assert failed.returncode == 1 and not failed.ok and failed.killed_reason is None
    assert "KeyError: 'k'" in failed.stderr and 'File "main.py", line 2' in failed.stderr
    assert run_python("import sys; sys.exit(3)").returncode == 3
    syntax = run_python("def f(:\n  pass")
    assert syntax.returncode == 1 and "SyntaxError" in syntax.stderr


def test_isolation_layers_in_force(kernel_layers):
    assert "rlimits" in kernel_layers
    if IS_ROOT:
        assert "uid" in kernel_layers
    fallback = run_python("pass", namespaces=False).isolation
    assert "audit_hook_net" in fallback and "audit_hook_fs" in fallback
    assert "netns" not in fallback


def test_runs_as_an_unprivileged_user():
    if not IS_ROOT:
        pytest.skip("privilege dropping applies when the trainer runs as root")
    result = run_python("import os; print(os.getuid(), os.getgid(), os.getgroups())")
    uid, gid, groups = result.stdout.split(maxsplit=2)
    assert SANDBOX_UID_BASE <= int(uid) < SANDBOX_UID_BASE + SANDBOX_UID_COUNT
    assert int(gid) == int(uid) and groups.strip() == "[]"


def test_limits_are_validated():
    with pytest.raises(ValueError, match="wall_seconds"):
        SandboxLimits(wall_seconds=0)
    with pytest.raises(ValueError, match="plain file names"):
        run_python("pass", files={"../x.py": "1"})


# --- time -----------------------------------------------------------------------------------


@pytest.mark.parametrize("namespaces", MODES)
def test_cpu_bound_infinite_loop_hits_the_cpu_limit(namespaces, no_leftovers):
    limits = SandboxLimits(wall_seconds=10.0, cpu_seconds=1.0)
    start = time.monotonic()
    result = run_python("while True:\n    pass", limits=limits, namespaces=namespaces)
    assert result.timed_out and result.killed_reason == "cpu_time"
    assert not result.ok and time.monotonic() - start < 9.5  # before the 10-s wall limit


def test_sleeping_program_hits_the_wall_limit(no_leftovers):
    limits = SandboxLimits(wall_seconds=1.0)
    result = run_python("import time\ntime.sleep(60)", limits=limits)
    assert result.timed_out and result.killed_reason == "wall_time"
    assert result.returncode is None and 1.0 <= result.seconds < 30  # not the 60-s sleep


def test_ignoring_sigxcpu_still_dies_at_the_hard_limit(no_leftovers):
    code = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass"
    result = run_python(code, limits=SandboxLimits(wall_seconds=10.0, cpu_seconds=1.0))
    # the parent's CPU watch over the control group, or else RLIMIT_CPU's hard limit
    assert result.killed_reason in ("cpu_time", "sigkill") and not result.ok


# --- processes ------------------------------------------------------------------------------

FORK_BOMB = """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""


@pytest.mark.parametrize("namespaces", MODES)
def test_fork_bomb_is_contained_and_fully_killed(namespaces, no_leftovers):
    limits = SandboxLimits(wall_seconds=1.5, cpu_seconds=5.0, max_processes=16)
    start = time.monotonic()
    result = run_python(FORK_BOMB, limits=limits, namespaces=namespaces)
    assert result.timed_out and result.killed_reason == "wall_time"
    assert time.monotonic() - start < 30
    # the no_leftovers fixture checks that the whole tree is gone (no zombies either)


@pytest.mark.parametrize("namespaces", MODES)
def test_daemon_that_escapes_the_session_is_killed(namespaces, no_leftovers):
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(600)\n"
        "    os._exit(0)\n"
        "print('main done')\n"
    )
    start = time.monotonic()
    result = run_python(code, limits=FAST, namespaces=namespaces)
    assert result.ok and result.stdout.strip() == "main done"
    assert time.monotonic() - start < 30  # not the daemon's 600 s


def test_process_limit_applies(kernel_layers):
    if not IS_ROOT and "userns" not in kernel_layers:
        pytest.skip("RLIMIT_NPROC needs a dedicated uid (root) or a user namespace")
    code = (
        "import os\nn = 0\nfor _ in range(100):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        import time\n"
        "        time.sleep(5)\n        os._exit(0)\n    n += 1\nprint(n)\n"
    )
    result = run_python(code, limits=SandboxLimits(max_processes=8, wall_seconds=5))
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) < 8
    if "cgroup" in result.isolation:  # a refused fork is a budget exceeded: the run fails
        assert result.killed_reason == "processes" and not result.ok


# --- memory and output ----------------------------------------------------------------------


@pytest.mark.parametrize("namespaces", MODES)
@pytest.mark.parametrize(
    "code",
    [
        "x = bytearray(4 * 1024 ** 3)",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(10 ** 7))",
    ],
    ids=["one-big", "incremental"],
)
def test_memory_bomb_fails_with_memory_error(code, namespaces, no_leftovers):
    result = run_python(code, limits=FAST, namespaces=namespaces)
    assert not result.ok
    if result.killed_reason is None:  # refused by RLIMIT_AS
        assert result.returncode == 1 and "MemoryError" in result.stderr
    else:  # killed by the control group's OOM killer
        assert result.killed_reason == "memory" and "cgroup" in result.isolation


@pytest.mark.parametrize("namespaces", MODES)
def test_printing_gigabytes_is_cut_and_killed(namespaces, no_leftovers):
    limits = SandboxLimits(wall_seconds=10.0, max_output_bytes=64 << 10)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    code = "import sys\nline = 'x' * (1 << 20)\nwhile True:\n    sys.stdout.write(line)"
    result = run_python(code, limits=limits, namespaces=namespaces)
    assert result.killed_reason == "output_limit" and not result.ok
    assert len(result.stdout) <= 64 << 10
    assert time.monotonic() - start < 5
    growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert growth_kib < 64 << 10  # the parent never held the output


def test_file_size_limit():
    limits = SandboxLimits(max_file_bytes=1 << 20)
    result = run_python("open('big', 'wb').write(b'x' * (8 << 20))", limits=limits)
    assert not result.ok and result.killed_reason == "file_size"


def test_files_in_the_workdir_work():
    code = "open('a.txt', 'w').write('hi')\nprint(open('a.txt').read(), open('data.txt').read())"
    result = run_python(code, files={"data.txt": "given"})
    assert result.ok and result.stdout.split() == ["hi", "given"]


# --- filesystem -----------------------------------------------------------------------------


@pytest.fixture
def shared_dirs():
    """A world-writable directory and a root-owned protected one with a file in it, both in
    /tmp where the sandbox can reach them."""
    open_dir = Path(tempfile.mkdtemp(prefix="rlvr-test-open-"))
    open_dir.chmod(0o777)
    protected = Path(tempfile.mkdtemp(prefix="rlvr-test-protected-"))
    protected.chmod(0o755)
    keep = protected / "keep.txt"
    keep.write_text("precious")
    keep.chmod(0o644)
    yield open_dir, protected, keep
    shutil.rmtree(open_dir)
    shutil.rmtree(protected)


@pytest.mark.parametrize("namespaces", MODES)
def test_cannot_write_outside_the_workdir(namespaces, shared_dirs, no_leftovers):
    open_dir, _, _ = shared_dirs
    token = secrets.token_hex(6)
    targets = [
        f"/tmp/rlvr-sandbox-escape-{token}",
        f"/root/rlvr-sandbox-escape-{token}",
        f"/dev/shm/rlvr-sandbox-escape-{token}",
        str(open_dir / f"escape-{token}"),
    ]
    code = (
        f"targets = {targets!r}\n"
        "for path in targets:\n"
        "    try:\n"
        "        with open(path, 'w') as f:\n"
        "            f.write('escaped')\n"
        "        print('WROTE', path)\n"
        "    except OSError as err:\n"
        "        print('refused', path, type(err).__name__)\n"
    )
    result = run_python(code, limits=FAST, namespaces=namespaces)
    assert result.ok, result.stderr
    if "mountns" in result.isolation:
        # /tmp and /dev/shm are the program's own tmpfs: writes land there, not on the host
        assert result.stdout.count("refused") == 2
        assert f"refused /root/rlvr-sandbox-escape-{token}" in result.stdout
    else:
        assert "WROTE" not in result.stdout
        assert result.stdout.count("refused") == len(targets)
    for path in targets:
        assert not os.path.exists(path)


@pytest.mark.parametrize("namespaces", MODES)
def test_cannot_delete_files_outside_the_workdir(namespaces, shared_dirs, no_leftovers):
    _, protected, keep = shared_dirs
    code = (
        "import os, shutil\n"
        f"for action in (lambda: os.remove({str(keep)!r}), "
        f"lambda: shutil.rmtree({str(protected)!r}), "
        f"lambda: os.rename({str(keep)!r}, 'stolen'), "
        f"lambda: os.chmod({str(keep)!r}, 0o777)):\n"
        "    try:\n"
        "        action()\n"
        "        print('DONE')\n"
        "    except OSError as err:\n"
        "        print('refused', type(err).__name__)\n"
    )
    result = run_python(code, limits=FAST, namespaces=namespaces)
    assert result.ok, result.stderr
    assert "DONE" not in result.stdout
    assert keep.read_text() == "precious"
    assert stat.S_IMODE(keep.stat().st_mode) == 0o644


def test_root_home_and_shadow_are_unreadable():
    if not IS_ROOT:
        pytest.skip("meaningful when the trainer runs as root")
    code = (
        "import os\n"
        "for path in ('/etc/shadow', '/root/.bash_history', '/root/.ssh/id_rsa'):\n"
        "    try:\n"
        "        open(path).read()\n"
        "        print('READ', path)\n"
        "    except OSError as err:\n"
        "        print('refused', path, type(err).__name__)\n"
    )
    for namespaces in (True, False):
        result = run_python(code, limits=FAST, namespaces=namespaces)
        assert result.ok and "READ" not in result.stdout


# --- secrets --------------------------------------------------------------------------------


@pytest.mark.parametrize("namespaces", MODES)
def test_parent_environment_secret_is_not_visible(namespaces, monkeypatch, no_leftovers):
    secret = "rlvr-secret-" + secrets.token_hex(8)
    monkeypatch.setenv("RLVR_TEST_SECRET", secret)
    me = os.getpid()
    code = (
        "import os\n"
        "print(os.environ.get('RLVR_TEST_SECRET'))\n"
        f"for pid in ({me}, {os.getppid()}, 1, os.getppid()):\n"
        "    try:\n"
        "        print(open(f'/proc/{pid}/environ', 'rb').read())\n"
        "    except OSError as err:\n"
        "        print('refused', pid, type(err).__name__)\n"
        "for pid in os.listdir('/proc'):\n"
        "    if pid.isdigit():\n"
        "        try:\n"
        "            print(open(f'/proc/{pid}/environ', 'rb').read())\n"
        "        except OSError:\n"
        "            pass\n"
    )
    result = run_python(code, limits=FAST, namespaces=namespaces)
    assert result.ok, result.stderr
    assert result.stdout.splitlines()[0] == "None"
    assert secret not in result.stdout and secret not in result.stderr


# --- network --------------------------------------------------------------------------------


@pytest.mark.parametrize("namespaces", MODES)
def test_cannot_connect_to_a_local_listening_socket(namespaces, kernel_layers, no_leftovers):
    if namespaces:
        _needs(kernel_layers, "netns")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = (
            "import socket\n"
            "s = socket.socket()\n"
            "s.settimeout(2)\n"
            "try:\n"
            f"    s.connect(('127.0.0.1', {port}))\n"
            "    s.sendall(b'leak')\n"
            "    print('CONNECTED')\n"
            "except OSError as err:\n"
            "    print('refused', type(err).__name__, err)\n"
        )
        result: SandboxResult = run_python(code, limits=FAST, namespaces=namespaces)
        server.settimeout(0.3)
        with pytest.raises(TimeoutError):
            server.accept()
    assert result.ok, result.stderr
    assert result.stdout.startswith("refused")
    if namespaces:
        assert "netns" in result.isolation and "unreachable" in result.stdout
    else:
        assert "network access is disabled" in result.stdout


def test_parallel_runs_do_not_interfere(no_leftovers):
    from concurrent.futures import ThreadPoolExecutor

    codes = [f"print({k} * {k})" for k in range(6)] + [FORK_BOMB]
    limits = SandboxLimits(wall_seconds=2.0, max_processes=16)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda c: run_python(c, limits=limits), codes))
    assert [r.stdout.strip() for r in results[:6]] == [str(k * k) for k in range(6)]
    assert all(r.ok for r in results[:6])
    assert results[6].timed_out


def test_a_deadline_before_the_supervisor_is_ready_is_a_wall_time_kill(no_leftovers):
    """A budget so short the run ends before its supervisor reports: the program's time ran
    out, not a sandbox failure (no SandboxError)."""
    result = run_python("print(1)", limits=SandboxLimits(wall_seconds=0.001))
    assert result.killed_reason == "wall_time" and not result.ok
