"""The seccomp filter on the real kernel: a child installs it (or, the control, does not), tries
things and prints what happened."""

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from kfoundry.sandbox import seccomp

SRC = Path(__file__).resolve().parents[2] / "src"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seccomp is Linux-only")

PROBE = r"""
import ctypes, errno, json, os, platform, socket, subprocess, sys, threading
from kfoundry.sandbox import seccomp

mode = sys.argv[1]  # "filter", "filter-inet" or "control"
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
PTRACE_ATTACH, PTRACE_DETACH = 16, 17

def attempt(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))

def checked(result):
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result

def make_socket(family, kind=socket.SOCK_STREAM):
    socket.socket(family, kind).close()

def make_socketpair(family=socket.AF_UNIX):
    for s in socket.socketpair(family):
        s.close()

def in_fork(fn, *args):
    # a throwaway child, so that the probe's own process group and session stay as they are
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, attempt(fn, *args).encode())
        os._exit(0)
    os.close(w)
    result = os.read(r, 64).decode()
    os.waitpid(pid, 0)
    return result

def run_python(code, **kwargs):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, **kwargs)

def ptrace_attach(pid):
    checked(libc.ptrace(ctypes.c_long(PTRACE_ATTACH), ctypes.c_long(pid), None, None))
    os.waitpid(pid, 0)  # attached: it stops
    libc.ptrace(ctypes.c_long(PTRACE_DETACH), ctypes.c_long(pid), None, None)

class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

def vm_read_self():
    source, target = ctypes.create_string_buffer(b"abc", 8), ctypes.create_string_buffer(8)
    local, remote = iovec(ctypes.addressof(target), 3), iovec(ctypes.addressof(source), 3)
    checked(libc.process_vm_readv(os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))

def io_uring_setup():
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    os.close(checked(libc.syscall(ctypes.c_long(425), ctypes.c_uint(1), params)))

def x32_getpid():
    checked(libc.syscall(ctypes.c_long(0x40000000 + 39)))

out = {}
thread_result = {}
go = threading.Event()
def in_thread():  # started before the filter: TSYNC must cover it
    go.wait()
    thread_result["inet"] = attempt(make_socket, socket.AF_INET)
thread = threading.Thread(target=in_thread)
thread.start()
if mode != "control":
    out["description"] = seccomp.install(allow_inet=mode == "filter-inet")
go.set()
thread.join()
out["thread_inet"] = thread_result["inet"]
out["inet"] = attempt(make_socket, socket.AF_INET)
out["inet6"] = attempt(make_socket, socket.AF_INET6)
out["inet_udp"] = attempt(make_socket, socket.AF_INET, socket.SOCK_DGRAM)
out["netlink"] = attempt(make_socket, socket.AF_NETLINK, socket.SOCK_RAW)
out["unix"] = attempt(make_socket, socket.AF_UNIX)
out["socketpair"] = attempt(make_socketpair)
out["socketpair_inet"] = attempt(make_socketpair, socket.AF_INET)
out["setsid"] = in_fork(os.setsid)
out["setpgid"] = in_fork(os.setpgid, 0, 0)
out["same_group"] = int(run_python("import os; print(os.getpgrp())").stdout) == os.getpgrp()
out["same_session"] = int(run_python("import os; print(os.getsid(0))").stdout) == os.getsid(0)
out["new_session"] = attempt(run_python, "pass", start_new_session=True)
out["new_group"] = attempt(run_python, "pass", process_group=0)
sleeper = subprocess.Popen(["/bin/sleep", "30"])
out["ptrace_child"] = attempt(ptrace_attach, sleeper.pid)
sleeper.kill()
sleeper.wait()
if mode != "control" and out["ptrace_child"] == "EPERM":  # never stop the test runner for real
    out["ptrace_parent"] = attempt(ptrace_attach, os.getppid())
out["process_vm_readv"] = attempt(vm_read_self)
out["io_uring_setup"] = attempt(io_uring_setup)
if platform.machine() == "x86_64":
    out["x32"] = attempt(x32_getpid)
print(json.dumps(out))
"""


def probe(mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def filtered():
    return probe("filter")


@pytest.fixture(scope="module")
def filtered_inet():
    return probe("filter-inet")


@pytest.fixture(scope="module")
def control():
    return probe("control")


def test_description(filtered, filtered_inet):
    assert filtered["description"] == (
        "seccomp: sockets AF_UNIX only; ptrace, process_vm_*, setsid, io_uring denied")
    assert "AF_INET, AF_INET6" in filtered_inet["description"]


def test_only_unix_sockets(filtered, control):
    for key in ("inet", "inet6", "inet_udp", "netlink"):
        assert control[key] == "ok", key
        assert filtered[key] == "EPERM", key
    assert filtered["unix"] == filtered["socketpair"] == "ok"
    assert control["socketpair_inet"] != "EPERM"  # EOPNOTSUPP: no such thing
    assert filtered["socketpair_inet"] == "EPERM"


def test_threads_started_before_are_filtered_too(filtered, control):
    assert control["thread_inet"] == "ok"
    assert filtered["thread_inet"] == "EPERM"


def test_allow_inet(filtered_inet):
    for key in ("inet", "inet6", "inet_udp", "unix", "socketpair", "thread_inet"):
        assert filtered_inet[key] == "ok", key
    assert filtered_inet["netlink"] == "EPERM"
    assert filtered_inet["socketpair_inet"] == "EPERM"
    assert filtered_inet["setsid"] == "EPERM"


def test_children_stay_in_the_session(filtered, control):
    for key in ("setsid", "new_session"):
        assert control[key] == "ok", key
        assert filtered[key] == "EPERM", key
    assert filtered["setpgid"] == filtered["new_group"] == "ok"  # ninja runs its compilers in a group of their own
    assert filtered["same_group"] is True and filtered["same_session"] is True


def test_no_ptrace_or_process_vm(filtered, control):
    assert control["ptrace_child"] == control["process_vm_readv"] == "ok"
    assert filtered["ptrace_child"] == filtered["ptrace_parent"] == "EPERM"
    assert filtered["process_vm_readv"] == "EPERM"


def test_no_io_uring(filtered, control):
    assert control["io_uring_setup"] != "EPERM"  # "ok", or ENOSYS where the kernel lacks it
    assert filtered["io_uring_setup"] == "EPERM"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x32 is an x86_64 ABI")
def test_no_x32_syscalls(filtered):
    assert filtered["x32"] == "EPERM"


def test_program_jumps_are_resolved():
    program = seccomp._program(seccomp._ARCHES["x86_64"], allow_inet=False)
    assert program[0] == (0x20, 0, 0, 4)  # ld arch
    assert program[-2] == (0x06, 0, 0, 0x00050001)  # deny: ret ERRNO|EPERM
    assert program[-1] == (0x06, 0, 0, 0x7FFF0000)  # allow
    assert program[1] == (0x15, 0, len(program) - 2 - 2, 0xC000003E)  # a foreign arch jumps to deny


def test_unknown_machine(monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    with pytest.raises(seccomp.SeccompUnavailable, match="riscv64"):
        seccomp.install()
