"""A plan's steps: its groups' and kernels' names and the one-line description of its groups."""

import torch

from kfoundry.experts.composer.ir.builder import GraphBuilder
from kfoundry.experts.composer.plan.fusion import plan
from kfoundry.experts.composer.plan.steps import KERNEL_WORDS, HostStep, describe_groups, kernel_name, origin_word


def test_an_origin_is_one_lowercase_word_of_the_op_it_ran():
    assert origin_word("nn.GroupNorm") == "group_norm" and origin_word("F.layer_norm") == "layer_norm"
    assert origin_word("aten._softmax") == "softmax" and origin_word("nn.ReLU") == "relu"
    assert origin_word("operator.truediv") == "div" and origin_word("weight") == ""


def test_kernels_are_named_after_their_kind_place_and_ops():
    b = GraphBuilder()
    x = b.input("x", 0, torch.randn(8, 16))
    w = b.param("w", torch.randn(16, 12))
    y = b.op("matmul", [x, w], origin="F.linear")
    z = b.op("gelu", [y], origin="F.gelu", approximate="none")
    b.graph.outputs = [b.op("reshape", [z], sizes=[96])]
    the_plan = plan(b.graph)
    (group,) = the_plan.groups
    assert group.name == "gemm_0" and kernel_name(group) == "_gemm_linear_gelu_0_kernel"
    assert len(group.kernel) <= len("__0_kernel") + KERNEL_WORDS
    assert any(isinstance(step, HostStep) for step in the_plan.steps)
    assert describe_groups(the_plan.groups) == "matmul with gelu fused"
    assert "gemm gemm_0" in the_plan.describe() and "host:" in the_plan.describe()
