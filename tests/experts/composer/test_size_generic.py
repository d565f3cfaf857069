"""The composer's candidates hold at every size set of a problem, not only the one composed at: composed at one
set of small sizes, each is judged by the real evaluator at another (other batch, odd spatial sizes, other
channel, feature and group counts, other values of the numbers the module holds). A candidate built for some
sizes only says so when it runs at others."""

from pathlib import Path

import pytest

from kfoundry.experts.tunables import apply_values, find_tunables
from tests.experts.composer.helpers import compose_ok, first, fixture, submit, verdict

REPO = Path(__file__).resolve().parents[3]

# (problem, sizes composed at, sizes judged at); convolutions with few input channels per group, whose kernels
# use no reduced-precision dot (the CPU judges fp32 at 1e-4)
CASES = {
    "groupnorm_after_conv": ("suite/17_conv2d_groupnorm",
                             {"batch_size": 2, "in_channels": 3, "out_channels": 8, "height": 6, "width": 6,
                              "num_groups": 2},
                             {"batch_size": 3, "in_channels": 2, "out_channels": 12, "height": 5, "width": 7,
                              "num_groups": 4}),  # 3 channels a group, not 4: the moments kernel's rows
    "gemm_epilogue_scale_from_sizes": ("suite/15_matmul_scale_clamp",
                                       {"batch_size": 4, "in_features": 32, "out_features": 16},
                                       {"batch_size": 5, "in_features": 24, "out_features": 40}),
    "attention_softmax": ("suite/9_attention_scores", {"batch_heads": 2, "seq_len": 8, "head_dim": 16},
                          {"batch_heads": 3, "seq_len": 11, "head_dim": 8}),
    "maxpool": ("suite/23_affine_relu_maxpool2d", {"batch_size": 2, "in_channels": 4, "height": 8, "width": 8},
                {"batch_size": 3, "in_channels": 6, "height": 9, "width": 11}),
    "windows_mean": ("coverage/9_unfold_patches", {"batch_size": 2, "channels": 4, "size": 8},
                     {"batch_size": 3, "channels": 3, "size": 14}),
    "linear_groupnorm": ("gemm_suite/4_linear_groupnorm_hardtanh",
                         {"batch_size": 4, "in_features": 16, "out_features": 32, "groups": 4},
                         {"batch_size": 5, "in_features": 24, "out_features": 48, "groups": 8}),
    "depthwise_conv": ("suite/22_depthwise_conv2d_relu6", {"batch_size": 2, "in_channels": 4, "height": 6, "width": 6},
                       {"batch_size": 3, "in_channels": 3, "height": 5, "width": 7}),  # fewer groups, fewer programs
    "transposed_conv": ("suite/19_conv_transpose2d_bias_clamp",
                        {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 4, "width": 4},
                        {"batch_size": 3, "in_channels": 2, "out_channels": 6, "height": 3, "width": 5}),
    "gru_last_state": ("coverage/13_gru_last_state",
                       {"batch_size": 2, "steps": 3, "input_size": 8, "hidden_size": 8},
                       {"batch_size": 3, "steps": 4, "input_size": 4, "hidden_size": 16}),
}

UNRELATED_ROWS = '''
import torch
from torch import nn

batch_size = 4
n = 16
m = 16


class Model(nn.Module):
    def forward(self, x, y):
        return x.softmax(-1), y.sum(-1), torch.sigmoid(y)


def get_inputs():
    return [torch.randn(batch_size, n), torch.randn(batch_size, m)]


def get_init_inputs():
    return []
'''


def _problem(name: str) -> Path:
    return REPO / "benchmarks" / f"{name}.py"


# composed in the main process, judged two at a time in the background: at other sizes, for their correctness,
# without the guard's extra runs (helpers.py: none of them changes a size)
@pytest.fixture(scope="module")
def judged():
    found = {}
    for case, (name, composed_at, judged_at) in CASES.items():
        candidate = first(compose_ok(_problem(name), set_values=composed_at, max_variants=1))
        found[case] = (candidate, submit(_problem(name), candidate.source, set_values=judged_at, label=case,
                                         guard_runs=False))
    return found


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_candidate_composed_at_one_size_set_passes_the_evaluator_at_another(judged, case):
    verdict(judged[case][1])


def test_the_group_layout_is_read_from_the_module_and_the_tensors_when_forward_runs(judged):
    candidate = judged["groupnorm_after_conv"][0]
    assert candidate.name.endswith("_moments")  # the norm's moments gathered in the conv epilogue
    source = candidate.source
    assert "norm_num_groups = self.norm.num_groups" in source
    assert "channels_per_group = " in source and "// norm_num_groups" in source
    assert "reshape(2, 4" not in source and "reshape(batch, 2, 4" not in source


def test_unrelated_tensors_of_equal_sizes_are_not_one_kernel(tmp_path):
    path = tmp_path / "unrelated_rows.py"
    path.write_text(UNRELATED_ROWS)
    result = compose_ok(path, max_variants=1)
    # n == m here only: x's rows and y's are not walked together (y's sum and sigmoid are)
    assert "of 2 kernel(s)" in result.message and "row kernel (sum, sigmoid)" in result.message
    verdict(submit(path, first(result).source, set_values={"n": 9, "m": 21}))


def test_a_candidate_built_for_some_sizes_only_raises_naming_them():
    # a Python loop of pointwise steps: the trace unrolls it into one kernel (not rolled: nothing but pointwise
    # ops repeat), which holds for 3 steps only
    path = fixture("pointwise_steps")
    source = first(compose_ok(path, max_variants=1)).source
    evaluation = submit(path, source, set_values={"steps": 4}).result()
    assert evaluation.status == "runtime_error"
    assert "ValueError" in evaluation.message and "only supports the sizes it was composed for" in evaluation.message
    assert "x.shape[1] = 4 (composed for 3)" in evaluation.message


def test_the_tuner_rewrites_tiles_and_never_a_size(judged):
    # the depthwise convolution's BN is 2 here: the 1 of its output size `x.shape[2] - 1 + 1` spells BN - 1
    source = judged["depthwise_conv"][0].source
    tunables = find_tunables(source)
    tuned = apply_values(source, tunables, {t.name: next(c for c in t.choices if c != t.value) for t in tunables})
    assert tuned is not None and tuned != source

    def sizes(text: str) -> list[str]:
        return [line for line in text.splitlines() if "torch.empty(" in line or "_composed_for(" in line]

    assert sizes(tuned) == sizes(source)
