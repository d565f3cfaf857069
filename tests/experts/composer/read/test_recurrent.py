"""nn.LSTM, nn.GRU, nn.RNN and their cells unrolled into the IR compute what the modules compute."""

import pytest
import torch
from torch import nn

from kfoundry.experts.composer.read.lower_fx import ReadFailed
from tests.experts.composer.helpers import assert_ir_matches, read_model


class Sequence(nn.Module):
    def __init__(self, rnn, with_state=False):
        super().__init__()
        self.rnn, self.with_state = rnn, with_state

    def forward(self, x, h, c):
        if not self.with_state:
            return self.rnn(x)
        return self.rnn(x, (h, c) if isinstance(self.rnn, nn.LSTM) else h)


class Flat(nn.Module):
    """The output sequence and the final state as a flat tuple."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.lstm = inner, isinstance(inner.rnn, nn.LSTM)

    def forward(self, x, h, c):
        if self.lstm:
            out, (h_n, c_n) = self.inner(x, h, c)
            return out, h_n, c_n
        return self.inner(x, h, c)


MODULES = {
    "lstm_2_layers": lambda: nn.LSTM(5, 7, num_layers=2),
    "lstm_batch_first_no_bias": lambda: nn.LSTM(5, 7, batch_first=True, bias=False),
    "gru": lambda: nn.GRU(5, 7, num_layers=2),
    "gru_batch_first": lambda: nn.GRU(5, 7, batch_first=True),
    "rnn_tanh": lambda: nn.RNN(5, 7),
    "rnn_relu_2_layers": lambda: nn.RNN(5, 7, num_layers=2, nonlinearity="relu"),
    "lstm_bidirectional_2_layers": lambda: nn.LSTM(5, 7, num_layers=2, bidirectional=True),
    "gru_bidirectional_batch_first": lambda: nn.GRU(5, 7, batch_first=True, bidirectional=True),
    "rnn_bidirectional_2_layers": lambda: nn.RNN(5, 7, num_layers=2, bidirectional=True),
}


@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "given_state"])
@pytest.mark.parametrize("name", sorted(MODULES))
def test_recurrent_modules_read_exactly(name, with_state):
    torch.manual_seed(0)
    rnn = MODULES[name]()
    layers = rnn.num_layers * (2 if rnn.bidirectional else 1)
    inputs = [torch.randn(4, 3, 5), torch.randn(layers, 4 if rnn.batch_first else 3, 7),
              torch.randn(layers, 4 if rnn.batch_first else 3, 7)]
    assert_ir_matches(Flat(Sequence(rnn, with_state)), inputs)


class Cells(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm, self.gru, self.rnn = nn.LSTMCell(5, 6), nn.GRUCell(5, 6), nn.RNNCell(5, 6, nonlinearity="relu")

    def forward(self, x, h, c):
        h1, c1 = self.lstm(x)
        h2, c2 = self.lstm(x, (h, c))
        return h1, c1, h2, c2, self.gru(x), self.gru(x, h), self.rnn(x, h)


def test_cells_read_exactly():
    torch.manual_seed(0)
    assert_ir_matches(Cells(), [torch.randn(3, 5), torch.randn(3, 6), torch.randn(3, 6)])


def test_projection_is_named_unsupported():
    with pytest.raises(ReadFailed) as failed:
        read_model(Flat(Sequence(nn.LSTM(5, 7, proj_size=3))), [torch.randn(4, 3, 5), None, None])
    assert "proj_size" in str(failed.value.unsupported)
