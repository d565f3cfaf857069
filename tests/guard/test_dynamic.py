"""kfoundry.guard.dynamic in this process (Triton's interpreter): launch tracking, ghost mode,
the op recorder and its poison, global state, kernel-name rules. End-to-end checks are in test_corpus.py
and test_ghost.py."""

import os
import time
import types

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":  # conftest sets it on machines without a GPU
    pytest.skip("these checks run Triton's interpreter on CPU tensors", allow_module_level=True)
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kfoundry.guard.dynamic import (ExtensionProxy, LaunchTracker, OpRecorder, cuda_kernel_names,  # noqa: E402
                                    global_state, held_storages, kept_outputs, library_kernels, state_changes)


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


# -- what forward allocates: poisoned, whatever the allocator hands back ----------------------------

ANSWER_ELEMENTS = 1 << 14  # 64 KiB: glibc hands a block this size back whole, as a GPU's caching allocator does


def _freed_answer(answer: torch.Tensor) -> int:
    """An earlier call's output: its block, freed with the right answer in it."""
    y = torch.empty_like(answer)
    y.copy_(answer)
    where = y.data_ptr()
    del y
    return where


def test_a_block_that_held_the_answer_comes_back_and_the_recorder_poisons_it(tracker):
    x = torch.randn(ANSWER_ELEMENTS)
    answer = x * 2
    tracker.ghost = True
    where = _freed_answer(answer)
    again = torch.empty(ANSWER_ELEMENTS)
    _launch(x, again)  # skipped
    if again.data_ptr() != where:
        pytest.skip("the allocator did not hand the freed block back here")
    # ghost mode alone: the earlier call's answer (but for glibc's free-list pointers in the first bytes;
    # a GPU's caching allocator leaves it whole), so a candidate whose kernels are off is still right
    assert torch.equal(again[16:], answer[16:])
    del again
    where = _freed_answer(answer)
    with OpRecorder(tracker):
        ghost = torch.empty(ANSWER_ELEMENTS)
        _launch(x, ghost)
    tracker.ghost = False
    # poisoned whether the freed block came back this time or another thread's allocation took it first (the
    # first half showed a block does come back): the address is the allocator's, the poison the recorder's
    assert torch.isnan(ghost).all(), f"block at {ghost.data_ptr():#x}, the answer's at {where:#x}"


def test_the_recorder_poisons_uninitialised_allocations_only(tracker):
    x = torch.randn(8, 4)
    with OpRecorder(tracker):
        fresh = [torch.empty(3), torch.empty_like(x), x.new_empty(5), torch.empty_strided((2, 2), (1, 2)),
                 x.new_empty_strided((2,), (1,)), torch.empty(4, dtype=torch.int32), torch.empty(2, dtype=torch.bool)]
        defined = [torch.zeros(3), torch.ones(2), torch.full((2,), 7.0), x.clone(), x.view(32)]
    assert all(torch.isnan(t).all() for t in fresh[:5])
    assert (fresh[5] == torch.iinfo(torch.int32).max // 2).all() and fresh[6].all()
    assert defined[0].eq(0).all() and defined[1].eq(1).all() and defined[2].eq(7).all()
    assert torch.equal(defined[3], x) and not torch.isnan(x).any()


def test_the_recorder_poisons_what_a_resize_adds_and_keeps_what_was_there(tracker):
    grown = torch.arange(4.0)
    with OpRecorder(tracker):
        grown.resize_(4 + ANSWER_ELEMENTS)
        out = torch.zeros(2)
        torch.empty(6, out=out)
    assert torch.equal(grown[:4], torch.arange(4.0)) and torch.isnan(grown[4:]).all()
    assert torch.isnan(out[2:]).all()


def test_the_recorder_never_poisons_inside_a_launch(tracker):
    x, y = torch.randn(100), torch.empty(100)
    with OpRecorder(tracker):
        _launch(x, y)  # the interpreter's own allocations run inside the launch
    assert torch.equal(y, x * 2)


def _extension(*functions):
    """A built extension's stand-in: a module of Python functions, as the tracker wraps one."""
    return lambda tracker: ExtensionProxy(types.SimpleNamespace(**{f.__name__: f for f in functions}), tracker)


def test_ghost_extensions_lose_their_results_and_the_buffers_forward_gave_them(tracker):
    def scale_into(x, weight, out):  # an out= style kernel: writes out, returns nothing
        out.copy_(x * weight)

    def scaled(x, weight):
        return x * weight

    ext = _extension(scale_into, scaled)(tracker)
    x, weight = torch.randn(16), torch.randn(16)
    tracker.protected = {id(x)}
    tracker.ghost = True
    with OpRecorder(tracker):
        out = torch.zeros(16)
        ext.scale_into(x, weight, out)
        result = ext.scaled(x, weight)
    tracker.ghost = False
    assert torch.isnan(out).all() and torch.isnan(result).all()
    assert not torch.isnan(weight).any() and not torch.isnan(x).any()  # the model's weights and the inputs stay


def test_what_an_extension_allocates_is_poisoned_and_its_ops_are_not_recorded(tracker):
    def half_written(x):  # a kernel that leaves its output's tail unwritten (at::empty in C++ reaches the mode)
        out = torch.empty_like(x)
        out[:2] = x[:2]
        return out

    ext = _extension(half_written)(tracker)
    recorder = OpRecorder(tracker)
    x = torch.randn(6)
    with recorder:
        out = ext.half_written(x)
    assert torch.equal(out[:2], x[:2]) and torch.isnan(out[2:]).all()
    assert recorder.ops == {} and tracker.extension_depth == 0


def test_outputs_the_model_holds_are_told_from_fresh_ones():
    model = torch.nn.Linear(4, 3)
    model.out = torch.zeros(3)
    model.cache = {"kept": [torch.ones(2)]}
    held = held_storages(model)
    fresh = torch.zeros(3)
    [kept] = kept_outputs((model.out.view(1, 3), fresh), held)
    assert kept.data_ptr() == model.out.data_ptr()
    assert len(kept_outputs([model.cache["kept"][0][1:]], held)) == len(kept_outputs(model.weight.t(), held)) == 1
    assert kept_outputs(fresh, held) == []
