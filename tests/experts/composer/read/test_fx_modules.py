"""torch.nn leaf modules read into the IR compute what the modules compute, in training and eval mode."""

import pytest
import torch
from torch import nn

from kfoundry.experts.composer.read.lower_fx import ReadFailed
from tests.experts.composer.helpers import assert_ir_matches, read_model


def _randomize(model: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            tensor.uniform_(0.5, 1.5)
        for name, tensor in model.named_buffers():
            if name.endswith("running_mean"):
                tensor.uniform_(-0.5, 0.5)
            elif name.endswith("running_var"):
                tensor.uniform_(0.5, 2.0)
    return model


ACTIVATIONS = nn.Sequential(nn.ReLU(), nn.ReLU6(), nn.LeakyReLU(0.1), nn.ELU(0.8), nn.CELU(1.3), nn.SELU(),
                            nn.GELU(approximate="tanh"), nn.GELU(), nn.Sigmoid(), nn.Tanh(), nn.SiLU(), nn.Mish(),
                            nn.Softplus(2.0, 10.0), nn.Softsign(), nn.Hardtanh(-2, 2), nn.Hardswish(),
                            nn.Hardsigmoid(), nn.LogSigmoid(), nn.Threshold(-0.2, 0.3), nn.Identity(),
                            nn.Dropout(0.3))


class Layers(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.conv1 = nn.Conv1d(3, 4, 2, stride=2, bias=False)
        self.conv3 = nn.Conv3d(3, 2, (1, 2, 2), dilation=(1, 2, 1))
        self.deconv = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.bn1 = nn.BatchNorm1d(3, track_running_stats=False)
        self.ln = nn.LayerNorm(6)
        self.gn = nn.GroupNorm(2, 4)
        self.inorm = nn.InstanceNorm2d(4, affine=True)
        self.rms = nn.RMSNorm([5, 6])
        self.pool = nn.MaxPool2d(2, ceil_mode=True)
        self.avg = nn.AvgPool2d(3, stride=2, padding=1)
        self.gap = nn.AdaptiveAvgPool2d((1, 1))
        self.amp = nn.AdaptiveMaxPool2d(2)
        self.flat = nn.Flatten()
        self.unflat = nn.Unflatten(1, (2, 2))
        self.fc = nn.Linear(6, 3)
        self.sm = nn.Softmax(dim=1)
        self.lsm = nn.LogSoftmax(dim=-1)
        self.smin = nn.Softmin(dim=2)
        self.act = ACTIVATIONS

    def forward(self, x):
        y = self.conv(x)
        outs = [self.act(x), y, self.conv1(x[:, :, 0]), self.conv3(x.unsqueeze(2)), self.deconv(x)]
        outs += [self.bn(y), self.bn1(x[:, :, 0]), self.ln(x), self.gn(y), self.inorm(y), self.rms(x)]
        outs += [self.pool(x), self.avg(x), self.gap(x), self.amp(x), self.flat(x), self.unflat(y)]
        outs += [self.fc(x), self.sm(x), self.lsm(x), self.smin(x)]
        return tuple(outs)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_modules_read_exactly(mode):
    model = _randomize(Layers())
    model = model.train() if mode == "train" else model.eval()
    if mode == "train":
        model.act[-1].p = 0.0  # dropout with p=0 is the identity even in training mode
    assert_ir_matches(model, [torch.randn(2, 3, 5, 6)], atol=1e-4)


def test_unknown_modules_are_named():
    model = nn.Sequential(nn.Linear(4, 4), nn.PReLU(), nn.LSTMCell(4, 4))
    with pytest.raises(ReadFailed) as info:
        read_model(model, [torch.randn(2, 4)])
    assert "nn.PReLU" in info.value.unsupported
