"""A VGG-16-style network: thirteen 3x3 convolutions with ReLU in five blocks, each block ending in a 2x2 max
pool, then a classifier of three Linear layers with ReLU between them (no dropout)."""
import torch
from torch import nn

batch_size = 10
in_channels = 3
height = 224
width = 224
num_classes = 1000

BLOCKS = [[64, 64], [128, 128], [256, 256, 256], [512, 512, 512], [512, 512, 512]]


class Model(nn.Module):
    def __init__(self, in_channels, num_classes, height, width):
        super().__init__()
        layers, cin = [], in_channels
        for block in BLOCKS:
            for cout in block:
                layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU()]
                cin = cout
            layers.append(nn.MaxPool2d(2, 2))
        self.features = nn.Sequential(*layers)
        flat = cin * (height // 32) * (width // 32)
        self.classifier = nn.Sequential(nn.Linear(flat, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                                        nn.Linear(4096, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, num_classes, height, width]
