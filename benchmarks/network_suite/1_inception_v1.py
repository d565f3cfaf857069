"""An Inception-v1 (GoogLeNet-style) network: a stem of convolutions and max pools, nine inception modules (1x1,
1x1 -> 3x3, 1x1 -> 5x5 and 3x3 max pool -> 1x1 branches, each conv followed by ReLU, concatenated on channels),
global average pooling and a linear classifier. No auxiliary heads, no dropout."""
import torch
from torch import nn

batch_size = 10
in_channels = 3
height = 224
width = 224
num_classes = 1000

# (in, 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool proj) per module, as in GoogLeNet; "pool" is a 3x3/2 max pool
LAYOUT = [(192, 64, 96, 128, 16, 32, 32), (256, 128, 128, 192, 32, 96, 64), "pool",
          (480, 192, 96, 208, 16, 48, 64), (512, 160, 112, 224, 24, 64, 64), (512, 128, 128, 256, 24, 64, 64),
          (512, 112, 144, 288, 32, 64, 64), (528, 256, 160, 320, 32, 128, 128), "pool",
          (832, 256, 160, 320, 32, 128, 128), (832, 384, 192, 384, 48, 128, 128)]


def conv(cin, cout, k, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2), nn.ReLU())


class Inception(nn.Module):
    def __init__(self, cin, c1, c3r, c3, c5r, c5, cp):
        super().__init__()
        self.b1 = conv(cin, c1, 1)
        self.b3 = nn.Sequential(conv(cin, c3r, 1), conv(c3r, c3, 3))
        self.b5 = nn.Sequential(conv(cin, c5r, 1), conv(c5r, c5, 5))
        self.bp = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1), conv(cin, cp, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(x)], dim=1)


class Model(nn.Module):
    def __init__(self, in_channels, num_classes):
        super().__init__()
        self.stem = nn.Sequential(conv(in_channels, 64, 7, stride=2), nn.MaxPool2d(3, 2, padding=1),
                                  conv(64, 64, 1), conv(64, 192, 3), nn.MaxPool2d(3, 2, padding=1))
        self.body = nn.Sequential(*(nn.MaxPool2d(3, 2, padding=1) if m == "pool" else Inception(*m) for m in LAYOUT))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(1024, num_classes)

    def forward(self, x):
        x = self.pool(self.body(self.stem(x)))
        return self.fc(torch.flatten(x, 1))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, num_classes]
