"""The norms as primitives compute what the layers compute (batch statistics in training mode, running ones in
eval mode), and the composed candidates pass the evaluator with the strict guard."""

import pytest
import torch
import torch.nn.functional as F

from kfoundry.experts.composer.ir.builder import GraphBuilder
from kfoundry.experts.composer.read import norm
from tests.experts.composer.helpers import (
    EXAMPLE_SIZES,
    check_variants,
    compose_ok,
    example,
    first,
    fixture,
    run_ir,
    submit,
    verdict,
)

CASES = {
    "layer_rms_norm": (fixture("layer_rms_norm"), {}, False),
    "batchnorm_train": (fixture("batchnorm_relu"), {}, False),
    "batchnorm_eval": (fixture("batchnorm_relu"), {}, True),
    "group_instance_norm": (fixture("group_instance_norm"), {}, False),
    "example_layernorm": (example("layernorm"), EXAMPLE_SIZES["layernorm"], False),
}


@pytest.fixture(scope="module")
def composed():
    out = {}
    for name, (problem, sizes, eval_mode) in CASES.items():
        result = compose_ok(problem, eval_mode=eval_mode)  # examples: composed at full size, evaluated small
        out[name] = (result, submit(problem, first(result).source, sizes, eval_mode, label=name))
    return out


def _graph(build, *tensors):
    b = GraphBuilder()
    values = [b.input(f"t{i}", i, t) for i, t in enumerate(tensors)]
    b.graph.outputs = [build(b, *values)]
    return run_ir(b.graph, dict(zip(values, tensors)))[0]


def test_layer_and_rms_norm():
    x, w, bias = torch.randn(3, 4, 6) * 3 + 1, torch.rand(4, 6) + 0.5, torch.randn(4, 6)
    torch.testing.assert_close(_graph(lambda b, x, w, bb: norm.layer_norm(b, x, 2, w, bb, 1e-5), x, w, bias),
                               F.layer_norm(x, (4, 6), w, bias, 1e-5))
    torch.testing.assert_close(_graph(lambda b, x, w, bb: norm.rms_norm(b, x, 1, None, 1e-6), x, w, bias),
                               F.rms_norm(x, (6,), None, 1e-6))


@pytest.mark.parametrize("training", [True, False])
def test_batch_and_instance_norm(training):
    x = torch.randn(4, 3, 5, 2) * 2 + 1
    rm, rv, w, bias = torch.randn(3), torch.rand(3) + 0.5, torch.rand(3) + 0.5, torch.randn(3)
    got = _graph(lambda b, x, rm, rv, w, bb: norm.batch_norm(b, x, rm, rv, w, bb, training, 1e-5), x, rm, rv, w, bias)
    torch.testing.assert_close(got, F.batch_norm(x, rm.clone(), rv.clone(), w, bias, training, 0.1, 1e-5))
    got = _graph(lambda b, x, rm, rv, w, bb: norm.instance_norm(b, x, rm, rv, w, bb, training, 1e-5),
                 x, rm, rv, w, bias)
    torch.testing.assert_close(got, F.instance_norm(x, rm.clone(), rv.clone(), w, bias, training, 0.1, 1e-5))


def test_group_norm():
    x, w, bias = torch.randn(2, 6, 3, 4) + 2, torch.rand(6) + 0.5, torch.randn(6)
    got = _graph(lambda b, x, w, bb: norm.group_norm(b, x, 3, w, bb, 1e-5, list(x.shape), ""), x, w, bias)
    torch.testing.assert_close(got, F.group_norm(x, 3, w, bias, 1e-5))
    with pytest.raises(ValueError):
        _graph(lambda b, x, w, bb: norm.group_norm(b, x, 4, w, bb, 1e-5, list(x.shape), ""), x, w, bias)


def test_norms_are_one_row_kernel_each(composed):
    expected = {"layer_rms_norm": 2, "batchnorm_train": 1, "group_instance_norm": 2, "example_layernorm": 1}
    for name, kernels in expected.items():
        result, _ = composed[name]
        source = first(result).source
        assert first(result).name.startswith("row_") and source.count("@triton.jit\ndef _row_") == kernels, name
        assert "def _pointwise" not in source  # GroupNorm's SiLU runs in the GroupNorm kernel
        check_variants(result)
    # eval mode: running statistics, so no reduction at all
    assert first(composed["batchnorm_eval"][0]).name.startswith("pointwise_")


@pytest.mark.parametrize("name", sorted(CASES))
def test_norm_candidates_pass_the_evaluator(composed, name):
    verdict(composed[name][1])
