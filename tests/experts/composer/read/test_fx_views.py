"""Views, indexing and sizes read into host-side steps that give PyTorch's results."""

import pytest
import torch
from torch import nn

from kfoundry.experts.composer.read.lower_fx import ReadFailed
from tests.experts.composer.helpers import assert_ir_matches, read_model


class Views(nn.Module):
    def forward(self, x):
        n = x.size(0)
        a = x.view(n, -1) * 2
        b = x.reshape(-1, x.shape[-1]).t() + 1
        c = x.permute(2, 0, 1).contiguous().flatten(1) - 1
        d = x.transpose(1, 2).unsqueeze(0).squeeze(0).unsqueeze(1).expand(2, 3, 5, 4) * 0.5
        e = (x[:, 1:3, ::2] * 2, x[..., -1:] + 1, x[0] - 1, x[:, None, 1, 2:] * 3)
        f = x.narrow(1, 1, 2).select(0, 1).movedim(0, 1) * 3
        g = x.unflatten(2, (5, 1)) + 1
        h = x.flatten().view(x.numel() // x.shape[0], -1) * x.dim()
        return a, b, c, d, *e, f, g, h


def test_views_and_sizes_read_exactly():
    graph = assert_ir_matches(Views(), [torch.randn(2, 4, 5)])
    kinds = {op.name for op in graph.ops}
    assert {"reshape", "transpose", "permute", "flatten", "slice", "select", "unsqueeze", "expand",
            "sym_size", "sym_numel"} <= kinds


def test_tensor_indexing_is_unsupported():
    class M(nn.Module):
        def forward(self, x, i):
            return x[i] * 2

    with pytest.raises(ReadFailed) as info:
        read_model(M(), [torch.randn(4, 3), torch.tensor([0, 2])])
    assert "advanced indexing" in info.value.unsupported


def test_view_as_dtype_is_unsupported():
    class M(nn.Module):
        def forward(self, x):
            return x.view(torch.int32) + 1

    with pytest.raises(ReadFailed) as info:
        read_model(M(), [torch.randn(4, 3)])
    assert "Tensor.view(dtype)" in info.value.unsupported


@pytest.mark.parametrize("aten", [False, True], ids=["fx", "aten"])
def test_unfold_into_windows_that_neither_overlap_nor_leave_gaps_is_a_view(aten):
    class Patches(nn.Module):
        def forward(self, x):
            return x.unfold(2, 4, 4).unfold(3, 3, 3).sum(dim=(-1, -2)), x.unfold(-1, 5, 5).amax(-1)

    assert_ir_matches(Patches(), [torch.randn(2, 3, 10, 9)], aten=aten)  # 10 % 4 and 9 % 5: tails dropped


@pytest.mark.parametrize("aten", [False, True], ids=["fx", "aten"])
def test_overlapping_and_gapped_windows_are_torchs_unfold_view(aten):
    class Sliding(nn.Module):
        def forward(self, x):
            return x.unfold(1, 4, 2).mean(-1), x.unfold(-1, 2, 3).amax(-1), x.unfold(0, 2, 1).sum(-1)

    assert_ir_matches(Sliding(), [torch.randn(3, 10)], aten=aten)


@pytest.mark.parametrize("aten", [False, True], ids=["fx", "aten"])
def test_unbind_gives_one_view_per_index(aten):
    class Parts(nn.Module):
        def forward(self, x):
            a, b, c = torch.unbind(x, dim=1)
            first = x.unbind(-1)[0]
            return a * 0.5 + b - c, first

    assert_ir_matches(Parts(), [torch.randn(4, 3, 5)], aten=aten)
