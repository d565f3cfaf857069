"""The dispatch-level fallback: forwards torch.fx cannot trace are read from their ATen ops, and composed."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from kfoundry.experts.composer.read.lower_fx import ReadFailed
from tests.experts.composer.helpers import (
    assert_ir_matches,
    compose_ok,
    first,
    fixture,
    read_model,
    submit,
    verdict,
)


@pytest.fixture(scope="module")
def control_flow():
    result = compose_ok(fixture("control_flow"))
    return result, submit(fixture("control_flow"), first(result).source, label="control_flow")


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, groups=1)
        self.bn = nn.BatchNorm2d(4)
        self.ln = nn.LayerNorm(5)
        self.gn = nn.GroupNorm(2, 4)
        self.fc = nn.Linear(5, 2)

    def forward(self, x):
        if x.dim() == 4:  # torch.fx could trace this one, the test reads it at the ATen level on purpose
            y = self.bn(self.conv(x))
        z = F.max_pool2d(y, 2, ceil_mode=True)
        return (self.fc(self.ln(y)).softmax(-1), self.gn(y) * 2, z.sum(dim=(2, 3)), F.avg_pool2d(y, 2),
                F.adaptive_avg_pool2d(y, 1), y.var(dim=1), torch.logsumexp(y, dim=-1), y[:, 1:3, :, ::2].half())


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_aten_reading_matches(mode):
    torch.manual_seed(0)
    model = Mixed().train() if mode == "train" else Mixed().eval()
    assert_ir_matches(model, [torch.randn(2, 3, 4, 5)], aten=True, atol=1e-3)


def test_aten_training_dropout_is_unsupported():
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5)).train()
    with pytest.raises(ReadFailed) as info:
        read_model(model, [torch.randn(2, 3)], aten=True)
    assert "dropout (training mode)" in info.value.unsupported


def test_control_flow_problem_is_composed_from_the_aten_trace(control_flow):
    result, future = control_flow
    assert any("dispatch-level" in note for note in result.notes)
    assert "aten trace" in first(result).source
    verdict(future)


def test_aten_cross_entropy_reads_exactly():
    class M(nn.Module):
        def forward(self, logits, target):
            return F.cross_entropy(logits, target), F.nll_loss(logits.log_softmax(1), target, reduction="none")

    assert_ir_matches(M(), [torch.randn(6, 5), torch.tensor([0, 4, 2, 2, 1, 3])], aten=True)
