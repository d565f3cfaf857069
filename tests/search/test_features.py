"""kfoundry.search.features and the normalized source hash."""

from kfoundry.search import cell, features, normalize_source, source_hash
from kfoundry.types import Diagnosis

TRITON = '''
import triton
import triton.language as tl

@triton.autotune(configs=[triton.Config({'BLOCK_M': 128, 'BLOCK_N': 64}, num_warps=8)], key=['M'])
@triton.jit
def matmul(a, b, c, M, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    acc = tl.dot(a, b)

@triton.jit
def relu(x, BLOCK_SIZE: tl.constexpr):
    pass

def launch(x):
    relu[(1,)](x, BLOCK_SIZE=1024)
'''

CUDA = '''
from torch.utils.cpp_extension import load_inline
source = """
#include <torch/extension.h>
#define TILE 16
__global__ void add(float* x) {}
__global__ void mul(float* x) {}
"""
'''


def test_triton_features():
    f = features(TRITON, Diagnosis(status="ok", summary="", bound="compute"))
    assert f["backend"] == "triton" and f["kernels"] == 2 and f["uses_dot"]
    assert f["tile_sizes"] == [64, 128, 1024] and f["tile"] == "large"
    assert f["num_warps"] == [8] and f["warps"] == "mid" and f["bound"] == "compute"


def test_cuda_features_and_defaults():
    f = features(CUDA)
    assert f["backend"] == "cuda" and f["kernels"] == 2 and not f["uses_dot"]
    assert f["tile_sizes"] == [16] and f["tile"] == "small"
    assert f["warps"] == "default" and f["bound"] == "unknown"


def test_cell_buckets_kernel_counts_and_is_hashable():
    base = features(TRITON)
    many = dict(base, kernels=5)
    assert cell(many)[1] == "3+" and cell(base)[1] == 2
    assert cell(base) != cell(features(CUDA))
    assert hash(cell(base)) is not None and len(cell(base)) == 6


def test_hash_ignores_comments_blank_lines_and_trailing_spaces_but_not_strings():
    a = "x = 1\n\n# a comment\ny = '#not a comment'   \n"
    b = "x = 1  # set x\ny = '#not a comment'\n\n"
    assert normalize_source(a) == normalize_source(b) == "x = 1\ny = '#not a comment'\n"
    assert source_hash(a) == source_hash(b)
    assert source_hash(a) != source_hash("x = 2\ny = '#not a comment'")
    assert source_hash(CUDA) != source_hash(CUDA.replace("#include <torch/extension.h>", ""))


def test_hash_of_code_that_does_not_tokenize():
    assert normalize_source("def f(:\n   # c\n  x = '''\n") == "def f(:\n  x = '''\n"
