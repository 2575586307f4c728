"""The sandbox's seccomp filter (rlvr.sandbox.seccomp).

Two kinds of checks: the programs for every supported architecture are decoded and run
through a small classic-BPF interpreter (jumps in range, each system call number gets the
intended action); and, on this host, forked children install the filter (with
``PR_SET_NO_NEW_PRIVS``) and then make denied calls (killed by ``SIGSYS``) or exec a Python
interpreter that does ordinary work (exit 0). Every denied call is made with arguments that
would fail harmlessly if the filter let it through.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import re
import resource
import signal
import struct
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rlvr.sandbox.seccomp import (
    ALLOWED_PERSONAS,
    BPF_MAXINSNS,
    CLONE_NAMESPACE_FLAGS,
    DENIED_SYSCALLS,
    ENOSYS,
    SECCOMP_ARCHES,
    SECCOMP_RET_ALLOW,
    SECCOMP_RET_ERRNO,
    SECCOMP_RET_KILL_PROCESS,
    build_filter,
    install,
)

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.syscall.restype = ctypes.c_long
PR_SET_NO_NEW_PRIVS = 38
SIGCHLD = 17
CLONE_THREAD = 0x00010000  # without CLONE_SIGHAND: EINVAL before any namespace is made
NAMESPACE_FLAGS = {
    "NEWNS": 0x00020000,
    "NEWCGROUP": 0x02000000,
    "NEWUTS": 0x04000000,
    "NEWIPC": 0x08000000,
    "NEWUSER": 0x10000000,
    "NEWPID": 0x20000000,
    "NEWNET": 0x40000000,
}
OTHER_AUDIT_ARCHES = {"i386": 0x40000003, "arm": 0x40000028}
MISSING_ON = {"x86_64": set(), "aarch64": {"iopl", "ioperm"}}
HEADERS = {
    "x86_64": ["/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"],
    "aarch64": ["/usr/include/asm-generic/unistd.h"],
}
HOST = build_filter()
HOST_NRS = SECCOMP_ARCHES[platform.machine()].syscalls if HOST is not None else {}
MISSING_PATH = b"/nonexistent-rlvr-seccomp-test"


# --- the program, decoded and interpreted -------------------------------------------------------


def _decode(program: bytes) -> list[tuple[int, int, int, int]]:
    assert len(program) % 8 == 0
    return list(struct.iter_unpack("<HBBI", program))


def _run(program: bytes, arch: int, nr: int, arg0: int = 0) -> int:
    """The action of ``program`` for one call: a classic-BPF interpreter of the instructions
    the builder uses (LD|W|ABS, JEQ/JGE/JSET with a constant, RET with a constant)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    insns = _decode(program)
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            (acc,) = struct.unpack_from("<I", data, k)
            pc += 1
        elif code == 0x06:
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: acc & k != 0}[code]
            pc += 1 + (jt if taken else jf)


@pytest.fixture(params=sorted(SECCOMP_ARCHES))
def arch(request) -> str:
    return request.param


def test_program_is_whole_instructions_with_jumps_inside(arch):
    insns = _decode(build_filter(arch))
    assert 0 < len(insns) <= BPF_MAXINSNS
    for pc, (code, jt, jf, _k) in enumerate(insns):
        if code in (0x15, 0x35, 0x45):
            assert pc + 1 + max(jt, jf) < len(insns)
    assert insns[-1][0] == 0x06  # no path runs off the end


def test_every_denied_name_is_killed(arch):
    spec = SECCOMP_ARCHES[arch]
    program = build_filter(arch)
    present = [name for name in DENIED_SYSCALLS if name in spec.syscalls]
    assert set(DENIED_SYSCALLS) - set(present) == MISSING_ON[arch]
    for name in present:
        assert _run(program, spec.audit_arch, spec.syscalls[name]) == SECCOMP_RET_KILL_PROCESS


def test_every_other_number_is_allowed(arch):
    spec = SECCOMP_ARCHES[arch]
    program = build_filter(arch)
    special = {spec.syscalls[n] for n in (*DENIED_SYSCALLS, "clone3") if n in spec.syscalls}
    for nr in set(range(1000)) - special:
        assert _run(program, spec.audit_arch, nr) == SECCOMP_RET_ALLOW, nr


def test_clone_is_judged_by_its_namespace_flags(arch):
    spec = SECCOMP_ARCHES[arch]
    program = build_filter(arch)
    clone = spec.syscalls["clone"]
    for flag in NAMESPACE_FLAGS.values():
        assert _run(program, spec.audit_arch, clone, flag | SIGCHLD) == SECCOMP_RET_KILL_PROCESS
    assert sum(NAMESPACE_FLAGS.values()) == CLONE_NAMESPACE_FLAGS
    thread_flags = 0x003D0F00  # what pthread_create passes (VM|FS|FILES|SIGHAND|THREAD|...)
    for flags in (SIGCHLD, thread_flags, 0x80, 0xFFFFFFFF00000000 | SIGCHLD):
        assert _run(program, spec.audit_arch, clone, flags) == SECCOMP_RET_ALLOW, hex(flags)


def test_clone3_personality_socket_and_other_abis(arch):
    spec = SECCOMP_ARCHES[arch]
    program = build_filter(arch)
    nrs = spec.syscalls
    assert _run(program, spec.audit_arch, nrs["clone3"]) == SECCOMP_RET_ERRNO | ENOSYS
    for persona in ALLOWED_PERSONAS:
        assert _run(program, spec.audit_arch, nrs["personality"], persona) == SECCOMP_RET_ALLOW
    no_aslr = 0x0040000
    assert _run(program, spec.audit_arch, nrs["personality"], no_aslr) == SECCOMP_RET_KILL_PROCESS
    for family in (1, 2, 10, 16):  # AF_UNIX, AF_INET, AF_INET6, AF_NETLINK
        assert _run(program, spec.audit_arch, nrs["socket"], family) == SECCOMP_RET_ALLOW
    assert _run(program, spec.audit_arch, nrs["socket"], 40) == SECCOMP_RET_KILL_PROCESS
    for other in OTHER_AUDIT_ARCHES.values():
        assert _run(program, other, nrs["clone"], SIGCHLD) == SECCOMP_RET_KILL_PROCESS
    if spec.foreign_nr_from is not None:
        x32_getpid = spec.foreign_nr_from | 39
        assert _run(program, spec.audit_arch, x32_getpid) == SECCOMP_RET_KILL_PROCESS


def test_numbers_match_the_installed_kernel_headers(arch):
    header = next((Path(p) for p in HEADERS[arch] if Path(p).is_file()), None)
    if header is None:
        pytest.skip(f"no kernel header for {arch} on this machine ({HEADERS[arch]})")
    defined = dict(re.findall(r"^#define __NR_(\w+)\s+(\d+)\s*$", header.read_text(), re.M))
    checked = {n: nr for n, nr in SECCOMP_ARCHES[arch].syscalls.items() if n in defined}
    assert len(checked) >= len(SECCOMP_ARCHES[arch].syscalls) - 1  # open_tree_attr is new
    assert {n: int(defined[n]) for n in checked} == checked


def test_unsupported_architectures_get_none():
    assert build_filter("sparc") is None
    assert build_filter("") is None
    if platform.machine() in SECCOMP_ARCHES:
        assert build_filter() == build_filter(platform.machine())


@pytest.mark.parametrize("size", [0, 7, 9, 8 * (BPF_MAXINSNS + 1)])
def test_install_refuses_partial_or_oversized_programs(size):
    with pytest.raises(ValueError, match="8-byte instructions"):
        install(bytes(size))


# --- installed in forked children on this host --------------------------------------------------


def _kernel_seccomp() -> bool:
    try:
        return "\nSeccomp:" in Path("/proc/self/status").read_text()
    except OSError:
        return False


needs_kernel = pytest.mark.skipif(
    HOST is None or not _kernel_seccomp(),
    reason=f"no seccomp filter for {platform.machine()!r} or no seccomp in this kernel",
)


def _status_in_child(action: Callable[[], int], program: bytes | None = HOST) -> int:
    """Fork; the child sets NO_NEW_PRIVS, installs ``program`` and exits with ``action()``
    (126: install raised, 127: action raised); returns the child's wait status."""
    pid = os.fork()
    if pid == 0:
        code = 126
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file of the SIGSYS
            one, zero = ctypes.c_ulong(1), ctypes.c_ulong(0)
            LIBC.prctl(PR_SET_NO_NEW_PRIVS, one, zero, zero, zero)
            install(program)
            code = 127
            code = action()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return status


def _syscall(name: str, *args: int | bytes | None) -> Callable[[], int]:
    def call() -> int:
        LIBC.syscall(ctypes.c_long(HOST_NRS[name]), *args)
        return 0  # not killed

    return call


DENIED_CALLS = {
    "unshare_newuser": _syscall("unshare", ctypes.c_int(NAMESPACE_FLAGS["NEWUSER"])),
    "unshare_newns": _syscall("unshare", ctypes.c_int(NAMESPACE_FLAGS["NEWNS"])),
    "mount": lambda: LIBC.mount(None, MISSING_PATH, b"tmpfs", ctypes.c_ulong(0), None) and 0,
    "chroot": _syscall("chroot", MISSING_PATH),
    "setns": _syscall("setns", ctypes.c_int(-1), ctypes.c_int(0)),
    "ptrace": _syscall("ptrace", ctypes.c_long(-1), ctypes.c_long(0), None, None),
    "bpf": _syscall("bpf", ctypes.c_int(-1), None, ctypes.c_uint(0)),
    "io_uring_setup": _syscall("io_uring_setup", ctypes.c_uint(0), None),
    "personality_no_aslr": _syscall("personality", ctypes.c_ulong(0x0040000)),
    "socket_vsock": _syscall("socket", ctypes.c_int(40), ctypes.c_int(1), ctypes.c_int(0)),
    **{
        f"clone_{name.lower()}": _syscall("clone", ctypes.c_ulong(flag | CLONE_THREAD), None)
        for name, flag in NAMESPACE_FLAGS.items()
    },
}


@needs_kernel
@pytest.mark.parametrize("name", sorted(DENIED_CALLS))
def test_denied_call_kills_the_process_with_sigsys(name):
    status = _status_in_child(DENIED_CALLS[name])
    assert os.WIFSIGNALED(status), f"{name}: not killed (wait status {status:#x})"
    assert os.WTERMSIG(status) == signal.SIGSYS


@needs_kernel
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the x32 ABI is x86_64's")
def test_x32_system_call_is_killed():
    x32_getpid = ctypes.c_long(SECCOMP_ARCHES["x86_64"].foreign_nr_from | 39)
    status = _status_in_child(lambda: LIBC.syscall(x32_getpid) and 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSYS


def _errno_is(expected: int, call: Callable[[], int]) -> Callable[[], int]:
    def check() -> int:
        ctypes.set_errno(0)
        call()
        return 0 if ctypes.get_errno() == expected else 1

    return check


@needs_kernel
def test_clone3_fails_with_enosys_and_harmless_personas_pass():
    assert _status_in_child(_errno_is(errno.ENOSYS, _syscall("clone3", None, 0))) == 0
    query = _syscall("personality", ctypes.c_ulong(0xFFFFFFFF))
    assert _status_in_child(_errno_is(0, query)) == 0


@needs_kernel
def test_kernel_rejects_an_invalid_program_with_oserror():
    def install_garbage() -> int:
        try:
            install(struct.pack("<HBBI", 0xFFFF, 0, 0, 0))  # no such BPF opcode
        except OSError as err:
            return 0 if err.errno == errno.EINVAL else 2
        return 1

    assert (
        _status_in_child(
            install_garbage, program=struct.pack("<HBBI", 0x06, 0, 0, SECCOMP_RET_ALLOW)
        )
        == 0
    )


ORDINARY_WORK = {
    "imports": "import json, math, threading, multiprocessing; print(1)",
    "files": (
        "import os, sys; p = os.path.join(sys.argv[1], 'f.txt')\n"
        "open(p, 'w').write('hello'); assert open(p).read() == 'hello'; os.remove(p)"
    ),
    "fork": (
        "import os; pid = os.fork()\n"
        "if pid == 0: os._exit(7)\n"
        "assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7"
    ),
    "threads": (
        "import threading; out = []; t = threading.Thread(target=out.append, args=(1,))\n"
        "t.start(); t.join(); assert out == [1]"
    ),
    "subprocess": "import subprocess; subprocess.run(['/bin/true'], check=True)",
    "multiprocessing": (
        "import multiprocessing as mp\n"
        "with mp.get_context('fork').Pool(2) as pool: assert pool.map(abs, [-1, -2]) == [1, 2]"
    ),
    "sockets": (
        "import socket; socket.socket().close(); a, b = socket.socketpair()\n"
        "a.sendall(b'x'); assert b.recv(1) == b'x'"
    ),
    "time": "import time; t = time.time(); time.sleep(0.01); assert time.time() > t > 0",
}


@needs_kernel
@pytest.mark.parametrize("name", sorted(ORDINARY_WORK))
def test_ordinary_python_work_still_runs(name, tmp_path):
    argv = [sys.executable, "-I", "-S", "-c", ORDINARY_WORK[name], str(tmp_path)]
    status = _status_in_child(lambda: os.execv(argv[0], argv))
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"wait status {status:#x}"
