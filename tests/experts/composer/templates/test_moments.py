"""The moments kernel's configurations: the wide one first where a norm has few rows (each row one program)."""

from kfoundry.experts.composer.plan.conv_statistics import with_conv_statistics
from kfoundry.experts.composer.plan.fusion import plan
from kfoundry.experts.composer.templates.moments import CONFIGS, FEW_ROWS, WIDE, configs
from tests.experts.composer.helpers import conv_norm_problem
from tests.experts.composer.plan.test_conv_statistics import CONV2D
from tests.experts.composer.plan.test_rolling import _graph


def _moments_group(tmp_path, batch: int, tail: str):
    path = conv_norm_problem(tmp_path / f"problem_{batch}.py",
                             dict(CONV2D, input=f"{batch}, 2, 20, 20", tail=tail))
    fused = with_conv_statistics(plan(_graph(path)))
    return next(g for g in fused.groups if g.kind == "moments")


def test_few_rows_read_with_the_wide_block_first(tmp_path):
    # BatchNorm: one row per channel (8); InstanceNorm at batch 2: 16 rows
    for tail in ("torch.tanh(self.bn(y))", "self.inorm(torch.relu(y))"):
        assert configs(_moments_group(tmp_path, 2, tail)) == [WIDE] + CONFIGS


def test_many_rows_keep_one_program_each_at_the_usual_block(tmp_path):
    batch = FEW_ROWS // 8  # InstanceNorm over 8 channels: FEW_ROWS rows
    assert configs(_moments_group(tmp_path, batch, "self.inorm(torch.relu(y))")) == CONFIGS
