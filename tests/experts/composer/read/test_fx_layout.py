"""Flips, rolls, padding, concatenation, stacking and tensors filled in forward, read into the IR: the IR run
with PyTorch ops computes what the model computes, from the torch.fx trace and from the dispatch-level one."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from kfoundry.experts.composer.read.lower_fx import ReadFailed
from tests.experts.composer.helpers import assert_ir_matches, read_model


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, y):
        return self.fn(x, y)


CASES = {
    "flip": lambda x, y: (torch.flip(x, dims=[1]), x.flip(0, 2), torch.fliplr(y), torch.flipud(x), x.flip(-1)),
    "roll": lambda x, y: (torch.roll(x, 2, 1), torch.roll(x, shifts=(-1, 5), dims=(0, 2)), y.roll(-7, 0)),
    "pad": lambda x, y: (F.pad(x, (1, 2)), F.pad(x, (0, 0, 3, 1), value=-1.5), F.pad(x, (1, 1, 2, 0), "reflect"),
                         F.pad(x, (2, 3), mode="replicate"), F.pad(x, (-1, 1))),
    "cat": lambda x, y: (torch.cat([x, x * 2], dim=1), torch.cat((x[:, :, :1], x), -1), torch.concat([y, y, y], 0),
                         torch.stack([y, y + 1], dim=1), torch.stack([x, x], 0)),
    "fills": lambda x, y: (torch.zeros_like(x) + x, torch.ones(3, 4) * y[:3, :4], torch.full_like(y, 2.5),
                           x.new_zeros(x.shape) - x, torch.full((3, 4), 7.0) + y[:3, :4]),
}


@pytest.mark.parametrize("aten", [False, True], ids=["fx", "aten"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_layout_ops_read_exactly(name, aten):
    torch.manual_seed(0)
    assert_ir_matches(Fn(CASES[name]), [torch.randn(3, 5, 6), torch.randn(9, 8)], aten=aten)


def test_circular_padding_reads_exactly_from_the_fx_trace():
    # (the dispatch-level trace sees circular padding already broken into copies into an empty tensor)
    fn = Fn(lambda x, y: (F.pad(x, (1, 2, 1, 1), mode="circular"), F.pad(y, (3, 0), mode="circular")))
    assert_ir_matches(fn, [torch.randn(3, 5, 6), torch.randn(9, 8)])


def test_padding_modules_read_exactly():
    model = nn.Sequential(nn.ZeroPad2d((1, 0, 2, 1)), nn.ReflectionPad2d(1), nn.ReplicationPad2d((2, 0, 1, 3)),
                          nn.ConstantPad2d((1, 1, 0, 0), 0.5), nn.CircularPad2d(1))
    assert_ir_matches(model, [torch.randn(2, 3, 6, 7)])


def test_layout_ops_the_composer_cannot_read_are_named():
    with pytest.raises(ReadFailed) as failed:
        read_model(Fn(lambda x, y: torch.roll(x, 3)), [torch.randn(3, 5, 6), torch.randn(9, 8)])
    assert "torch.roll" in str(failed.value)


def test_random_numbers_drawn_in_forward_are_named_with_the_reason():
    with pytest.raises(ReadFailed) as failed:
        read_model(Fn(lambda x, y: x + 0.0 * torch.randn_like(x)), [torch.randn(3, 5, 6), torch.randn(9, 8)])
    assert "generator" in failed.value.unsupported["torch.randn_like"]
