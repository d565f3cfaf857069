"""The CUDA half: constants, launches and template arguments in load_inline strings, and their block facts."""

from __future__ import annotations

from kfoundry.experts.tunables import CUDA_THREADS, apply_values, discover, find_tunables
from tests.experts.tunables.helpers import CUDA, by_name, text_at


def test_cuda_defines_constants_and_launches():
    found = by_name(CUDA)
    assert set(found) == {"TILE", "THREADS", "BLOCK_SIZE", "threads"}
    assert (found["TILE"].kind, found["TILE"].value) == ("cuda_const", 16)  # a side of dim3 block(TILE, TILE)
    assert (found["THREADS"].kind, found["THREADS"].choices) == ("cuda_threads", list(CUDA_THREADS))
    assert found["TILE"].where.startswith("line 7: #define TILE in cuda_src")
    # N_ITEMS is a size, WARP_SIZE a fact, `threads = 100` no valid block: none is tunable
    template = found["BLOCK_SIZE"]
    assert "template argument BLOCK_SIZE of the launch of reduce_kernel" in template.where
    assert sorted(text_at(CUDA, s) for s in template.spans) == ["255", "256", "256", "256"]
    literal = found["threads"]  # the literal 512 of scale_kernel's launch: the grid, bounds and buffer spell it
    assert literal.value == 512 and "block size of the launch of scale_kernel" in literal.where
    assert sorted((text_at(CUDA, s), s.offset) for s in literal.spans) == [("511", -1)] + [("512", 0)] * 4


def test_cuda_facts_evaluate_blocks_and_static_shared_memory():
    facts = {f.label: f for f in discover(CUDA).cuda}
    assert facts["cuda_src"].max_threads == 512
    assert facts["cuda_src"].static_shared_bytes == 16 * 16 * 4 + 512 * 4  # buf[BLOCK_SIZE] does not evaluate


def test_cuda_dim3_grids_and_unnamed_template_sizes():
    source = '''
kernels = r"""
template <typename T, int N_ITEMS>
__global__ void k(const T* x, int n) {}
torch::Tensor run(torch::Tensor x) {
    int n = x.numel();
    dim3 grid((n + 127) / 128);
    k<float, 4><<<grid, 128>>>(x.data_ptr<float>(), n);
    k<float, 256><<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), n);
    return x;
}
"""
'''
    # N_ITEMS is no tunable name, and the 256 of the second launch is its value too: that launch is left alone
    [threads] = find_tunables(source)
    assert (threads.name, threads.value) == ("threads", 128)
    out = apply_values(source, [threads], {"threads": 256})
    assert "dim3 grid((n + 255) / 256);" in out and "k<float, 4><<<grid, 256>>>" in out
