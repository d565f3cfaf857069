"""Host memory readers, measured against real processes and files of known size."""

import os
import subprocess
import sys
import textwrap
import time

from kfoundry.evaluate.parent.host_memory import (
    MemorySampler,
    children_map,
    exited,
    folder_bytes,
    host_available,
    process_memory,
    process_tree,
)

MB = 1 << 20


def _child(code: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _end(child: subprocess.Popen) -> None:
    child.kill()
    child.wait(timeout=10)
    for pipe in (child.stdin, child.stdout):
        if pipe:
            pipe.close()


def test_process_memory_sees_an_allocation():
    child = _child(
        """
        import sys
        print("baseline", flush=True)
        sys.stdin.readline()
        block = bytearray(200 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        print("allocated", flush=True)
        sys.stdin.readline()
        """
    )
    try:
        assert child.stdout.readline().strip() == "baseline"
        before = process_memory(child.pid)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "allocated"
        grown = process_memory(child.pid) - before
        assert 0.85 * 200 * MB <= grown <= 1.15 * 200 * MB, grown / MB
    finally:
        _end(child)
    assert process_memory(child.pid) == 0  # gone (and reaped)


def test_process_tree_finds_a_grandchild():
    child = _child(
        """
        import subprocess, sys
        grandchild = subprocess.Popen(["sleep", "30"])
        print(grandchild.pid, flush=True)
        sys.stdin.readline()
        grandchild.kill()
        """
    )
    try:
        grandchild = int(child.stdout.readline())
        tree = process_tree(child.pid)
        assert tree[0] == child.pid and grandchild in tree
        assert os.getpid() not in tree
        assert process_tree(grandchild) == [grandchild]
        children = children_map()  # one pass over /proc serves every tree of a sample
        assert process_tree(child.pid, children) == tree and process_tree(grandchild, children) == [grandchild]
    finally:
        child.stdin.write("done\n")
        child.stdin.flush()
        child.wait(timeout=10)
        _end(child)


def test_folder_bytes_counts_a_file_and_nested_folders(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    with open(tmp_path / "a" / "b" / "big.bin", "wb") as file:
        file.write(b"\x01" * (50 * MB))
    (tmp_path / "link").symlink_to("/usr")  # not followed
    size = folder_bytes(tmp_path)
    assert 50 * MB <= size <= 52 * MB, size / MB
    assert folder_bytes(tmp_path / "missing") == 0


def test_host_available_gives_a_figure_and_its_source():
    available, source = host_available()
    assert available > 0
    assert source == "MemAvailable" or source.startswith("cgroup v")
    with open("/proc/meminfo") as meminfo:
        total = int(next(line for line in meminfo if line.startswith("MemTotal:")).split()[1]) * 1024
    assert available <= total


def test_sampler_peak_sees_an_allocation_that_is_freed(tmp_path):
    child = _child(
        """
        import sys, time
        sys.stdin.readline()
        block = b"\\x01" * (150 << 20)
        time.sleep(0.4)
        del block
        print("freed", flush=True)
        sys.stdin.readline()
        """
    )
    try:
        with MemorySampler(interval_s=0.02) as sampler:
            sampler.watch_pid(child.pid)
            sampler.watch_prefix(tmp_path, "kfoundry-")
            time.sleep(0.1)
            start = sampler.peak
            folder = tmp_path / "kfoundry-late-x"  # made after watching began: still counted
            folder.mkdir()
            (folder / "f.bin").write_bytes(b"\x01" * (20 * MB))
            (tmp_path / "unrelated.bin").write_bytes(b"\x01" * (20 * MB))
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "freed"
            after = sampler.sample()
        assert sampler.samples >= 10
        assert start < 40 * MB
        assert sampler.peak >= start + 0.9 * 170 * MB, sampler.peak / MB
        assert sampler.peak <= start + 1.15 * 170 * MB + 5 * MB, sampler.peak / MB
        assert after < start + 40 * MB  # freed: the peak remembers, the current figure does not
    finally:
        _end(child)


def test_a_process_has_exited_once_it_is_a_zombie_or_gone():
    assert not exited(os.getpid())
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while not exited(child.pid) and time.monotonic() < deadline:  # a zombie until reaped
        time.sleep(0.01)
    assert exited(child.pid)
    child.wait()
    assert exited(child.pid)  # reaped: no /proc entry at all
