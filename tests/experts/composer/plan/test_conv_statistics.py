"""A norm's statistics gathered in the epilogue of the convolution before it: every norm whose rows are whole
channels (GroupNorm, InstanceNorm, LayerNorm, BatchNorm in training mode) after 2-d, 3-d, transposed and
depthwise convolutions, each variant judged ok at 1e-4 by the real evaluator; norms of other shapes keep their
row kernel."""

from pathlib import Path

import pytest

from kfoundry.experts.composer.plan.conv_statistics import with_conv_statistics
from kfoundry.experts.composer.plan.fusion import plan
from tests.experts.composer.helpers import compose_then_judge, conv_norm_problem, retiled, verdict
from tests.experts.composer.plan.test_rolling import _graph

# two input channels: the conv's loop over them, at half the interpreted work of four
CONV2D = {"conv": "nn.Conv2d(2, 8, 3)", "d": "2", "ln": "[8, 18, 18]", "input": "2, 2, 20, 20", "field": "18, 18"}
CASES = {
    # 324 positions a sample: two tiles of the default 256 rows (three of 128 retiled), the last one partly empty
    "groupnorm": (CONV2D, "torch.relu(self.gn(y)) * 1.5"),
    "batchnorm_training": (CONV2D, "torch.tanh(self.bn(y))"),
    "instancenorm": (CONV2D, "self.inorm(torch.relu(y))"),
    "layernorm": (CONV2D, "self.ln(y)"),
    "unbiased_std": (CONV2D, "(y - y.mean(dim=(2, 3), keepdim=True)) / y.std(dim=(2, 3), keepdim=True)"),
    "one_sample": (dict(CONV2D, input="1, 2, 20, 20"), "self.gn(y)"),
    "transposed_phases": ({"conv": "nn.ConvTranspose2d(8, 8, 3, stride=2, padding=1)", "d": "2",
                           "ln": "[8, 17, 17]", "input": "2, 8, 9, 9"}, "self.gn(y)"),
    "conv3d": ({"conv": "nn.Conv3d(2, 8, 3)", "d": "3", "ln": "[8, 4, 4, 4]", "input": "2, 2, 6, 6, 6"},
               "self.bn(y) + 1.0"),
    # groups == in_channels (a depthwise conv, two output channels per input channel): a norm group spans conv
    # groups, at half the programs of groups=8
    "depthwise": ({"conv": "nn.Conv2d(4, 8, 3, groups=4)", "d": "2", "ln": "[8, 18, 18]", "input": "2, 4, 20, 20"},
                  "torch.nn.functional.silu(self.gn(y))"),
    # the norm's apply runs in the row kernel of the max over channels after it (APPLIED_IN_ROW)
    "batchnorm_channel_max": (CONV2D, "torch.sigmoid(torch.amax(self.bn(y), dim=1))"),
    # and in the mean over all but the batch after GroupNorm's view back to (N, C, H, W): the mean reads the
    # grouped view instead (fusion.reductions_through_views)
    "groupnorm_mean": (CONV2D, "self.gn(y).mean(dim=(1, 2, 3))"),
}
APPLIED_IN_ROW = {"batchnorm_channel_max", "groupnorm_mean"}


# judged with the guard's every run; the other cases (each judged as two variants or more) for their correctness,
# without the extra runs (helpers.py)
GUARDED = {"layernorm", "one_sample"}


def _problem(tmp_path: Path, case: str) -> Path:
    sizes, tail = CASES[case]
    return conv_norm_problem(tmp_path / f"{case}.py", dict(CONV2D, **sizes, tail=tail))


RETILED = (128, 512)  # groupnorm's conv BM retiled: three tiles a sample (the last partly empty), and one


def _kinds(result) -> tuple[list, list]:
    """The variants gathering the norm's moments in the conv's epilogue, and the plain ones."""
    gathered = [c for c in result.candidates if c.name.endswith("_moments") or "_moments_" in c.name]
    return gathered, [c for c in result.candidates if c not in gathered]


def _judged_sources(case: str, result) -> list[str]:
    """The first variant of each kind; for groupnorm the first gathering one retiled too (as the tuner retiles it:
    the launch and the moments' slots take the one host constant; the moments must still add up)."""
    gathered, plain = _kinds(result)
    if not (gathered and plain):
        return []
    source = gathered[0].source
    tiles = [retiled(source, bm) for bm in RETILED] if case == "groupnorm" else []
    return [source, plain[0].source, *tiles]


@pytest.fixture(scope="module")
def composed(tmp_path_factory):
    """Each case composed in the main process, its sources judged in the background (two cases at a time)."""
    folder = tmp_path_factory.mktemp("conv_statistics")
    return compose_then_judge({case: _problem(folder, case) for case in sorted(CASES)}, _judged_sources,
                              guard_runs=lambda case: case in GUARDED)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_conv_epilogue_gathers_the_norms_moments(composed, case):
    result, judged = composed[case]
    assert result.candidates and not result.unsupported, f"{case}: {result.message} {result.notes}"
    gathered, plain = _kinds(result)
    assert gathered and plain, [c.name for c in result.candidates]  # both kinds of variant, in turn
    assert "moments kernel" in result.message and "gathering the norm's moments" in result.message
    source = gathered[0].source
    assert "tile_m2" in source
    if case in APPLIED_IN_ROW:  # the normalised tensor is never written: one row kernel applies the norm and reduces
        assert "def _pointwise_" not in source and source.count("def _row_") == 1
        row = source.split("def _row_")[1].split("@triton.jit")[0]
        assert "rsqrt" in row and ("tl.max(" in row if "max" in case else "tl.sum(" in row)
    else:
        assert "def _row_" not in source  # the norm's pass over the conv output is gone
    sources = _judged_sources(case, result)
    assert sources[:2] == [source, plain[0].source]
    if case == "groupnorm":
        # one host constant sets the launch's BM and the moments' slots (a slot per tile of the launch)
        bm = gathered[0].config["conv_0"]["BM"]
        assert f"        BM = {bm}\n" in source and "BM=BM, " in source and ", BM)\n" in source
        assert len(sources) == 2 + len(RETILED) and source not in sources[2:]  # neither is the default tile
    evaluations = judged.result()
    assert len(evaluations) == len(sources)
    for evaluation in evaluations:
        verdict(evaluation)


@pytest.mark.parametrize("tail", [
    "(y - y.mean(dim=1, keepdim=True)) / y.std(dim=1, keepdim=True)",  # rows are positions, not channels
    "self.gn(torch.cat([x, x], dim=1)[:, :, 1:-1, 1:-1]) + y",  # the norm reads no convolution's output
    # rows of half a channel each
    "(y.reshape(2, 16, 162) - y.reshape(2, 16, 162).mean(dim=2, keepdim=True)).reshape(2, 8, 18, 18)",
])
def test_norms_of_other_rows_keep_their_row_kernel(tmp_path, tail):
    # four input channels: the cat of x with itself is as wide as the conv output (plans only, nothing is run)
    path = conv_norm_problem(tmp_path / "problem.py", dict(CONV2D, conv="nn.Conv2d(4, 8, 3)", input="2, 4, 20, 20",
                                                           tail=tail))
    assert with_conv_statistics(plan(_graph(path))) is None


def test_the_plain_plan_is_left_as_it_was(tmp_path):
    path = _problem(tmp_path, "groupnorm")
    the_plan = plan(_graph(path))
    before = the_plan.describe()
    places = [(step.index, getattr(step, "name", None)) for step in the_plan.steps]
    fused = with_conv_statistics(the_plan)
    assert fused is not None and fused.describe() != before
    assert the_plan.describe() == before
    assert [(step.index, getattr(step, "name", None)) for step in the_plan.steps] == places
    assert [g.kind for g in fused.groups] == ["conv", "moments", "pointwise"]
