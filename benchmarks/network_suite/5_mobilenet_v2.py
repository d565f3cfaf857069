"""MobileNetV2: a 3x3/2 stem, seventeen inverted residual blocks (1x1 expansion, 3x3 depthwise conv, 1x1 linear
projection, each conv with BatchNorm, ReLU6 after the first two; a residual add where stride is 1 and the
channels match), a 1x1 conv to 1280 channels, global average pooling and a Linear. Training mode: BatchNorm uses
batch statistics. No dropout."""
import torch
from torch import nn

batch_size = 10
in_channels = 3
height = 224
width = 224
num_classes = 1000

# (expansion t, channels c, repeats n, first stride s), as in the paper
SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def conv_bn(cin, cout, k, stride=1, groups=1, act=True):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU6()) if act else nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, t):
        super().__init__()
        hidden = cin * t
        layers = [conv_bn(cin, hidden, 1)] if t != 1 else []
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden), conv_bn(hidden, cout, 1, act=False)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class Model(nn.Module):
    def __init__(self, in_channels, num_classes):
        super().__init__()
        layers, cin = [conv_bn(in_channels, 32, 3, 2)], 32
        for t, c, n, s in SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(conv_bn(cin, 1280, 1))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1280, num_classes)

    def forward(self, x):
        x = self.features(x)
        return self.fc(x.mean(dim=(2, 3)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, num_classes]
