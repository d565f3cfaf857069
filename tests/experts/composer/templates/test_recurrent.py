"""The recurrent template: LSTM, GRU and RNN layers (batch first or not, with or without an initial state, several
layers, no biases) composed into a host loop of fused step kernels that the real evaluator passes on CPU."""

import re
from pathlib import Path

from kfoundry.experts.composer.compose import compose
from tests.experts.composer.helpers import compose_ok, submit, submit_all, verdict

REPO = Path(__file__).resolve().parents[4]

RECURRENT = '''
import torch
from torch import nn

batch, steps, features, hidden = 3, 3, 6, 12


class Model(nn.Module):
    def __init__(self, features, hidden):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=2, batch_first=True)
        self.gru = nn.GRU(features, hidden, bias=False)
        self.rnn = nn.RNN(features, hidden, nonlinearity="relu")
        self.plain = nn.LSTM(features, hidden)

    def forward(self, x, h0, c0):
        out, (h_n, c_n) = self.lstm(x, (h0, c0))
        seq = x.transpose(0, 1)
        gru_out, gru_h = self.gru(seq, h0[:1])
        _, rnn_h = self.rnn(seq, h0[1:])
        plain_out, _ = self.plain(seq)
        return out, h_n, c_n, gru_out, gru_h, rnn_h, plain_out


def get_inputs():
    return [torch.randn(batch, steps, features), torch.randn(2, batch, hidden), torch.randn(2, batch, hidden)]


def get_init_inputs():
    return [features, hidden]
'''


def test_recurrent_layers_compose_into_step_loops_the_evaluator_passes(tmp_path):
    path = tmp_path / "recurrent.py"
    path.write_text(RECURRENT)
    result = compose_ok(path, max_variants=4)
    assert "LSTM layer (3 steps)" in result.message and "GRU layer" in result.message and "RNN layer" in result.message
    source = result.candidates[0].source
    assert len(re.findall(r"for t\w* in range\(", source)) == 5 and "nn.LSTM" not in source.split("def forward")[1]
    # the first variant (fp16x3 input projections, TF32x3 steps) and the last (TF32x3 throughout, other tiles);
    # the fp16 candidate judged with the guard's every run, the two fp32 ones (three times its interpreted time)
    # for their correctness, without the extra runs (helpers.py)
    half = compose_ok(path, max_variants=1, precision="fp16").candidates[0].source
    fp16 = submit(path, half, precision="fp16")
    for evaluation in submit_all(path, [result.candidates[0].source, result.candidates[-1].source],
                                 guard_runs=False).result():
        verdict(evaluation)
    verdict(fp16)


def test_a_two_layer_lstm_over_64_steps_composes_to_a_few_kernels():
    result = compose(REPO / "benchmarks" / "coverage" / "12_lstm_two_layers.py", max_variants=1)
    assert "of 4 kernel(s)" in result.message and "LSTM layer (64 steps)" in result.message
    assert len(result.candidates[0].source) < 30_000  # a loop, not 64 unrolled steps
