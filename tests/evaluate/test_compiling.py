"""Compiling inside a shared GPU phase gives the lock up: another process's timing can run meanwhile."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from torch.utils import cpp_extension

from kfoundry.evaluate.compiling import compile_off_gpu
from kfoundry.evaluate.gpu_lock import GpuLock, read_timeline


def _free(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_triton_compiles_and_extension_builds_run_off_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from triton.runtime.jit import JITFunction

    lock_file, timeline = tmp_path / "gpu.lock", tmp_path / "timeline.jsonl"
    lock = GpuLock(lock_file, timeline=timeline, label="candidate")
    seen = []

    def fake_compile(*args, **kwargs):  # stands for the compiler: records whether the GPU is free meanwhile
        seen.append(("compile", lock.held, _free(lock_file)))
        return "kernel"

    def fake_build(*args, **kwargs):
        seen.append(("build", lock.held, _free(lock_file)))
        return "module"

    monkeypatch.setattr(JITFunction, "_do_compile", fake_compile)
    monkeypatch.setattr(cpp_extension, "load_inline", fake_build)
    restore = compile_off_gpu(lock)
    try:
        with lock.shared("compile"):
            assert JITFunction._do_compile(None, "key") == "kernel"
            assert cpp_extension.load_inline(name="x", cpp_sources="") == "module"
            assert lock.held == "shared" and not _free(lock_file)
    finally:
        restore()
    assert JITFunction._do_compile is fake_compile and cpp_extension.load_inline is fake_build
    assert seen == [("compile", None, True), ("build", None, True)]
    assert [s.phase for s in read_timeline(timeline)] == ["compile"] * 3
    lock.close()
