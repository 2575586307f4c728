"""A seccomp-BPF filter for the code sandbox: the system calls a test program has no business
making kill it.

The trusted parent builds the program with :func:`build_filter` (pure: no system call is
made) and hands it to the sandbox worker, which installs it (:func:`install`, with
``PR_SET_NO_NEW_PRIVS`` already set) right before it execs the sandboxed interpreter. The
filter is inherited by every thread, child and ``exec`` of the program and cannot be removed.

Denied (the process dies of ``SIGSYS``: ``SECCOMP_RET_KILL_PROCESS``, so an attempt is visible
in the run's result instead of being a silent ``EPERM``), see :data:`DENIED_SYSCALLS`:
    - leaving the sandbox's view: new or other namespaces (``unshare``, ``setns``, and ``clone``
      with a ``CLONE_NEW*`` flag), mounts of any kind (old and new mount API), ``chroot``;
    - other processes: tracing and reading or writing their memory or file descriptors;
    - kernel attack surface that a test program never needs and that has a history of
      privilege-escalation bugs: eBPF, perf events, ``userfaultfd``, io_uring, the key
      rings, and ``AF_VSOCK`` sockets (VM-to-host sockets, which network namespaces have not
      confined; Docker's default profile refuses them too);
    - administration of the whole machine (modules, kexec, reboot, swap, clocks, host and
      domain names, the kernel log, quotas, process accounting, raw I/O ports): they need
      capabilities the sandbox does not hold, so they are denied to make the attempt visible;
      ``open_by_handle_at`` (which bypasses path permissions) and ``name_to_handle_at``;
    - ``personality`` with a persona other than Docker's harmless ones (``ADDR_NO_RANDOMIZE``
      would turn off address-space randomisation for what the program execs);
    - system calls of another ABI: 32-bit calls (``int 0x80`` on x86_64, AArch32 on aarch64)
      and the x32 ABI, whose numbers the checks above would not match.

``clone3`` fails with ``ENOSYS``: its flags live in memory that a filter cannot read, and the C
library then falls back to ``clone``, whose flags are checked (what Docker and systemd do).

Allowed: everything else. Files inside the sandbox's view (read-only outside the workdir where
the mount namespace is in force), ``fork``/``vfork``/threads/``exec``, signals, pipes,
sockets (in the empty network namespace there is no interface to reach), time, memory.

Limits: a denylist, so system calls added to the kernel later are allowed until listed here;
no filtering on what pointers point to (paths, socket addresses, ``ioctl`` requests), only on
integer arguments; x86_64 and aarch64 only (:func:`build_filter` returns None elsewhere, and
the sandbox then runs without this layer).
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import struct
from dataclasses import dataclass

# struct seccomp_data (linux/seccomp.h): int nr; u32 arch; u64 instruction_pointer; u64 args[6].
# Arguments are read as their low 32 bits, at offset 16 + 8 * i on little-endian machines.
_NR_OFFSET, _ARCH_OFFSET, _ARG0_LOW_OFFSET = 0, 4, 16
# Classic BPF opcodes (linux/bpf_common.h).
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ, _JGE, _JSET = 0x15, 0x35, 0x45  # BPF_JMP | BPF_{JEQ,JGE,JSET} | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_MAX_JUMP = 0xFF
# Filter results (linux/seccomp.h).
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
ENOSYS = 38  # the same on x86_64 and aarch64 (asm-generic/errno.h)
# prctl(2).
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
BPF_MAXINSNS = 4096

# Namespace flags of clone(2) (linux/sched.h): NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER,
# NEWPID, NEWNET; the same mask as Docker's profile. CLONE_NEWTIME (0x80) is not in it: in
# clone(2) that bit belongs to the exit-signal field, only unshare(2) and clone3(2) read it.
CLONE_NAMESPACE_FLAGS = 0x7E020000
AF_VSOCK = 40
# personality(2) personas Docker allows: PER_LINUX, PER_LINUX32, UNAME26, UNAME26|PER_LINUX32,
# and 0xffffffff (query the current persona).
ALLOWED_PERSONAS = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)

DENIED_SYSCALLS: tuple[str, ...] = (
    # Namespaces, mounts and root changes (container escape); clone is checked by its flags.
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree",
    "open_tree_attr", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    # Other processes: tracing, reading or writing their memory, advising it, taking their fds.
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp",
    "pidfd_getfd",
    # Kernel attack surface with a history of privilege-escalation bugs.
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "keyctl", "add_key", "request_key",
    # Administration of the whole machine (all need capabilities the sandbox lacks).
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
    "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "sethostname", "setdomainname", "syslog", "quotactl", "quotactl_fd", "lookup_dcookie",
    "vhangup", "iopl", "ioperm",
    # File handles: open_by_handle_at opens any inode without path permission checks.
    "open_by_handle_at", "name_to_handle_at",
)  # fmt: skip
"""Names killed whatever their arguments; a name an architecture lacks is skipped there."""

_X86_64_SYSCALLS = {
    # arch/x86/entry/syscalls/syscall_64.tbl (asm/unistd_64.h)
    "clone": 56, "socket": 41, "personality": 135, "clone3": 435,
    "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
    "chroot": 161, "open_tree": 428, "open_tree_attr": 467, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "process_madvise": 440,
    "kcmp": 312, "pidfd_getfd": 438,
    "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 250, "add_key": 248,
    "request_key": 249,
    "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163,
    "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
    "sethostname": 170, "setdomainname": 171, "syslog": 103, "quotactl": 179,
    "quotactl_fd": 443, "lookup_dcookie": 212, "vhangup": 153, "iopl": 172, "ioperm": 173,
    "open_by_handle_at": 304, "name_to_handle_at": 303,
}  # fmt: skip

_AARCH64_SYSCALLS = {
    # the generic table: include/uapi/asm-generic/unistd.h (scripts/syscall.tbl since 6.11)
    "clone": 220, "socket": 198, "personality": 92, "clone3": 435,
    "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41,
    "chroot": 51, "open_tree": 428, "open_tree_attr": 467, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
    "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "process_madvise": 440,
    "kcmp": 272, "pidfd_getfd": 438,
    "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 219, "add_key": 217,
    "request_key": 218,
    "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
    "delete_module": 106, "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89,
    "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171,
    "sethostname": 161, "setdomainname": 162, "syslog": 116, "quotactl": 60,
    "quotactl_fd": 443, "lookup_dcookie": 18, "vhangup": 58,
    "open_by_handle_at": 265, "name_to_handle_at": 264,
}  # fmt: skip


@dataclass(frozen=True)
class SeccompArch:
    """One architecture the filter supports.

    Attributes:
        audit_arch: the ``AUDIT_ARCH_*`` value the kernel reports in ``seccomp_data.arch`` for
            this ABI (linux/audit.h: ELF machine | 64-bit | little-endian).
        syscalls: system call numbers of the names the filter uses.
        foreign_nr_from: numbers at or above it belong to another ABI sharing ``audit_arch``
            (x32 on x86_64: ``__X32_SYSCALL_BIT``) and are killed; None when there is none.
    """

    audit_arch: int
    syscalls: dict[str, int]
    foreign_nr_from: int | None = None


SECCOMP_ARCHES: dict[str, SeccompArch] = {
    "x86_64": SeccompArch(0xC000003E, _X86_64_SYSCALLS, foreign_nr_from=0x40000000),
    "aarch64": SeccompArch(0xC00000B7, _AARCH64_SYSCALLS),
}
"""Supported architectures by ``platform.machine()`` name."""

# An instruction before assembly: (code, jump-if-true, jump-if-false, k); a jump target is a
# label name (str) or 0 for the next instruction. A bare str in the program is a label.
_Insn = tuple[int, str | int, str | int, int]


def _check(nr: int, target: str) -> _Insn:
    return (_JEQ, target, 0, nr)


def _source(arch: SeccompArch) -> list[_Insn | str]:
    """The filter with symbolic jumps: architecture, then a linear scan of the numbers."""
    nrs = arch.syscalls
    program: list[_Insn | str] = [
        (_LD_W_ABS, 0, 0, _ARCH_OFFSET),
        (_JEQ, 0, "kill", arch.audit_arch),
        (_LD_W_ABS, 0, 0, _NR_OFFSET),
    ]
    if arch.foreign_nr_from is not None:
        program.append((_JGE, "kill", 0, arch.foreign_nr_from))
    program += [
        _check(nrs["clone3"], "enosys"),
        _check(nrs["clone"], "clone"),
        _check(nrs["socket"], "socket"),
        _check(nrs["personality"], "personality"),
        *(_check(nrs[name], "kill") for name in DENIED_SYSCALLS if name in nrs),
        (_RET, 0, 0, SECCOMP_RET_ALLOW),
        "clone",
        (_LD_W_ABS, 0, 0, _ARG0_LOW_OFFSET),
        (_JSET, "kill", "allow", CLONE_NAMESPACE_FLAGS),
        "socket",
        (_LD_W_ABS, 0, 0, _ARG0_LOW_OFFSET),
        (_JEQ, "kill", "allow", AF_VSOCK),
        "personality",
        (_LD_W_ABS, 0, 0, _ARG0_LOW_OFFSET),
        *(_check(persona, "allow") for persona in ALLOWED_PERSONAS),
        "kill",  # also where no allowed persona matched
        (_RET, 0, 0, SECCOMP_RET_KILL_PROCESS),
        "enosys",
        (_RET, 0, 0, SECCOMP_RET_ERRNO | ENOSYS),
        "allow",
        (_RET, 0, 0, SECCOMP_RET_ALLOW),
    ]
    return program


def _assemble(source: list[_Insn | str]) -> bytes:
    """Resolve labels to forward offsets (each must fit the u8 of ``jt``/``jf``) and pack
    ``struct sock_filter`` entries (u16 code, u8 jt, u8 jf, u32 k; little-endian, as both
    supported architectures are)."""
    labels: dict[str, int] = {}
    insns: list[_Insn] = []
    for item in source:
        if isinstance(item, str):
            labels[item] = len(insns)
        else:
            insns.append(item)

    def offset(at: int, target: str | int) -> int:
        if isinstance(target, int):
            return target
        jump = labels[target] - at - 1
        if not 0 <= jump <= _MAX_JUMP:
            raise AssertionError(f"seccomp filter: jump to {target!r} of {jump} does not fit u8")
        return jump

    return b"".join(
        struct.pack("<HBBI", code, offset(i, jt), offset(i, jf), k)
        for i, (code, jt, jf, k) in enumerate(insns)
    )


@functools.cache
def build_filter(machine: str | None = None) -> bytes | None:
    """The packed ``struct sock_filter[]`` program for ``machine`` (``platform.machine()``
    when None), 8 bytes per instruction; None on an architecture without a syscall table
    here (then the sandbox runs without this layer). Built once per machine name."""
    arch = SECCOMP_ARCHES.get(platform.machine() if machine is None else machine)
    return None if arch is None else _assemble(_source(arch))


def install(program: bytes) -> None:
    """Install ``program`` (from :func:`build_filter`) on the calling thread, for good.

    The caller must have set ``PR_SET_NO_NEW_PRIVS`` (or hold ``CAP_SYS_ADMIN``). Depends on
    ctypes, os and struct only, so the sandbox launcher (which cannot import rlvr) mirrors it.

    Raises:
        ValueError: ``program`` is not a whole number of 8-byte instructions (1 to 4096).
        OSError: the kernel refused the filter (no seccomp support, no NO_NEW_PRIVS, ...).
    """
    count, rest = divmod(len(program), 8)
    if rest or not 0 < count <= BPF_MAXINSNS:
        raise ValueError(
            f"a seccomp program is 1 to 4096 8-byte instructions, got {len(program)} bytes"
        )
    libc = ctypes.CDLL(None, use_errno=True)
    instructions = ctypes.create_string_buffer(program, len(program))
    # struct sock_fprog {unsigned short len; struct sock_filter *filter;}, native alignment.
    fprog = ctypes.create_string_buffer(struct.pack("@HP", count, ctypes.addressof(instructions)))
    mode = ctypes.c_ulong(SECCOMP_MODE_FILTER)
    if libc.prctl(PR_SET_SECCOMP, mode, fprog, ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_SECCOMP) refused the filter: {os.strerror(err)}")
