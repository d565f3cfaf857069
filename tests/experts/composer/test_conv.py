"""The convolution template: Conv2d / Conv3d / ConvTranspose2d as implicit GEMMs with fused epilogues."""

import pytest

from kfoundry.experts.composer.conv import configs
from kfoundry.experts.composer.fusion import Group
from tests.experts.composer.helpers import (
    EXAMPLE_SIZES,
    check_variants,
    compose_ok,
    example,
    first,
    fixture,
    submit,
    verdict,
)

CASES = {
    "conv2d_relu": (fixture("conv2d_relu"), {}),
    "conv3d_transpose": (fixture("conv3d_transpose"), {}),
    "example": (example("conv_relu"), EXAMPLE_SIZES["conv_relu"]),
    "channels_last": (fixture("conv_channels_last"), {}),  # grouped, dilated, strided, a strided input; 3D
}


@pytest.fixture(scope="module")
def composed():
    out = {}
    for name, (problem, sizes) in CASES.items():
        result = compose_ok(problem)  # examples: composed at full size, evaluated small (sizes come from tensors)
        out[name] = (result, submit(problem, first(result).source, sizes, label=name))
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
    deconv = both.split("def _conv_1_kernel")[1]
    assert "% 2 == 0" in deconv  # the stride-2 gather of a transposed convolution
    assert "_conv_1_kernel[(triton.cdiv(" in both and ", 2)](" in both  # one grid column per group


@pytest.mark.parametrize("name", sorted(CASES))
def test_conv_candidates_pass_the_evaluator(composed, name):
    verdict(composed[name][1])


def test_tf32_is_a_variant_for_convolutions():
    precisions = [c["precision"] for c in configs(Group("conv", 0, (2, 4, 4, 4)))]
    assert precisions[0] == "tf32x3" and "tf32" in precisions and "ieee" in precisions


def test_channels_last_variants_where_the_loop_fits(composed):
    result, _ = composed["channels_last"]
    layouts = [[config["layout"] for config in c.config.values()] for c in result.candidates]
    assert layouts == [["channels_last"] * 2, ["channels_last"] * 2, ["direct"] * 2, ["channels_last"] * 2]
    source = first(result).source
    assert "def _channels_last(" in source and "x_cl = _channels_last(" not in source  # the input is a view
    assert "transpose_cl = _channels_last(transpose)" in source and "v_cl = _channels_last(v)" in source
    assert " // " not in source.split("for it in range(")[1].split("kc = ")[0].replace("tap = it // chunks", "")
    # a transposed convolution keeps the direct gather (conv_1 of that fixture), and so does one with few input
    # channels per group
    assert {c.config["conv_1"]["layout"] for c in composed["conv3d_transpose"][0].candidates} == {"direct"}
    assert {c.config["conv_0"]["layout"] for c in composed["conv2d_relu"][0].candidates} == {"direct"}


def test_the_direct_variant_of_a_channels_last_problem_passes_too(composed):
    result, _ = composed["channels_last"]
    verdict(submit(CASES["channels_last"][0], result.candidates[2].source, label="channels_last_direct"))
