"""Shape and dtype inference agrees with what PyTorch computes."""

import pytest
import torch
import torch.nn.functional as F

from kfoundry.experts.composer.ir.builder import (
    GraphBuilder,
    ShapeError,
    broadcast,
    conv_out_size,
    infer,
    norm_dims,
    pool_out_size,
    result_dtype,
)


@pytest.fixture
def b():
    return GraphBuilder()


def test_broadcast_and_dims():
    assert broadcast((4, 1, 3), (5, 1)) == (4, 5, 3)
    with pytest.raises(ShapeError):
        broadcast((2, 3), (4, 3))
    assert norm_dims(-1, 3) == (2,) and norm_dims(None, 2) == (0, 1) and norm_dims([2, 0], 3) == (0, 2)


def test_pointwise_dtypes_follow_pytorch(b):
    x = b.input("x", 0, torch.randn(2, 3))
    i = b.input("i", 1, torch.ones(2, 3, dtype=torch.int64))
    h = b.input("h", 2, torch.randn(2, 3).half())
    assert b.op("add", [x, i]).dtype == torch.float32
    assert b.op("mul", [i, 2]).dtype == torch.int64
    assert b.op("mul", [i, 2.5]).dtype == torch.float32
    assert b.op("div", [i, 2]).dtype == torch.float32  # true division
    assert b.op("add", [h, x]).dtype == torch.float32
    assert b.op("gt", [x, 0.0]).dtype == torch.bool
    assert result_dtype([h, 1.0]) == torch.float16
    follows = b.op("relu", [x])
    cast = b.op("cast", [x], dtype=torch.float16)
    assert not follows.fixed_dtype and cast.fixed_dtype and cast.dtype == torch.float16
    assert b.op("argmax", [x], dim=1, keepdim=False).dtype == torch.int64


def test_a_tensor_with_a_dtype_of_its_own_pins_the_result(b):
    x = b.input("x", 0, torch.randn(2, 3))
    zeros = b.op("full", [], sizes=(2, 3), value=0.0, dtype=torch.float32, fixed_dtype=True)  # torch.zeros in forward
    assert b.op("mul", [zeros, x]).fixed_dtype  # fp32 zeros times an fp16 input are fp32
    assert not b.op("mul", [b.op("full", [], sizes=(3,), value=1.0, dtype=torch.float32, fixed_dtype=False), x]).fixed_dtype
    counted = b.op("cast", [b.op("gt", [x, 0.0])], dtype=torch.float32, follows=True)  # a decomposition's own cast
    assert not counted.fixed_dtype and not b.op("div", [x, counted]).fixed_dtype


@pytest.mark.parametrize("shape,dims,keepdim", [((4, 5, 6), (1,), False), ((4, 5, 6), (0, 2), True),
                                                ((4, 5), None, False)])
def test_reduction_shapes(b, shape, dims, keepdim):
    x = b.input("x", 0, torch.randn(shape))
    out = b.op("sum", [x], dims=dims, keepdim=keepdim)
    expected = torch.sum(torch.randn(shape), dim=dims if dims else tuple(range(len(shape))), keepdim=keepdim)
    assert out.shape == tuple(expected.shape)


def test_matmul_shapes(b):
    a = b.input("a", 0, torch.randn(2, 1, 5, 7))
    w = b.input("w", 1, torch.randn(3, 7, 4))
    assert b.op("matmul", [a, w]).shape == (2, 3, 5, 4)
    with pytest.raises(ShapeError):
        b.op("matmul", [a, a])


@pytest.mark.parametrize("transposed,stride,padding,dilation,groups,output_padding", [
    (False, 1, 0, 1, 1, 0), (False, 2, 1, 1, 2, 0), (False, 1, 2, 2, 1, 0), (True, 2, 1, 1, 1, 1),
    (True, 3, 0, 2, 2, 0)])
def test_conv_shapes(b, transposed, stride, padding, dilation, groups, output_padding):
    x = torch.randn(2, 4, 9, 8)
    w = torch.randn(4, 3, 3, 3) if transposed else torch.randn(6, 4 // groups, 3, 3)
    if transposed:
        ref = F.conv_transpose2d(x, w, None, stride, padding, output_padding, groups, dilation)
    else:
        ref = F.conv2d(x, w, None, stride, padding, dilation, groups)
    attrs = {"stride": (stride,) * 2, "padding": (padding,) * 2, "dilation": (dilation,) * 2, "groups": groups,
                 "transposed": transposed, "output_padding": (output_padding,) * 2}
    out = b.op("conv", [b.input("x", 0, x), b.input("w", 1, w)], **attrs)
    assert out.shape == tuple(ref.shape)
    assert conv_out_size(9, 3, stride, padding, dilation, transposed, output_padding) == ref.shape[2]


@pytest.mark.parametrize("kernel,stride,padding,ceil_mode", [(3, 2, 1, True), (2, 2, 0, False), (3, 3, 1, True),
                                                            (4, 3, 2, True)])
def test_pool_shapes(b, kernel, stride, padding, ceil_mode):
    x = torch.randn(1, 2, 10, 7)
    ref = F.max_pool2d(x, kernel, stride, padding, 1, ceil_mode)
    out = b.op("max_pool", [b.input("x", 0, x)], kernel=(kernel,) * 2, stride=(stride,) * 2,
               padding=(padding,) * 2, dilation=(1, 1), ceil_mode=ceil_mode)
    assert out.shape == tuple(ref.shape)
    assert pool_out_size(7, kernel, stride, padding, 1, ceil_mode) == ref.shape[3]
    adaptive = b.op("adaptive_avg_pool", [b.input("y", 1, x)], output_size=(3, 2))
    assert adaptive.shape == (1, 2, 3, 2)


def test_views(b):
    x = b.input("x", 0, torch.randn(2, 3, 4))
    n = b.sym("sym_size", [x], 2, dim=0)
    assert b.op("reshape", [x], sizes=(n, -1)).shape == (2, 12)
    assert b.op("permute", [x], dims=(2, 0, 1)).shape == (4, 2, 3)
    assert b.op("transpose", [x], dim0=0, dim1=-1).shape == (4, 3, 2)
    assert b.op("unsqueeze", [x], dim=-1).shape == (2, 3, 4, 1)
    assert b.op("flatten", [x], start=1, end=2).shape == (2, 12)
    assert b.op("slice", [x], dim=2, start=1, stop=None, step=2).shape == (2, 3, 2)
    assert b.op("select", [x], dim=1, index=-1).shape == (2, 4)
    assert b.op("expand", [b.op("unsqueeze", [x], dim=0)], sizes=(5, -1, -1, -1)).shape == (5, 2, 3, 4)
    with pytest.raises(ShapeError):
        b.op("reshape", [x], sizes=(5, -1))
    with pytest.raises(ShapeError):
        infer("fft", [x], {})


def test_fresh_names_are_identifiers(b):
    names = {b.fresh("layers.0.weight"), b.fresh("layers.0.weight"), b.fresh("0bias"), b.fresh("")}
    assert len(names) == 4 and all(n.isidentifier() for n in names)
