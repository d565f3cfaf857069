"""Pooling before the store: a convolution whose output reaches a max or average pooling through ops that are
monotone (max) or affine (average) in it, their other operands the same over a window, stores each window's
extrema or mean instead of its output; each variant judged ok at 1e-4 by the real evaluator, with and without a
norm's moments gathered in the same epilogue. Tails of other kinds keep the plain plan."""

from pathlib import Path

import pytest

from kfoundry.experts.composer.plan.conv_statistics import with_conv_statistics
from kfoundry.experts.composer.plan.fusion import plan
from kfoundry.experts.composer.plan.window_store import with_pooling_before_store
from tests.experts.composer.helpers import TF32_LEVEL, compose_then_judge, conv_norm_problem, retiled, verdict
from tests.experts.composer.plan.test_rolling import _graph

CONV2D = {"conv": "nn.Conv2d(8, 8, 3)", "d": "2", "ln": "8", "input": "2, 8, 10, 10", "field": "8, 8"}  # 8 x 8 out
CASES = {
    # (sizes, tail, what the conv stores per window, the norm's moments gathered too)
    "groupnorm_signed_scale_maxpool": (CONV2D, "torch.clamp(F.max_pool2d(self.gn(y) * self.scale, 2), 0.0, 1.0)",
                                       "max and min", True),
    # a 9 x 9 output in 2 x 2 windows: the last row and column are in none, and the moments still need them
    "groupnorm_positions_outside_windows": (dict(CONV2D, input="2, 8, 11, 11"),
                                            "F.max_pool2d(self.gn(y) * self.scale, 2)", "max and min", True),
    "conv3d_instancenorm_outside_windows": (dict(CONV2D, conv="nn.Conv3d(8, 8, 3, padding=1)", input="2, 8, 3, 5, 4",
                                                 d="3", field="3, 5, 4"),
                                            "F.avg_pool3d(self.inorm(y), 2)", "mean", True),
    "relu_maxpool_odd_sizes": (dict(CONV2D, conv="nn.Conv2d(8, 8, 3, padding=1)", input="2, 8, 11, 12"),
                               "F.hardswish(F.max_pool2d(torch.relu(y), 2))", "max", False),
    "instancenorm_avgpool": (CONV2D, "torch.relu(F.avg_pool2d(self.inorm(y), 2))", "mean", True),
    "window_of_9": (dict(CONV2D, input="2, 8, 11, 11"), "F.max_pool2d(torch.tanh(y), 3) * 2.0", "max", False),
    "transposed_batchnorm_tanh": (dict(CONV2D, conv="nn.ConvTranspose2d(8, 8, 3, stride=2, padding=1, output_padding=1)",
                                       input="2, 8, 5, 5"),
                                  "F.max_pool2d(torch.tanh(self.bn(y)), 2)", "max and min", True),
    # a 9 x 9 output (no output padding): the windows leave the last row and column of phase 0 to the moments
    "transposed_odd_size_batchnorm": (dict(CONV2D, conv="nn.ConvTranspose2d(8, 8, 3, stride=2, padding=1)",
                                           input="2, 8, 5, 5"),
                                      "F.max_pool2d(torch.tanh(self.bn(y)), 2)", "max and min", True),
    "transposed3d_avgpool": (dict(CONV2D, conv="nn.ConvTranspose3d(8, 8, 3, stride=2, padding=1, output_padding=1)",
                                  input="2, 8, 2, 3, 3", d="3"),
                             "torch.tanh(F.avg_pool3d(y, 2) * 0.5 - 0.1)", "mean", False),
    # groups == in_channels (depthwise, two output channels each): half the programs of groups=8
    "depthwise_groupnorm": (dict(CONV2D, conv="nn.Conv2d(4, 8, 3, groups=4)", input="2, 4, 10, 10"),
                            "F.max_pool2d(torch.sigmoid(self.gn(y)), 4)", "max and min", True),
    "conv3d_avgpool": (dict(CONV2D, conv="nn.Conv3d(8, 8, 3, padding=1)", input="2, 8, 4, 6, 6", d="3"),
                       "torch.tanh(F.avg_pool3d(y, 2) * 0.5 - 0.1)", "mean", False),
    "conv3d_pool_of_last_two_dims": (dict(CONV2D, conv="nn.Conv3d(8, 8, 3, padding=1)", input="2, 8, 3, 6, 6", d="3"),
                                     "F.max_pool3d(y, (1, 2, 2))", "max", False),
}


# judged without the guard's extra runs (helpers.py), for their correctness: the cases with the longest evaluations
# (3D convolutions, and the one judged retiled too); the others, each a template family's, with them
CORRECTNESS_ONLY = {"conv3d_avgpool", "conv3d_pool_of_last_two_dims", "groupnorm_positions_outside_windows"}


def _problem(tmp_path: Path, case: str) -> Path:
    sizes, tail, _, _ = CASES[case]
    return conv_norm_problem(tmp_path / f"{case}.py", dict(sizes, tail=tail))


def _accurate(candidate) -> bool:
    return not any(config.get("precision") in TF32_LEVEL for config in candidate.config.values())


RETILED = (32, 256)  # groupnorm_positions_outside_windows' 81 positions a sample: three tiles of 32 rows, one of 256


def _pooled(result) -> list:
    return [c for c in result.candidates if "_pooled" in c.name]


def _judged_sources(case: str, result) -> list[str]:
    """The first fp32-accurate pooled variant; for groupnorm_positions_outside_windows retiled too (a tuned BM
    still holds whole windows and whole moments)."""
    candidate = next((c for c in _pooled(result) if _accurate(c)), None)
    if candidate is None:
        return []
    source = candidate.source
    tiles = [retiled(source, bm) for bm in RETILED] if case == "groupnorm_positions_outside_windows" else []
    return [source, *tiles]


@pytest.fixture(scope="module")
def composed(tmp_path_factory):
    """Each case composed in the main process, its sources judged in the background (two cases at a time)."""
    folder = tmp_path_factory.mktemp("window_store")
    # a norm puts the fp32-accurate tiles first (plan/amplification.py): 4 variants hold an accurate pooled one
    # and a plain one; without a norm the first accurate pooled variant is the 9th (fp16 and TF32 copies lead)
    return compose_then_judge({case: _problem(folder, case) for case in sorted(CASES)}, _judged_sources,
                              max_variants=lambda case: 4 if CASES[case][3] else 12,
                              guard_runs=lambda case: case not in CORRECTNESS_ONLY)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_conv_stores_each_pooling_window(composed, case):
    result, judged = composed[case]
    _, _, stored, gathered = CASES[case]
    assert result.candidates and not result.unsupported, f"{case}: {result.message} {result.notes}"
    pooled = _pooled(result)
    assert pooled and any("_pooled" not in c.name for c in result.candidates), [c.name for c in result.candidates]
    assert f"window's {stored}" in result.message and "of the stored windows" in result.message
    assert all(("_moments" in c.name) == gathered for c in pooled)
    candidate = next(c for c in pooled if _accurate(c))
    source = candidate.source
    assert "_window_" in source
    if "transposed" in case:  # pooling windows of the stride: one output of each phase, all in one program
        assert candidate.config["conv_0"]["layout"] == "phases" and "for phase in tl.static_range(" in source
    else:  # a tile's rows window by window
        assert "tl.reshape(" in source
    sources = _judged_sources(case, result)
    assert sources[0] == source
    if case == "groupnorm_positions_outside_windows":
        assert "BM=BM, " in source  # the copies changed the host constant of the launch and the moments' slots
        assert len(sources) == 1 + len(RETILED) and source not in sources[1:]  # neither is the default tile
    evaluations = judged.result()
    assert len(evaluations) == len(sources)
    for evaluation in evaluations:
        verdict(evaluation)


@pytest.mark.parametrize("tail", [  # the norm keeps the ops after it out of the conv's epilogue
    "F.max_pool2d(F.gelu(self.gn(y)), 2)",  # not monotone
    "F.avg_pool2d(torch.relu(self.gn(y)), 2)",  # not affine
    "F.max_pool2d(self.gn(y), 3, 2, 1)",  # overlapping, padded windows
    "F.max_pool2d(self.gn(y), 2) + y[:, :, ::2, ::2]",  # the conv output is read again
    "F.max_pool2d(self.gn(y) + self.field, 2)",  # an operand that changes within a window
    "F.max_pool2d(self.gn(y) * torch.sigmoid(self.gn(y)), 2)",  # the chain twice in one op
])
def test_other_tails_keep_the_plain_plan(tmp_path, tail):
    path = conv_norm_problem(tmp_path / "problem.py", dict(CONV2D, tail=tail))
    the_plan = plan(_graph(path))
    assert with_pooling_before_store(the_plan) is None
    gathered = with_conv_statistics(the_plan)
    assert gathered is None or with_pooling_before_store(gathered) is None


def test_the_given_plan_is_left_as_it_was(tmp_path):
    path = _problem(tmp_path, "groupnorm_signed_scale_maxpool")
    gathered = with_conv_statistics(plan(_graph(path)))
    before = gathered.describe()
    pooled = with_pooling_before_store(gathered)
    assert pooled is not None and gathered.describe() == before
    assert [g.kind for g in pooled.groups] == ["conv", "moments", "pool"]
    assert [g.kind for g in gathered.groups] == ["conv", "moments", "pointwise", "pool"]
    assert all(g.windows is None for g in gathered.groups)
