"""A parent's kernels in a few lines: what each computes, its grid, its dots' precision, its constants, and the
sizes a composed candidate is bound to."""

from kfoundry.experts.parent_summary import summary_lines
from tests.experts.composer.helpers import compose_ok, fixture

HAND_WRITTEN = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _mm_kernel(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr):
    """C = A @ B, one BM x BN tile per program."""
    acc = tl.dot(tl.load(a_ptr), tl.load(b_ptr), input_precision="ieee")
    tl.store(c_ptr, acc)


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        c = torch.empty(a.shape[0], b.shape[1], device=a.device)
        _mm_kernel[(triton.cdiv(a.shape[0], 64), triton.cdiv(b.shape[1], 64))](a, b, c, BM=64, BN=64, num_warps=4)
        return c
'''


def test_a_hand_written_kernel_is_summarised_from_its_docstring_and_launch():
    line, = summary_lines(HAND_WRITTEN)
    assert line.startswith("`_mm_kernel`: C = A @ B, one BM x BN tile per program.")
    assert "grid (triton.cdiv(a.shape[0], 64), triton.cdiv(b.shape[1], 64))" in line
    assert "constants BM=64, BN=64, num_warps=4" in line and "dots: input_precision='ieee'" in line


def test_a_composed_candidate_says_what_each_kernel_computes_and_the_sizes_it_is_bound_to():
    candidate = compose_ok(fixture("conv_groupnorm_pool"), max_variants=1).candidates[0]
    lines = summary_lines(candidate.source)
    kernels = [line for line in lines if line.startswith("`")]
    assert len(kernels) == candidate.source.count("@triton.jit")
    assert any("conv kernel:" in line and "DOT_PRECISION" in line for line in kernels)
    assert lines[-1].startswith("sizes it is bound to (checked when forward runs): ")


def test_a_source_that_does_not_parse_has_no_summary():
    assert summary_lines("def broken(:\n") == []
