"""An EfficientNet-B0-style network: a 3x3/2 stem, sixteen MBConv blocks in seven stages (1x1 expansion,
depthwise kxk conv, squeeze-and-excitation from a global average through two 1x1 convs to a sigmoid gate, 1x1
projection; BatchNorm after each conv, swish x * sigmoid(x) after expansion and depthwise; a residual add where
stride is 1 and the channels match), a 1x1 head conv, global average pooling and a Linear. Training mode:
BatchNorm uses batch statistics. No dropout, no drop-connect."""
import torch
from torch import nn

batch_size = 10
in_channels = 3
height = 224
width = 224
num_classes = 1000

# (expansion, kernel, first stride, channels, repeats), as in EfficientNet-B0
STAGES = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
          (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]


def swish(x):
    return x * torch.sigmoid(x)


class MBConv(nn.Module):
    def __init__(self, cin, cout, k, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.expand = nn.Sequential(nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden)) \
            if expand != 1 else None
        self.depthwise = nn.Sequential(nn.Conv2d(hidden, hidden, k, stride, k // 2, groups=hidden, bias=False),
                                       nn.BatchNorm2d(hidden))
        squeezed = max(1, cin // 4)
        self.se_reduce = nn.Conv2d(hidden, squeezed, 1)
        self.se_expand = nn.Conv2d(squeezed, hidden, 1)
        self.project = nn.Sequential(nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        h = swish(self.expand(x)) if self.expand is not None else x
        h = swish(self.depthwise(h))
        gate = torch.sigmoid(self.se_expand(swish(self.se_reduce(h.mean(dim=(2, 3), keepdim=True)))))
        h = self.project(h * gate)
        return x + h if self.residual else h


class Model(nn.Module):
    def __init__(self, in_channels, num_classes):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32))
        blocks, cin = [], 32
        for expand, k, stride, cout, repeats in STAGES:
            for i in range(repeats):
                blocks.append(MBConv(cin, cout, k, stride if i == 0 else 1, expand))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280))
        self.fc = nn.Linear(1280, num_classes)

    def forward(self, x):
        x = self.blocks(swish(self.stem(x)))
        x = swish(self.head(x))
        return self.fc(x.mean(dim=(2, 3)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, num_classes]
