"""kfoundry.evaluate.worker.kernel_metadata: registers, spills and shared memory of compiled Triton kernels.
On CPU there are no compiled kernels: stand-ins with Triton 3.x's attributes, and objects without
them (the interpreter's launches return None), which must give None fields and never raise."""

from types import SimpleNamespace

import pytest

from kfoundry.evaluate.worker.kernel_metadata import FIELDS, triton_metadata


def compiled(**attributes):
    metadata = SimpleNamespace(num_warps=8, num_stages=3, shared=65536, name="k")
    return SimpleNamespace(metadata=metadata, **attributes)


def test_reads_metadata_and_loaded_binary():
    (row,) = triton_metadata({"_k": compiled(n_regs=96, n_spills=0)})
    assert row == {"name": "_k", "num_warps": 8, "num_stages": 3, "n_regs": 96, "n_spills": 0, "shared_bytes": 65536}


def test_loads_the_binary_when_the_launch_did_not():
    kernel = compiled()

    def init():
        kernel.n_regs, kernel.n_spills = 40, 2

    kernel._init_handles = init
    (row,) = triton_metadata({"_k": kernel})
    assert row["n_regs"] == 40 and row["n_spills"] == 2


def test_failing_load_leaves_registers_unknown():
    kernel = compiled()

    def init():
        raise RuntimeError("0 active drivers: no GPU")

    kernel._init_handles = init
    (row,) = triton_metadata({"_k": kernel})
    assert row["num_warps"] == 8 and row["n_regs"] is None and row["n_spills"] is None


class Hostile:
    @property
    def metadata(self):
        raise RuntimeError("boom")


@pytest.mark.parametrize("kernel", [None, object(), SimpleNamespace(metadata=None), Hostile(),
                                    SimpleNamespace(metadata=SimpleNamespace(num_warps="x", shared=True))])
def test_objects_without_metadata_give_none_fields(kernel):
    (row,) = triton_metadata({"_k": kernel})
    assert row["name"] == "_k" and all(row[field] is None for field in FIELDS)


def test_empty_or_bad_input():
    assert triton_metadata({}) == []
    assert triton_metadata(None) == []
    assert triton_metadata(42) == []


@pytest.mark.gpu
def test_real_compiled_kernel_on_gpu():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    x = torch.randn(4096, device="cuda")
    y = torch.empty_like(x)
    kernel = _copy_kernel[(4,)](x, y, x.numel(), BLOCK=1024, num_warps=4)
    (row,) = triton_metadata({"_copy_kernel": kernel})
    assert row["num_warps"] == 4 and row["num_stages"] is not None
    assert isinstance(row["n_regs"], int) and row["n_regs"] > 0
    assert row["n_spills"] == 0 and isinstance(row["shared_bytes"], int)
