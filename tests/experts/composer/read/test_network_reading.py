"""Reading the ops whole networks use loses nothing: splits, masked_fill, vector norms, attention modules (torch.fx
and the dispatch-level trace), shapes-only recurrent layers on the meta device, and tensor attributes a forward
reassigns."""

import math

import pytest
import torch
from torch import nn

from kfoundry.experts.composer.read.lower_fx import ReadFailed
from kfoundry.experts.composer.read.rnn_meta import shapes_only_recurrence
from kfoundry.experts.composer.read.trace import trace_dispatch, trace_fx
from tests.experts.composer.helpers import assert_ir_matches, read_model


class Splits(nn.Module):
    def forward(self, x):
        a, b, c = x.chunk(3, -1)
        d, e = x.tensor_split([4], dim=1)
        f, g, h = x.tensor_split(3, dim=1)
        i, j = torch.split(x, [3, 8], dim=1)
        k = x.split(4, dim=1)
        return a + c[:, :1], b * 2, d.sum(1) + e.sum(1), f.sum(1) + g.sum(1) + h.sum(1), i, j, k[-1] * 3


@pytest.mark.parametrize("aten", [False, True], ids=["fx", "aten"])
def test_splits_read_exactly(aten):
    assert_ir_matches(Splits(), [torch.randn(3, 11)], aten=aten)


class Norms(nn.Module):
    def forward(self, x):
        return (x / x.norm(dim=-1, keepdim=True), torch.linalg.vector_norm(x, 1, dim=0), x.norm(float("inf"), 1),
                torch.norm(x), torch.linalg.vector_norm(x, ord=0.5, dim=-1), torch.linalg.vector_norm(x, -math.inf, 1),
                torch.linalg.norm(x, dim=1), x.masked_fill(x > 0.5, -1.0))


@pytest.mark.parametrize("aten", [False, True], ids=["fx", "aten"])
def test_norms_and_masked_fill_read_exactly(aten):
    assert_ir_matches(Norms(), [torch.randn(4, 6)], aten=aten)


def test_matrix_norms_are_named_unsupported():
    class Matrix(nn.Module):
        def forward(self, x):
            return torch.linalg.norm(x, ord=2)

    with pytest.raises(ReadFailed) as failed:
        read_model(Matrix(), [torch.randn(3, 3)])
    assert "the matrix norm" in str(failed.value.unsupported)


class Attention(nn.Module):
    def __init__(self, batch_first):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=batch_first)
        self.cross = nn.MultiheadAttention(8, 2, batch_first=batch_first, kdim=6, vdim=5)

    def forward(self, x, k, v, mask, padding):
        out, weights = self.mha(x, x, x, attn_mask=mask, key_padding_mask=padding, average_attn_weights=False)
        crossed, averaged = self.cross(out, k, v)
        return crossed, weights, averaged


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_reads_exactly(batch_first):
    torch.manual_seed(0)
    shape = (lambda n, e: (2, n, e)) if batch_first else (lambda n, e: (n, 2, e))
    mask = torch.triu(torch.ones(3, 3, dtype=torch.bool), 1)
    padding = torch.tensor([[0.0, 0.0, -1.0], [0.0, -2.0, 0.0]])
    assert_ir_matches(Attention(batch_first), [torch.randn(*shape(3, 8)), torch.randn(*shape(4, 6)),
                                               torch.randn(*shape(4, 5)), mask, padding])


class Wrapped(nn.Module):
    """A problem's Model holding the module (torch.fx reads a torch.nn module whole, but not as the root)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_encoder_layers_read_exactly(norm_first, training):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 12, dropout=0.0, activation=nn.GELU(approximate="tanh"),
                                       norm_first=norm_first)
    model = Wrapped(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)).train(training)
    assert_ir_matches(model, [torch.randn(3, 2, 8)])


def test_training_dropout_in_an_encoder_layer_is_refused():
    layer = nn.TransformerEncoderLayer(8, 2, 12, dropout=0.1, batch_first=True)
    with pytest.raises(ReadFailed) as failed:
        read_model(Wrapped(layer), [torch.randn(2, 3, 8)])
    assert "dropout (training mode)" in failed.value.unsupported


@pytest.mark.parametrize("rnn", [nn.LSTM(4, 6, 2, bidirectional=True), nn.GRU(4, 6, batch_first=True),
                                 nn.RNN(4, 6, 3, bidirectional=True, batch_first=True)], ids=["lstm", "gru", "rnn"])
def test_meta_recurrent_layers_give_their_shapes(rnn):
    expected = rnn(torch.randn(5, 3, 4))
    meta = rnn.to("meta")
    shapes_only_recurrence(meta)
    got = meta(torch.randn(5, 3, 4, device="meta"))
    flat = lambda out: [out[0], *(out[1] if isinstance(out[1], tuple) else (out[1],))]  # noqa: E731
    assert [t.shape for t in flat(got)] == [t.shape for t in flat(expected)]
    assert all(t.is_meta for t in flat(got))


def test_a_reassigned_tensor_attribute_survives_both_traces():
    class Held(nn.Module):
        def __init__(self):
            super().__init__()
            self.h0 = torch.randn(1, 2, 3)
            self.gru = nn.GRU(4, 3)

        def forward(self, x):
            self.h0 = self.h0.to(x.device)
            return self.gru(x, self.h0)[1]

    model = Held()
    held = model.h0
    trace_fx(model, [torch.randn(5, 2, 4)])
    assert model.h0 is held
    trace_dispatch(model, [torch.randn(5, 2, 4)])
    assert model.h0 is held
    assert_ir_matches(model, [torch.randn(5, 2, 4)])
