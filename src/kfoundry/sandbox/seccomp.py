"""A seccomp-BPF filter through ctypes: no sockets but AF_UNIX (optionally AF_INET/AF_INET6), no
ptrace or process_vm_*, no leaving the session (setsid: what a worker starts stays in its session, which
the parent kills; setpgid stays allowed, ninja puts its compilers in a group of their own), no io_uring
(its operations would bypass the socket check). Denied calls fail with EPERM; everything else is allowed."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from dataclasses import dataclass

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

# classic BPF opcodes
_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x05 | 0x30 | 0x00  # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06 | 0x00  # BPF_RET | BPF_K

# struct seccomp_data (little-endian): int nr; u32 arch; u64 instruction_pointer; u64 args[6]
_NR, _ARCH, _ARG0_LOW = 0, 4, 16

AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
_X32_SYSCALL_BIT = 0x40000000


@dataclass(frozen=True)
class _Arch:
    audit_arch: int
    seccomp: int  # the seccomp syscall
    socket: int
    socketpair: int
    denied: dict[str, int]
    x32_possible: bool


_DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "setsid",
           "io_uring_setup", "io_uring_enter", "io_uring_register")
_ARCHES = {
    "x86_64": _Arch(0xC000003E, 317, 41, 53, dict(zip(_DENIED, (101, 310, 311, 112, 425, 426, 427))), True),
    "aarch64": _Arch(0xC00000B7, 277, 198, 199, dict(zip(_DENIED, (117, 270, 271, 157, 425, 426, 427))), False),
}
_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


class SeccompUnavailable(RuntimeError):
    """The filter could not be installed; the message says why."""


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


# The assembler: a program is a list of instructions (code, k, jt, jf) and label names (str); a jump
# target is 0 (the next instruction) or a label, resolved to the relative offset BPF wants.

def _ld(offset: int) -> tuple:
    return (_LD_W_ABS, offset, 0, 0)


def _jeq(value: int, jt: str | int = 0, jf: str | int = 0) -> tuple:
    return (_JEQ_K, value, jt, jf)


def _jge(value: int, jt: str | int = 0, jf: str | int = 0) -> tuple:
    return (_JGE_K, value, jt, jf)


def _ret(value: int) -> tuple:
    return (_RET_K, value, 0, 0)


def _assemble(program: list) -> list[tuple[int, int, int, int]]:
    labels, pc = {}, 0
    for item in program:
        if isinstance(item, str):
            labels[item] = pc
        else:
            pc += 1

    def offset(target: str | int, pc: int) -> int:
        if isinstance(target, int):
            return target
        delta = labels[target] - (pc + 1)
        if not 0 <= delta <= 255:
            raise ValueError(f"jump to {target} out of range: {delta}")
        return delta

    out: list[tuple[int, int, int, int]] = []
    for item in program:
        if not isinstance(item, str):
            code, k, jt, jf = item
            out.append((code, offset(jt, len(out)), offset(jf, len(out)), k))
    return out


def _program(arch: _Arch, allow_inet: bool) -> list[tuple[int, int, int, int]]:
    domains = [AF_UNIX, AF_INET, AF_INET6] if allow_inet else [AF_UNIX]
    program = [
        _ld(_ARCH),
        _jeq(arch.audit_arch, jf="deny"),  # another ABI numbers its syscalls differently
        _ld(_NR),
    ]
    if arch.x32_possible:
        program.append(_jge(_X32_SYSCALL_BIT, jt="deny"))
    program += [
        _jeq(arch.socket, jt="socket"),
        _jeq(arch.socketpair, jt="socketpair"),
        *[_jeq(number, jt="deny") for number in arch.denied.values()],
        _ret(_RET_ALLOW),
        "socket",
        _ld(_ARG0_LOW),
        *[_jeq(domain, jt="allow") for domain in domains],
        _ret(_RET_ERRNO | errno.EPERM),
        "socketpair",
        _ld(_ARG0_LOW),
        _jeq(AF_UNIX, jt="allow"),
        "deny",
        _ret(_RET_ERRNO | errno.EPERM),
        "allow",
        _ret(_RET_ALLOW),
    ]
    return _assemble(program)


def _arch() -> _Arch:
    machine = platform.machine().lower()
    if machine not in _MACHINES:
        raise SeccompUnavailable(f"no filter for this machine ({platform.machine()})")
    return _ARCHES[_MACHINES[machine]]


def install(allow_inet: bool = False) -> str:
    """Install the filter on this process (every thread, where the kernel can synchronise them) and
    on all it starts later. Irreversible. Returns a description; raises SeccompUnavailable."""
    arch = _arch()
    instructions = _program(arch, allow_inet)
    filters = (_SockFilter * len(instructions))(*[_SockFilter(*insn) for insn in instructions])
    prog = _SockFprog(len(instructions), filters)

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ulong = ctypes.c_ulong
    if libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ulong(1), ulong(0), ulong(0), ulong(0)) != 0:
        raise SeccompUnavailable(f"prctl(PR_SET_NO_NEW_PRIVS): {_why(ctypes.get_errno())}")
    result = libc.syscall(ctypes.c_long(arch.seccomp), ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
                          ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog))
    err = ctypes.get_errno()
    if result > 0:  # TSYNC: the id of a thread that could not take the filter; nothing installed
        raise SeccompUnavailable(f"thread {result} cannot take the filter (it has another seccomp filter)")
    if result < 0 and err == errno.ENOSYS:  # no seccomp(2): the calling thread only
        result = libc.prctl(ctypes.c_int(_PR_SET_SECCOMP), ulong(_SECCOMP_MODE_FILTER), ctypes.byref(prog),
                            ulong(0), ulong(0))
        err = ctypes.get_errno()
    if result != 0:
        raise SeccompUnavailable(f"installing the filter: {_why(err)}")
    sockets = "AF_UNIX, AF_INET, AF_INET6" if allow_inet else "AF_UNIX"
    return f"seccomp: sockets {sockets} only; ptrace, process_vm_*, setsid, io_uring denied"


def _why(err: int) -> str:
    if err == errno.EINVAL:
        return "EINVAL: the kernel lacks seccomp filters (CONFIG_SECCOMP_FILTER) or rejected the program"
    if err == errno.ENOSYS:
        return "ENOSYS: the kernel lacks seccomp"
    return f"{errno.errorcode.get(err, err)}: {os.strerror(err)}"
