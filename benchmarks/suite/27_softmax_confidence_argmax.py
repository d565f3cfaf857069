"""Top-1 prediction with its confidence: softmax of biased logits over each row, then its max and argmax."""
import torch
from torch import nn

# Estimated H200 fp32 eager time ~0.65-0.92 ms (>= 0.5 ms): memory-bound over 4096x32000 (524 MB): the bias add
# reads and writes it (2 passes), softmax reads it once to three times and writes it (2-4), max-with-indices
# reads it (1): 5-7 * 524 MB = 2.6-3.7 GB at ~4 TB/s. Memory: input and two 524 MB intermediates: ~1.6 GB.
rows = 4096
cols = 32000


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols) * 0.5)

    def forward(self, x):
        confidence, prediction = torch.softmax(x + self.bias, dim=-1).max(dim=-1)
        return confidence, prediction


def get_inputs():
    # peaked logits: the top probability is far from zero, so the tolerance checks it
    return [torch.randn(rows, cols) * 4.0]


def get_init_inputs():
    return [cols]
