"""ModelNew's constructor is the reference's, with what it needs from the problem file."""

import pytest

from kfoundry.experts.composer.read.model_init import InitError, init_parts
from tests.experts.composer.helpers import example

SOURCE = '''
import math
import torch
import torch.nn as nn
HIDDEN = 4
batch_size = 8
def make(n):
    return nn.Linear(n, HIDDEN)
class Block(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = make(n)
class Model(nn.Module):
    """A docstring."""
    scale = 2.0
    def __init__(self, n, eps=1e-5):
        super(Model, self).__init__()
        self.block = Block(n)
        self.eps = eps
        self._setup(n)
    def _setup(self, n):
        self.extra = nn.Parameter(torch.ones(n) * math.pi)
    def helper_for_forward(self, x):
        return x
    def forward(self, x, y=None):
        return self.block.fc(x)
def get_inputs():
    return [torch.randn(batch_size, 3)]
def get_init_inputs():
    return [3]
'''


def test_constructor_and_its_dependencies_are_copied():
    parts = init_parts(SOURCE)
    assert parts.imports == ["import math", "import torch", "import torch.nn as nn"]
    assert [d.split("\n")[0] for d in parts.definitions] == ["HIDDEN = 4", "def make(n):", "class Block(nn.Module):"]
    body = "\n".join(parts.class_body)
    assert "super(ModelNew, self).__init__()" in body and "def _setup(self, n):" in body
    assert "scale = 2.0" in body and "helper_for_forward" not in body and "def forward" not in body
    assert "batch_size" not in "\n".join(parts.definitions)  # a parameter name, not the module constant
    assert parts.forward_args == ["x", "y"] and parts.forward_signature == "self, x, y=None"
    namespace: dict = {}
    code = "\n".join(parts.imports + parts.definitions) + "\nclass ModelNew(nn.Module):\n" + body
    exec(code, namespace)  # noqa: S102 -- running the copied constructor is what this test checks
    model = namespace["ModelNew"](3)
    assert model.block.fc.weight.shape == (4, 3) and model.eps == 1e-5


def test_examples_copy_cleanly():
    parts = init_parts(example("conv_relu").read_text())
    assert parts.definitions == [] and parts.forward_args == ["x"]
    assert "nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding)" in parts.class_body[0]


def test_unusual_models_are_refused():
    with pytest.raises(InitError):
        init_parts("import torch\nModel = torch.nn.Linear\n")
    with pytest.raises(InitError):
        init_parts("import torch\nclass Model(torch.nn.Module):\n    def forward(self, *xs):\n        return xs[0]\n")
