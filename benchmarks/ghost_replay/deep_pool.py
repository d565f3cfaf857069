"""Weak problem: a deep, randomly initialised convolutional network (a stem, a max pool, then 3x3
convolutions with ReLU) ending in global average pooling and a linear classifier, as GoogLeNet ends.
With PyTorch's default initialisation each convolution and ReLU shrinks what the input contributes,
so the output is, within the tolerance, what the biases make of a constant: it barely depends on the input."""
import torch
import torch.nn as nn

batch_size = 32
in_channels = 3
channels = 64
size = 112
depth = 12
classes = 1000


class Model(nn.Module):
    def __init__(self, in_channels, channels, depth, classes):
        super().__init__()
        self.stem = nn.Conv2d(in_channels, channels, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.convs = nn.ModuleList(nn.Conv2d(channels, channels, kernel_size=3, padding=1) for _ in range(depth))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x):
        x = self.pool(torch.relu(self.stem(x)))
        for conv in self.convs:
            x = torch.relu(conv(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, channels, depth, classes]
