"""kfoundry.size_sets: the second size set of the generalisation check, derived from a problem's constants."""

import pytest

from kfoundry.errors import UsageError
from kfoundry.size_sets import derive_other_sizes, given_sizes, size_constants
from tests.optimize.helpers import AFFINE

GROUPED = '''
import torch
from torch import nn

batch_size = 4
in_channels = 8
out_channels = 16
height = width = 12
kernel_size = 3
num_groups = 8  # must divide out_channels
eps = 1e-5


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups, eps):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)
        self.norm = nn.GroupNorm(num_groups, out_channels, eps=eps)

    def forward(self, x):
        return self.norm(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups, eps]
'''


def test_the_sizes_a_verdict_was_given_at_are_the_literal_int_constants_with_the_overrides():
    assert size_constants(AFFINE, {}) == {"batch_size": 4, "dim": 250}
    assert size_constants(AFFINE, {"dim": 64}) == {"batch_size": 4, "dim": 64}


def test_batch_one_less_spatial_odd_and_channels_three_quarters_structure_kept(tmp_path):
    problem = tmp_path / "conv_groupnorm.py"
    problem.write_text(GROUPED)
    second = derive_other_sizes(problem, {})
    # 16 channels in 8 groups: three quarters (12) no longer divides, half (8) does; kernel and groups stay
    assert second.changes == {"batch_size": (4, 3), "in_channels": (8, 4), "out_channels": (16, 8),
                              "height": (12, 11), "width": (12, 11)}
    assert second.values == {name: new for name, (_, new) in second.changes.items()}
    assert "batch_size 4->3" in second.text()


def test_the_run_s_own_overrides_are_the_base_of_the_second_set(tmp_path):
    problem = tmp_path / "conv_groupnorm.py"
    problem.write_text(GROUPED)
    second = derive_other_sizes(problem, {"batch_size": 2, "height": 9, "width": 9})
    assert second.changes["batch_size"] == (2, 1) and second.changes["height"] == (9, 7)


def test_a_problem_with_no_size_constant_says_so(tmp_path):
    problem = tmp_path / "fixed.py"
    problem.write_text(GROUPED.replace("batch_size = 4\nin_channels = 8\nout_channels = 16\nheight = width = 12\n",
                                       "").replace("torch.randn(batch_size, in_channels, height, width)",
                                                   "torch.randn(4, 8, 12, 12)")
                       .replace("return [in_channels, out_channels,", "return [8, 16,"))
    reason = derive_other_sizes(problem, {})
    assert isinstance(reason, str) and "--check-set" in reason


def test_a_second_set_by_hand_names_what_changed_and_refuses_unknown_names():
    second = given_sizes(AFFINE, {"dim": 64}, {"dim": 33, "batch_size": 4})
    assert second.changes == {"dim": (64, 33)} and second.values == {"dim": 33, "batch_size": 4}
    with pytest.raises(UsageError, match="no module-level constant 'rows'"):
        derive_other_sizes(AFFINE, {"rows": 3})
