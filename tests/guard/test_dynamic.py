"""kfoundry.guard.dynamic in this process (Triton's interpreter): launch tracking, ghost mode,
the op recorder, global state, kernel-name rules. End-to-end checks are in test_corpus.py."""

import os
import time

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":  # conftest sets it on machines without a GPU
    pytest.skip("these checks run Triton's interpreter on CPU tensors", allow_module_level=True)
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kfoundry.guard.dynamic import (LaunchTracker, OpRecorder, cuda_kernel_names, global_state,  # noqa: E402
                                    library_kernels, state_changes)


@triton.jit
def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


@pytest.fixture
def tracker():
    t = LaunchTracker().install()
    yield t
    t.uninstall()


def _launch(x, y):
    _double[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)


def test_launches_are_counted_and_their_internal_ops_not_recorded(tracker):
    x, y = torch.randn(100), torch.empty(100)
    recorder = OpRecorder(tracker)
    with recorder:
        z = torch.empty_like(x)
        _launch(x, y)
        _launch(x, z)
    assert tracker.launches == 2 and tracker.kernel_names == {"_double"}
    assert torch.equal(y, x * 2)
    assert recorder.compute_ops() == []  # the interpreter's own copies inside launches are not ours
    assert "empty_like" in recorder.ops or "empty" in recorder.ops


def test_compute_outside_kernels_is_recorded(tracker):
    x = torch.randn(10)
    recorder = OpRecorder(tracker)
    with recorder:
        (x * 3).sum()
        x.view(2, 5).contiguous()
    assert recorder.compute_ops() == ["mul", "sum"]


def test_ghost_mode_skips_triton_launches(tracker):
    x, y = torch.randn(100), torch.full((100,), float("nan"))
    tracker.ghost = True
    _launch(x, y)
    tracker.ghost = False
    assert torch.isnan(y).all() and tracker.launches == 1
    _launch(x, y)
    assert torch.equal(y, x * 2)


def test_uninstall_restores_triton():
    from triton.runtime import interpreter

    original = interpreter.InterpretedFunction.run
    tracker = LaunchTracker().install()
    assert interpreter.InterpretedFunction.run is not original
    tracker.uninstall()
    assert interpreter.InterpretedFunction.run is original


def test_global_state_sees_flags_and_replaced_timers():
    before = global_state()
    threads = torch.get_num_threads()
    original = time.perf_counter
    try:
        torch.set_num_threads(max(1, threads - 1) if threads > 1 else 2)
        time.perf_counter = lambda: 0.0
        changes = state_changes(before, global_state())
    finally:
        torch.set_num_threads(threads)
        time.perf_counter = original
    assert any(c.startswith("number of threads:") for c in changes)
    assert "time.perf_counter was replaced" in changes
    assert state_changes(before, global_state()) == []


def test_library_kernels_are_told_from_the_candidates_own():
    kernels = [{"name": "sm90_xmma_gemm_f32f32_tf32f32_nt", "stream": 7},
               {"name": "my_gemm_kernel", "stream": 7},
               {"name": "void at::native::vectorized_elementwise_kernel<4, FillFunctor>", "stream": 7},
               {"name": "cudnn::winograd_nonfused::fwd", "stream": 7}]
    assert library_kernels(kernels, {"my_gemm_kernel"}) == ["sm90_xmma_gemm_f32f32_tf32f32_nt",
                                                           "cudnn::winograd_nonfused::fwd"]


def test_cuda_kernel_names_are_read_from_source():
    source = "__global__ void add_kernel(float* x) {}\n__global__ __launch_bounds__(256) void scale(float* y) {}"
    assert cuda_kernel_names(source) == {"add_kernel", "scale"}
