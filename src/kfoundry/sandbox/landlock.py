"""Landlock (Linux 5.13+) through ctypes: limit what the calling thread, and everything it starts
later, may do on the filesystem, with TCP ports (ABI 4+), with signals and abstract unix sockets
(ABI 6+). Unprivileged and irreversible; apply it before any thread starts (it binds the calling
thread only)."""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
from dataclasses import dataclass, field

# syscall numbers: the same in the generic and the x86_64 tables
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS = 38

# linux/landlock.h, filesystem rights
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

_FS_ABI1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
# the only rights a rule on a non-directory may carry (others: EINVAL)
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

_READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
# Everything but creating device nodes (root could otherwise mknod a disk in its own folder and read
# it) and device ioctls (no device lives there).
_WRITE = (_FS_ABI1 | FS_REFER | FS_TRUNCATE) & ~(FS_MAKE_CHAR | FS_MAKE_BLOCK)
_DEVICE = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV | FS_READ_DIR


class LandlockUnavailable(RuntimeError):
    """The kernel does not enforce Landlock here, or the ruleset could not be put in place; the
    message says why."""


@dataclass
class Rules:
    read: list[str]  # read-only + execute: files and directories
    write: list[str]  # read-write directories: everything under them
    devices: list[str]  # character devices, opened read-write with ioctl
    # ABI>=4: None denies every TCP bind and connect; a list allows connecting to those ports only
    # (bind stays denied). Below ABI 4 Landlock does not handle TCP.
    tcp_connect_ports: list[int] | None = None
    handle_tcp: bool = True  # False: TCP left alone (Nsight Compute reports over a port not known ahead)
    scope: bool = True  # ABI>=6: no signals to, and no abstract unix sockets of, processes outside
    # folders whose names may be listed (and those of every folder beneath), no file in them read: a
    # folder of sys.path that holds something private, whose other entries are granted one by one
    listing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the policy could not grant, for the record


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(number: int, *args) -> tuple[int, int]:
    """(result, errno): the result is -1 on failure."""
    ctypes.set_errno(0)
    result = _libc.syscall(ctypes.c_long(number), *args)
    return result, ctypes.get_errno()


def _why(err: int) -> str:
    if err == errno.ENOSYS:
        return "ENOSYS: this kernel has no Landlock (too old, not built in, or a sandbox such as gVisor)"
    if err == errno.EOPNOTSUPP:
        return "EOPNOTSUPP: Landlock is built in but disabled at boot (not in the lsm= list)"
    return f"{errno.errorcode.get(err, err)}: {os.strerror(err)}"


def abi_version() -> int:
    """The Landlock ABI the running kernel enforces; 0 when it enforces none."""
    try:
        return _abi_or_raise()
    except LandlockUnavailable:
        return 0


def _abi_or_raise() -> int:
    if not sys.platform.startswith("linux"):
        raise LandlockUnavailable(f"Landlock is Linux-only (this is {sys.platform})")
    result, err = _syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    if result < 1:
        raise LandlockUnavailable(_why(err))
    return int(result)


def _handled_fs(abi: int) -> int:
    handled = _FS_ABI1
    if abi >= 2:
        handled |= FS_REFER
    if abi >= 3:
        handled |= FS_TRUNCATE
    if abi >= 5:
        handled |= FS_IOCTL_DEV
    return handled


def _ruleset_size(abi: int) -> int:
    # sizeof(struct landlock_ruleset_attr) as that ABI defines it: fs, + net (ABI 4), + scoped (ABI 6)
    return 8 if abi < 4 else 16 if abi < 6 else 24


def _add_path(ruleset_fd: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)  # follows symlinks: the rule is on the target
    except (FileNotFoundError, NotADirectoryError):
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= _FILE_RIGHTS
        if not access:
            return
        attr = _PathBeneathAttr(allowed_access=access, parent_fd=fd)
        result, err = _syscall(_ADD_RULE, ctypes.c_int(ruleset_fd), ctypes.c_int(_RULE_PATH_BENEATH),
                               ctypes.byref(attr), ctypes.c_uint32(0))
        if result < 0:
            raise LandlockUnavailable(f"landlock_add_rule({path!r}): {_why(err)}")
    finally:
        os.close(fd)


def _add_port(ruleset_fd: int, port: int) -> None:
    if not 0 <= port <= 65535:
        raise ValueError(f"not a TCP port: {port}")
    attr = _NetPortAttr(allowed_access=NET_CONNECT_TCP, port=port)
    result, err = _syscall(_ADD_RULE, ctypes.c_int(ruleset_fd), ctypes.c_int(_RULE_NET_PORT),
                           ctypes.byref(attr), ctypes.c_uint32(0))
    if result < 0:
        raise LandlockUnavailable(f"landlock_add_rule(tcp port {port}): {_why(err)}")


def restrict(rules: Rules) -> str:
    """Restrict this thread and what it starts from now on to `rules`, with every right the running
    ABI knows handled (denied unless a rule grants it). Paths that do not exist are skipped. Returns
    a description; raises LandlockUnavailable (nothing restricted, though no_new_privs may be set)
    when the kernel lacks Landlock or refuses the ruleset."""
    abi = _abi_or_raise()
    handled_fs = _handled_fs(abi)
    attr = _RulesetAttr(handled_access_fs=handled_fs)
    net = abi >= 4 and rules.handle_tcp
    if net:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
    if abi >= 6 and rules.scope:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL

    if _libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0),
                   ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        raise LandlockUnavailable(f"prctl(PR_SET_NO_NEW_PRIVS): {_why(ctypes.get_errno())}")
    ruleset_fd, err = _syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(_ruleset_size(abi)),
                               ctypes.c_uint32(0))
    if ruleset_fd < 0:
        raise LandlockUnavailable(f"landlock_create_ruleset: {_why(err)}")
    try:
        for paths, access in ((rules.read, _READ), (rules.write, _WRITE), (rules.devices, _DEVICE),
                              (rules.listing, FS_READ_DIR)):
            for path in paths:
                _add_path(ruleset_fd, os.fspath(path), access & handled_fs)
        if net:
            for port in rules.tcp_connect_ports or ():
                _add_port(ruleset_fd, int(port))
        result, err = _syscall(_RESTRICT_SELF, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0))
        if result < 0:
            raise LandlockUnavailable(f"landlock_restrict_self: {_why(err)}")
    finally:
        os.close(ruleset_fd)
    return f"landlock ABI {abi} ({_describe_net(abi, rules)}{_describe_scope(abi if rules.scope else 0)})"


def _describe_net(abi: int, rules: Rules) -> str:
    ports = rules.tcp_connect_ports
    if abi < 4:
        return "tcp: not restricted, needs ABI 4"
    if not rules.handle_tcp:
        return "tcp: not restricted (Nsight Compute)"
    if not ports:
        return "tcp: no connect or bind"
    return f"tcp: connect to port {', '.join(str(p) for p in sorted(set(ports)))} only, no bind"


def _describe_scope(abi: int) -> str:
    if abi == 0:
        return "; signals and abstract unix sockets not scoped"
    if abi < 6:
        return "; signals and abstract unix sockets not scoped, needs ABI 6"
    return "; no signals or abstract unix sockets outside the sandbox"
