"""Loading a problem like the evaluator does, and both tracers: torch.fx and the dispatch-level fallback."""

import pytest
import torch

from kfoundry.errors import ProblemError
from kfoundry.experts.composer.read.trace import (
    TensorMeta,
    TraceFailed,
    load_sample,
    trace_dispatch,
    trace_fx,
)
from tests.experts.composer.helpers import example, fixture


def test_load_sample_builds_model_and_inputs_with_the_set_values():
    sample = load_sample(example("linear_epilogue"), {"batch_size": 4, "in_features": 8, "out_features": 6})
    assert sample.inputs[0].shape == (4, 8)
    assert sample.model.linear.weight.shape == (6, 8) and sample.model.training
    again = load_sample(example("linear_epilogue"), {"batch_size": 4, "in_features": 8, "out_features": 6})
    assert torch.equal(sample.model.linear.weight, again.model.linear.weight)  # seeded
    assert not load_sample(fixture("batchnorm_relu"), eval_mode=True).model.training


def test_bad_problem_is_a_problem_error(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n")
    with pytest.raises(ProblemError):
        load_sample(bad)


def test_fx_trace_records_shapes_and_specializes_constants():
    class M(torch.nn.Module):
        def forward(self, x, k):
            return x.sum(dim=1) * k, x.shape[0]

    trace = trace_fx(M(), [torch.randn(3, 5), 2.0])
    assert trace.kind == "fx" and trace.output_kind == "tuple"
    metas = [v for v in trace.values.values() if isinstance(v, TensorMeta)]
    assert TensorMeta((3,), torch.float32) in metas
    assert sorted(trace.placeholders.values()) == [("input", 0), ("input", 1)]


def test_fx_fails_on_control_flow_and_the_dispatch_trace_reads_it():
    sample = load_sample(fixture("control_flow"))
    with pytest.raises(TraceFailed, match="torch.fx"):
        trace_fx(sample.model, sample.inputs)
    trace = trace_dispatch(sample.model, sample.inputs)
    assert trace.kind == "aten" and trace.output_kind == "tensor"
    kinds = {kind for kind, _ in trace.placeholders.values()}
    assert kinds == {"param", "input"}
    assert ("param", "fc.weight") in trace.placeholders.values()
    names = {str(n.target) for n in trace.graph_module.graph.nodes}
    assert any("addmm" in n for n in names)


def test_outputs_that_are_not_tensors_fail():
    class M(torch.nn.Module):
        def forward(self, x):
            return {"y": x}

    with pytest.raises(TraceFailed):
        trace_fx(M(), [torch.randn(2)])


def test_meta_samples_hold_shapes_only():
    sample = load_sample(example("linear_epilogue"), device="meta")
    assert sample.device == "meta" and sample.inputs[0].is_meta and sample.model.linear.weight.is_meta
    assert sample.inputs[0].shape == (8192, 4096)  # the full size, allocated nowhere
    trace = trace_fx(sample.model, sample.inputs)
    assert TensorMeta((8192, 4096), torch.float32) in trace.values.values()
