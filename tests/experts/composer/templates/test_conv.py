"""The convolution template: Conv2d / Conv3d / ConvTranspose2d/3d as implicit GEMMs with fused epilogues, in each
of its loop layouts (channels-last, output phases of a transposed convolution, multiply-adds, the direct gather)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.experts.composer.helpers import (
    EXAMPLE_SIZES,
    check_variants,
    compose_ok,
    example,
    first,
    first_exact,
    fixture,
    submit,
    verdict,
)

REPO = Path(__file__).resolve().parents[4]

# (problem, sizes): a fixture is composed and judged at its sizes, an example composed at full size and judged at
# them; fewer channels or positions than a fixture's own where the interpreter would run many taps or tiles
# judged with the guard's every run; the other cases' candidates (several times their interpreted time) for their
# correctness, without the extra runs (helpers.py)
GUARDED = {"conv2d_relu", "example"}
CASES = {
    "conv2d_relu": (fixture("conv2d_relu"), {}),
    # two input channels (one a group for the transposed conv's two groups): the 3x3x3 loop over them halves
    "conv3d_transpose": (fixture("conv3d_transpose"), {"channels": 2}),
    "example": (example("conv_relu"), EXAMPLE_SIZES["conv_relu"]),
    # grouped, dilated, strided, a strided input; 3D, of depth 2: two tiles of 128 positions a sample, not four
    "channels_last": (fixture("conv_channels_last"), {"depth": 2}),
    "phases_depthwise": (fixture("conv_phases_depthwise"), {}),  # transposed 2D and 3D; depthwise
    "depthwise_silu": (fixture("conv_depthwise_silu"), {}),  # one output channel a group: tiles one channel wide
}


@pytest.fixture(scope="module")
def composed():
    out = {}
    for name, (problem, sizes) in CASES.items():
        # every variant (the channels-last fixture's last is the direct gather), the first at fp32 accuracy judged
        # (TF32-level variants miss 1e-4 on the CPU as on a GPU); examples: composed at full size, evaluated small
        result = compose_ok(problem, set_values=None if name == "example" else sizes, max_variants=9)
        out[name] = (result, submit(problem, first_exact(result).source, sizes, label=name,
                                    guard_runs=name in GUARDED))
    return out


def test_one_kernel_with_the_epilogue(composed):
    for name in CASES:
        result, _ = composed[name]
        candidate = first(result)
        assert candidate.name.startswith("conv_implicit_gemm_"), candidate.name
        assert "def _pointwise" not in candidate.source  # the epilogue holds the bias and activations
        check_variants(result)
    softmax = first(composed["conv2d_relu"][0])
    assert "bnfull" in softmax.name and "tl.max(tl.where(n_ok, " in softmax.source  # softmax over channels, fused
    both = first(composed["conv3d_transpose"][0]).source
    deconv = both.split("def _conv_transpose2d_hardtanh_1_kernel")[1]
    assert "% 2 == 0" in deconv  # the stride-2 gather of a transposed convolution
    # one grid column per group, the module's group count read when forward runs
    assert "_conv_transpose2d_hardtanh_1_kernel[lambda META: (triton.cdiv(" in both and ", deconv_groups)](" in both
    assert "deconv_groups = self.deconv.groups" in both


@pytest.mark.parametrize("name", sorted(CASES))
def test_conv_candidates_pass_the_evaluator(composed, name):
    verdict(composed[name][1])


def test_fp16_copies_first_then_tf32_then_tf32x3_for_convolutions(composed):
    result, _ = composed["channels_last"]
    precisions = [c.config["conv_0"]["precision"] for c in result.candidates]
    # cuDNN computes these in TF32 by PyTorch's default: TF32's rounding on fp16 copies leads, then TF32 itself,
    # then TF32x3 should TF32's error be too large
    assert precisions[:5] == ["fp16", "fp16", "fp16", "tf32", "tf32x3"]
    half = first(result).source
    assert "_channels_last_half(" in half and "acc = acc * (1.0 / (tl.load(" in half and "DOT_PRECISION" not in half
    assert "tf32=True" in result.candidates[3].source and "= _channels_last_half(" not in result.candidates[3].source
    assert "tf32=True" not in result.candidates[4].source and "= _channels_last_half(" not in result.candidates[4].source
    assert [c.config["conv_0"]["BK"] for c in result.candidates[:2]] == [32, 64]


def test_channels_last_variants_where_the_loop_fits(composed):
    result, _ = composed["channels_last"]
    layouts = [[config["layout"] for config in c.config.values()] for c in result.candidates]
    assert layouts[:4] == [["channels_last"] * 2] * 4 and layouts[-1] == ["direct"] * 2
    source = first(result).source
    assert "def _channels_last(" in source and "x_cl = _channels_last" not in source  # the input is a view
    assert "transpose_cl, transpose_cl_scale = _channels_last_half(transpose)" in source
    assert "v_cl, v_cl_scale = _channels_last_half(v)" in source
    tf32 = result.candidates[3].source
    assert "transpose_cl = _channels_last(transpose, tf32=True)" in tf32 and "v_cl = _channels_last(v, tf32=True)" in tf32
    assert " // " not in source.split("for it in range(")[1].split("kc = ")[0].replace("tap = it // chunks", "")
    # BN no wider than the output channels of a group need: 6 a group here, 16 the dot's minimum
    assert all(c.config["conv_0"]["BN"] == 16 for c in result.candidates)
    # few input channels per group take the multiply-add loop
    assert {c.config["conv_0"]["layout"] for c in composed["conv2d_relu"][0].candidates} == {"fma"}
    assert {c.config["conv_1"]["layout"] for c in composed["conv3d_transpose"][0].candidates} == {"fma"}


def test_the_direct_variant_of_a_channels_last_problem_passes_too(composed):
    result, _ = composed["channels_last"]
    direct = result.candidates[-1]
    assert direct.config["conv_0"]["layout"] == "direct" and direct.config["conv_0"]["precision"] == "tf32"
    # its TF32 dots: judged at a tolerance TF32's rounding meets (at 1e-4 it fails, on a CPU as on a GPU)
    problem, sizes = CASES["channels_last"]
    verdict(submit(problem, direct.source, sizes, label="channels_last_direct", tolerance=1e-2, guard_runs=False))


def test_transposed_convolutions_run_by_output_phase(composed):
    result, _ = composed["phases_depthwise"]
    names = ("conv_0", "conv_1", "conv_2", "conv_3")
    layouts = {name: {c.config[name]["layout"] for c in result.candidates[:4]} for name in names}
    assert layouts == {"conv_0": {"phases"}, "conv_1": {"phases"}, "conv_2": {"fma"}, "conv_3": {"phases"}}
    source = first(result).source
    up = source.split("def _conv_transpose2d_clamp_0_kernel")[1].split("@triton.jit")[0]
    # the four phases of a tile in adjacent programs, so that their interleaved stores meet in the L2
    assert "phase = tl.program_id(0) % 4" in up and "pid = tl.program_id(0) // 4" in up
    assert "pid_g = tl.program_id(1)\n" in up
    assert "% 2 == 0" not in up  # no tap is loaded only to be masked away by the stride
    assert "_channels_last_half(up_weight.transpose(0, 1))" in source
    assert 'META["BN"]) * 4, up_groups)](' in source  # four phases a tile; a grid column per group
    up3d = source.split("def _conv_transpose3d_add_1_kernel")[1].split("@triton.jit")[0]
    assert "phase = tl.program_id(0) % 6" in up3d
    same = source.split("def _conv_transpose2d_tanh_3_kernel")[1].split("class ModelNew")[0]
    assert "phase = 0" in same and "program_id(0) %" not in same  # stride 1: one phase, a program per tile
    depthwise = source.split("def _conv2d_relu6_2_kernel")[1].split("@triton.jit")[0]
    assert "tl.dot" not in depthwise and depthwise.count("acc += ") == 9  # the 3x3 taps, unrolled
    assert "BM=256, BN=2," in source  # its two output channels a group


def test_a_depthwise_conv_of_one_channel_a_group_takes_tiles_one_channel_wide(composed):
    """Not two with one masked away: half the multiply-adds, and no layout change of each tap's input column
    through shared memory (conv_suite 23 compiled for sm_90: 736 -> 560 instructions, 49 barriers -> 0)."""
    result, _ = composed["depthwise_silu"]
    assert {c.config["conv_0"]["layout"] for c in result.candidates} == {"fma"}
    assert all(c.config["conv_0"]["BN"] == 1 for c in result.candidates)
    assert first(result).source.count("acc += ") == 25


def test_the_epilogue_writes_a_samples_positions_as_one_aligned_run(composed):
    """A row's output position is one coordinate of the epilogue, and ALIGN (4 where the positions and the other
    strides divide by 4) tells Triton that runs of 4 rows are one sample's, aligned: it then stores 16 bytes a
    lane (STG.E.128 on sm_90, benchmarks/sass_offline.py). Not where the rows are pooling windows or the phases
    of a stride > 1. Both ALIGN cases are judged above: conv2d_relu's 5 x 4 positions (4), channels_last's 6 x 9
    and 2 x 9 x 11 (1)."""
    plain = first(composed["conv2d_relu"][0]).source
    assert "flat_sample = ((rm // ALIGN) * ALIGN) // ((positions // ALIGN) * ALIGN)" in plain
    assert "m_in = rm < (M // ALIGN) * ALIGN" in plain
    assert "+ flat_position[:, None] * mul_s3" in plain and "mul_s2" not in plain  # H and W read as one
    assert "align = _whole_fours(mul.shape[2] * mul.shape[3], mul.stride(0), mul.stride(1)," in plain
    source = first(composed["phases_depthwise"][0]).source
    same = source.split("def _conv_transpose2d_tanh_3_kernel")[1].split("@triton.jit")[0]
    assert "flat_position" in same and "< out_size" not in same  # stride 1: every row an output position
    up = source.split("def _conv_transpose2d_clamp_0_kernel")[1].split("@triton.jit")[0]
    assert "flat_position" not in up and "ALIGN" not in up  # stride 2: a tile's rows are every other position


STEM = '''import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(2, 3, 32, 32)]


def get_init_inputs():
    return []
'''


def test_a_wide_multiply_add_tile_keeps_its_accumulator_in_registers(tmp_path):
    """ResNet's stem (3 input channels, 64 output channels, 7 x 7 taps) compiled for sm_90 (benchmarks/
    sass_offline.py): its 256 x 64 multiply-add tile must not spill. Loading each tap's input column as a
    (BM, 1) tile, as the one-channel tiles do, compiled it to 32 registers and as many local stores and loads as
    multiply-adds (5.6 ms on an H100 for a 10 x 3 x 224 x 224 input against cuDNN's 0.2)."""
    problem = tmp_path / "stem.py"
    problem.write_text(STEM)
    result = compose_ok(problem, max_variants=1)
    assert first(result).config["conv_0"]["layout"] == "fma" and first(result).config["conv_0"]["BN"] == 64
    candidate = tmp_path / "candidate.py"
    candidate.write_text(first(result).source)
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sass_offline.py"), str(problem), str(candidate),
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(out.read_text())["kernels"]
    kinds = row["kinds"]
    assert kinds["FFMA"] >= 49 * 3 * 32 and kinds.get("STL", 0) < kinds["FFMA"] // 10, kinds
