"""Compiling inside a shared GPU phase gives the lock up: another process's timing can run meanwhile."""

from __future__ import annotations

import fcntl
import os
from collections import Counter
from pathlib import Path

import pytest
from torch.utils import cpp_extension

from kfoundry.evaluate.timing.compiling import compile_off_gpu
from kfoundry.evaluate.timing.gpu_lock import GpuLock, read_timeline


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
    seconds: Counter = Counter()
    restore = compile_off_gpu(lock, seconds)
    try:
        with lock.shared("compile"):
            assert JITFunction._do_compile(None, "key") == "kernel"
            assert cpp_extension.load_inline(name="x", cpp_sources="") == "module"
            assert lock.held == "shared" and not _free(lock_file)
    finally:
        restore()
    assert JITFunction._do_compile is fake_compile and cpp_extension.load_inline is fake_build
    assert seen == [("compile", None, True), ("build", None, True)]
    assert set(seconds) == {"triton compile", "extension build"} and all(v >= 0 for v in seconds.values())
    assert [s.phase for s in read_timeline(timeline)] == ["compile"] * 3
    lock.close()


def test_torch_compiles_off_the_lock_and_benchmarks_on_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The baseline process's torch.compile: inductor's compiler gives the GPU up, its benchmarks (GPU work,
    even when called from inside that compiler) take a shared hold; a Triton launcher's gcc build is off."""
    from torch._inductor import compile_fx
    from torch._inductor.runtime.benchmarking import benchmarker
    from triton.backends.nvidia import driver as nvidia_driver

    lock_file = tmp_path / "gpu.lock"
    lock = GpuLock(lock_file, timeline=tmp_path / "timeline.jsonl", label="baselines")
    seen = []

    def fake_benchmark(*args, **kwargs):
        seen.append(("benchmark", lock.held, _free(lock_file)))
        return 1.0

    def fake_compile_fx(*args, **kwargs):
        seen.append(("compile_fx", lock.held, _free(lock_file)))
        return benchmarker.benchmark_gpu(lambda: None)

    def fake_launcher_build(*args, **kwargs):
        seen.append(("launcher", lock.held, _free(lock_file)))

    monkeypatch.setattr(compile_fx, "compile_fx", fake_compile_fx)
    monkeypatch.setattr(benchmarker, "benchmark_gpu", fake_benchmark)
    monkeypatch.setattr(nvidia_driver, "compile_module_from_src", fake_launcher_build)
    restore = compile_off_gpu(lock, inductor=True)
    try:
        with lock.shared("compile compile"):
            assert compile_fx.compile_fx("graph", []) == 1.0
            nvidia_driver.compile_module_from_src(src="", name="__triton_launcher")
            assert lock.held == "shared"
    finally:
        restore()
    assert compile_fx.compile_fx is fake_compile_fx and nvidia_driver.compile_module_from_src is fake_launcher_build
    assert seen == [("compile_fx", None, True), ("benchmark", "shared", False), ("launcher", None, True)]
    lock.close()


def test_a_kernel_over_the_gpus_shared_memory_fails_before_code_generation(monkeypatch: pytest.MonkeyPatch):
    """Triton's own OutOfResources, raised once the kernel's shared memory is known (after the LLVM IR
    stage), before the slow stages run; a kernel that fits goes on to them."""
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.runtime.errors import OutOfResources

    from kfoundry.evaluate.timing import compiling
    from kfoundry.evaluate.timing.compiling import fail_fast_over_shared_memory

    generated = []
    monkeypatch.setattr(CUDABackend, "make_ptx", lambda self, src, metadata, *rest: generated.append(src) or "ptx")
    monkeypatch.setattr(compiling, "shared_memory_limit", lambda: 232448)  # an H100's or H200's per block
    restore = fail_fast_over_shared_memory()
    try:
        with pytest.raises(OutOfResources, match="shared memory, Required: 327680, Hardware limit: 232448"):
            CUDABackend.make_ptx(None, "huge", {"shared": 327680}, None, 90)
        assert CUDABackend.make_ptx(None, "fits", {"shared": 65536}, None, 90) == "ptx"
    finally:
        restore()
    assert generated == ["fits"]
