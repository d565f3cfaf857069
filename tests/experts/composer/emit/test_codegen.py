"""Assembling candidate files: layout, the guard's static rules, ModelNew's constructor and forward."""

import ast

import pytest

from kfoundry.evaluate.shared.device_facts import target_facts
from kfoundry.experts.composer.compose import capture, group_configs
from kfoundry.experts.composer.emit.codegen import generate
from kfoundry.experts.composer.plan.fusion import plan
from kfoundry.experts.composer.read.model_init import init_parts
from kfoundry.experts.composer.read.trace import load_sample
from kfoundry.guard.static import check_source
from tests.experts.composer.helpers import fixture


def _source(name: str, index: int = 0, eval_mode: bool = False, device=None) -> str:
    sample = load_sample(fixture(name), eval_mode=eval_mode)
    the_plan = plan(capture(sample).graph)
    choice = {g.name: group_configs(g, "fp32", None, device)[index] for g in the_plan.groups}
    return generate(the_plan, init_parts(sample.source.text), choice, sample.model, "A title.")


@pytest.mark.parametrize("name", ["linear_gelu_scale", "reductions", "group_instance_norm", "pooling", "conv2d_relu",
                                  "matmul_bmm", "layer_rms_norm", "conv3d_transpose", "batchnorm_relu"])
def test_generated_files_pass_the_static_guard(name):
    source = _source(name)
    assert check_source(source) == []
    tree = ast.parse(source)
    assert ast.get_docstring(tree) == "A title."
    order = [type(node).__name__ for node in tree.body]
    assert order.index("ClassDef") == len(order) - 1  # imports, helpers, kernels, then ModelNew
    model_new = tree.body[-1]
    methods = [n.name for n in model_new.body if isinstance(n, ast.FunctionDef)]
    assert methods == ["__init__", "forward"]


def test_forward_launches_and_returns_the_outputs():
    source = _source("reductions")
    forward = source.split("def forward(self, x, y, target):")[1]
    # `sum` is a builtin: the host variable is sum_2
    assert "return (sum_2, mean, amax, argmax2, amin, argmin, softmax, log_softmax, logsumexp, loss)" in forward
    assert forward.count("_kernel[") == 4
    assert "torch.empty(y.shape, device=x.device, dtype=x.dtype)" in forward


def test_variants_change_only_the_configuration():
    h200 = target_facts("H200")  # the two fp16x3 tiles measured there (an RTX 4090 fits one)
    a, b = _source("linear_gelu_scale", 0, device=h200), _source("linear_gelu_scale", 1, device=h200)
    assert "BK=64, GROUP_M=8, num_warps=8, num_stages=3)" in a
    assert "BK=32, GROUP_M=8, num_warps=8, num_stages=4)" in b
    changed = [(x, y) for x, y in zip(a.splitlines(), b.splitlines()) if x != y]
    assert len(a.splitlines()) == len(b.splitlines()) and changed
    assert all("BK=" in x and "num_stages=" in x for x, _ in changed)


def test_host_helpers_only_when_used():
    assert "def _pool_out_size" in _source("pooling")
    assert "def _pool_out_size" not in _source("linear_gelu_scale")
    assert "def _tanh" in _source("matmul_bmm") and "def _tanh" not in _source("conv2d_relu")
