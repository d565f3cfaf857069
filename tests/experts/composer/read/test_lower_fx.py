"""Reading a torch.fx trace: names of unsupported ops, in-place ops, shape checks."""

import pytest
import torch
from torch import nn

from kfoundry.experts.composer.read.lower_fx import ReadFailed, describe, read_graph
from kfoundry.experts.composer.read.trace import trace_fx
from tests.experts.composer.helpers import assert_ir_matches


def test_unsupported_ops_are_all_named_and_what_follows_is_skipped():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(4, 4)

        def forward(self, x):
            y = torch.cummax(x, dim=0).values.exp()  # exp is skipped: it reads an unsupported op's result
            z = torch.sort(x, dim=-1).values
            return y + z

    trace = trace_fx(M(), [torch.randn(3, 4)])
    with pytest.raises(ReadFailed) as info:
        read_graph(trace)
    assert set(info.value.unsupported) == {"torch.cummax", "torch.sort"}


def test_describe_names_nodes_readably():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(4, 4)

        def forward(self, x):
            return torch.fft.rfft(x).abs().topk(2).values, self.lstm(x)[0], torch.special.erfcx(x)

    trace = trace_fx(M(), [torch.randn(3, 4)])
    names = {describe(n) for n in trace.graph_module.graph.nodes if n.op.startswith("call")}
    assert {"torch.fft.rfft", "Tensor.topk", "nn.LSTM", "torch.special.erfcx"} <= names


def test_in_place_ops_rebind_the_overwritten_tensor():
    class M(nn.Module):
        def forward(self, x):
            before = x * 2
            torch.relu_(x)
            x.add_(1.0)
            x = nn.functional.relu(x - 3.0, inplace=True)
            return before, x

    assert_ir_matches(M(), [torch.randn(4, 5)])


def test_shape_derived_sizes_stay_symbolic():
    class M(nn.Module):
        def forward(self, x):
            return x.view(x.size(0), -1).sum(dim=1) / x.shape[1]

    graph = assert_ir_matches(M(), [torch.randn(3, 4, 5)])
    names = [op.name for op in graph.ops]
    assert "sym_size" in names and "reshape" in names


def test_non_tensor_forward_arguments_are_constants():
    class M(nn.Module):
        def forward(self, x, scale):
            return x * scale

    graph = assert_ir_matches(M(), [torch.randn(3), 1.5])
    assert [v.kind for v in graph.inputs] == ["input", "const"]


def test_numbers_computed_from_sizes_and_constants_in_forward_are_folded():
    class M(nn.Module):
        def forward(self, x):
            scale = (x.shape[-1] // 2) ** -0.5  # a power of a size
            cap = torch.log(torch.tensor(100.0))  # a unary op on a one-number tensor built in forward
            return torch.clamp(x * scale, max=cap) + torch.exp(torch.tensor(0.5))

    assert_ir_matches(M(), [torch.randn(3, 8) * 10])
